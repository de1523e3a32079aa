"""The release spec the lifetime-ledger tests run: a payroll sum and a count by county.

Shared by the spec, crash and Spark ledger suites (``from _ledger_specs import series_spec``).
"""

from __future__ import annotations

import json

COUNTIES = ["c1", "c2", "c3"]


def series_spec(*, name: str, data: str, ledger: str, series: str, lifetime: float | str,
                seed: int, public: str, confidential: str, extra: str = "") -> str:
    """The TOML text of one release of a series (unit ``estab``, tables ``pay`` and ``n``).

    Args:
        name: ``release.name``.
        data: ``input.path``.
        ledger: ``[ledger] path``.
        series: ``[ledger] series``.
        lifetime: ``[ledger] lifetime_budget`` (a number, or its TOML text).
        seed: ``[randomness] seed``.
        public: The public output folder.
        confidential: The confidential output folder.
        extra: More TOML appended.
    """
    return f"""
[release]
name = "{name}"
[input]
path = "{data}"
unit = "estab"
[domains]
county = {json.dumps(COUNTIES)}
[ledger]
path = "{ledger}"
series = "{series}"
lifetime_budget = {lifetime}
[randomness]
seed = {seed}
[output]
public = "{public}"
confidential = "{confidential}"
[[tables]]
name = "pay"
kind = "sum"
measures = ["payroll"]
by = ["county"]
mechanism = {{ family = "gaussian", sigma = 40.0 }}
[[tables]]
name = "n"
kind = "count"
by = ["county"]
mechanism = {{ family = "gaussian", sigma = 2.0 }}
{extra}
"""


def copy_ledger(src, dst) -> None:  # noqa: ANN001
    """Copy a ledger folder and its anchor (``.<name>.head.json`` next to it) to ``dst``.

    A copy without its anchor opens with a warning (the anchor is written then); the anchor
    copied under the new name keeps the copy's rollback evidence.
    """
    import shutil
    from pathlib import Path

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst)
    anchor = src.parent / f".{src.name}.head.json"
    if anchor.exists():
        shutil.copy2(anchor, dst.parent / f".{dst.name}.head.json")
