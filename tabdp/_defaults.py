"""Defaults shared by the Python API (``df.dp``, sessions) and release specs (``tabdp run``).

One set of defaults, so a release behaves the same whichever way it is run
(docs/release-workflow.md, "Defaults"):

* `NEGATIVES` — negative values of a summed measure: ``"error"`` (the safe default:
  a curator-mode release refuses them, whatever the mechanism, so that a data error such as a
  negative payroll is never summed silently; an author-mode release must declare a rule).
  Signed measures say so with ``"allow"`` (additive mechanisms; a mechanism that needs
  non-negative contributions, such as a log transform, still refuses negative unit-cell
  contributions in curator mode); ``"zero"`` sets negative values to 0, ``"drop"`` drops
  their rows.
* `OUT_OF_DOMAIN_KEYS` — rows whose key is outside the public key set (the domains, or
  the allowed key combinations) are not released: ``"drop"``. Their number is confidential
  (the session's confidential report, ``confidential.json``); the key set, not the data,
  decides the published cells in both.

Example:
    >>> NEGATIVES, NEGATIVE_RULES, OUT_OF_DOMAIN_KEYS
    ('error', ('error', 'allow', 'zero', 'drop'), 'drop')
"""

from __future__ import annotations

__all__ = ["NEGATIVES", "NEGATIVE_RULES", "OUT_OF_DOMAIN_KEYS"]

#: Default rule for negative values of summed measures (Python ``negatives=`` and the spec's
#: ``input.negatives``).
NEGATIVES = "error"
#: Every rule for negative values, in both APIs.
NEGATIVE_RULES = ("error", "allow", "zero", "drop")
#: Rows whose key is outside the public key set: not released (counted confidentially).
OUT_OF_DOMAIN_KEYS = "drop"
