"""TOML blocks shared by the release specs of the CLI, progress, noise-range and publish suites.

``from _specs import hierarchies`` (the tests folder is on ``sys.path``, see conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import tabdp

#: The bundled public code lists (geography, NAICS).
HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"


def hierarchies() -> str:
    """The ``[hierarchies.geo]`` and ``[hierarchies.industry]`` tables of the bundled lists.

    Returns:
        TOML text (state > county; naics2 > naics3 > naics4 > naics6).
    """
    return f"""[hierarchies.geo]
file = "{HIER.as_posix()}/geography.csv"
levels = ["state", "county"]

[hierarchies.industry]
file = "{HIER.as_posix()}/naics.csv"
levels = ["naics2", "naics3", "naics4", "naics6"]
"""


def one_table_spec(mechanism: str, *, name: str = "r", seed: int | None = None,
                   table_extra: str = "") -> str:
    """A release of one sum table ``t`` of ``x`` by ``c`` (domain a, b) from ``d.parquet``.

    Args:
        mechanism: The table's ``mechanism`` inline table, e.g. ``{ family = "gaussian",
            sigma = 1.0 }``.
        name: ``release.name``.
        seed: ``[randomness] seed`` (None: no such section).
        table_extra: More lines of the table (e.g. ``grid = 1.0``).

    Returns:
        TOML text (outputs under ``out/``).
    """
    randomness = "" if seed is None else f"[randomness]\nseed = {seed}\n"
    return f"""
[release]
name = "{name}"
[input]
path = "d.parquet"
[domains]
c = ["a", "b"]
{randomness}[output]
public = "out/public"
confidential = "out/confidential"
[[tables]]
name = "t"
measures = ["x"]
by = ["c"]
mechanism = {mechanism}
{table_extra}
"""


#: A one-table count release by state with a unit (format with ``data`` and ``hier``, the
#: folder of the bundled code lists): the comparison-kept and staging suites.
STATE_COUNT_SPEC = """
[release]
name = "kept"
[input]
path = "{data}"
unit = "estab_id"
[hierarchies.geo]
file = "{hier}/geography.csv"
levels = ["state", "county"]
[randomness]
seed = 3
[output]
public = "out/public"
confidential = "out/confidential"
[[tables]]
name = "estabs"
kind = "count"
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 2.0 }}
"""


#: An author-mode spec of one count table by state (dataset "cbp", the curator's; seed 5).
AUTHOR_STATE_COUNT_SPEC = """
[release]
name = "rel"
[input]
dataset = "cbp"
mode = "author"
unit = "estab_id"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
[hierarchies.geo]
file = "geography.csv"
levels = ["state", "county"]
[randomness]
seed = 5
[[tables]]
name = "n"
kind = "count"
by = ["state"]
mechanism = { family = "gaussian", sigma = 2.0 }
"""

#: A ``tabdp`` CLI that is killed (exit 137) at the ``KILL_AT``-th rename of the staging swap
#: (0: never): written to a file and run as a script by the crash tests.
RENAME_KILLER = """
import os, sys, pathlib, traceback
K = int(os.environ["KILL_AT"])
n = [0]
orig = pathlib.Path.rename
def rename(self, target):
    if any(f.filename.endswith("_staging.py") and f.name == "__exit__"
           for f in traceback.extract_stack()):
        n[0] += 1
        if n[0] == K:
            os._exit(137)
    return orig(self, target)
pathlib.Path.rename = rename
from tabdp.cli import main
sys.exit(main(sys.argv[1:]))
"""
