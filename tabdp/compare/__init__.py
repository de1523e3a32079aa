"""Compare a DP release with traditional disclosure control on the same data (curator only).

`compare()` runs the spec's DP release exactly as ``tabdp run`` does, and the traditional
release of the same tables with the Tau-Argus engine (through the optional ``pytauargus``
package: ``pip install "tabdp[sdc]"``): primary p% / (n,k) dominance / frequency rules, then
secondary cell suppression (OPT or MOD) with the spec's hierarchies as hierarchical dimensions,
or controlled rounding (RND). It audits the suppression by linear programming (the interval an
intruder derives for every suppressed cell from everything published), measures the utility of
both releases against the truth and puts their risks side by side. Everything it writes goes to
the spec's CONFIDENTIAL folder: the comparison reads the true tables.

Example:
    >>> from tabdp.compare import parse_sdc
    >>> parse_sdc("p=10; nk=2,85; secondary=OPT").rules()
    'P(10,1)|NK(2,85)'
"""

from tabdp.compare.audit import AuditResult, audit_system, hierarchical_constraints
from tabdp.compare.core import CompareResult, compare, compare_plan
from tabdp.compare.sdc import SdcOptions, parse_sdc

__all__ = [
    "AuditResult",
    "CompareResult",
    "SdcOptions",
    "audit_system",
    "compare",
    "compare_plan",
    "hierarchical_constraints",
    "parse_sdc",
]
