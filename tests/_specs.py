"""TOML blocks shared by the release specs of the CLI and progress suites.

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
