"""The release workflow: TOML specs, the runner, rollups and publication rules.

Example:
    >>> from tabdp.release import load_spec, run_release, plan_summary
    >>> callable(load_spec) and callable(run_release) and callable(plan_summary)
    True
"""

from tabdp.release.curator_config import (
    CuratorConfig,
    DatasetDecl,
    load_curator_config,
    parse_curator_config,
)
from tabdp.release.publish import FLAG_CODES, publish
from tabdp.release.rollup import rollup, sum_error_law
from tabdp.release.runner import (
    DataDependentFailure,
    ReleaseResult,
    plan_summary,
    run_release,
    write_plan,
)
from tabdp.release.spec import ReleaseSpec, load_spec, parse_spec

__all__ = [
    "CuratorConfig",
    "DatasetDecl",
    "load_curator_config",
    "parse_curator_config",
    "FLAG_CODES",
    "publish",
    "rollup",
    "sum_error_law",
    "DataDependentFailure",
    "ReleaseResult",
    "plan_summary",
    "run_release",
    "write_plan",
    "ReleaseSpec",
    "load_spec",
    "parse_spec",
]
