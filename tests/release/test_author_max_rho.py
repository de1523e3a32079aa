"""The curator's per-run cap on an author's budget (``[policy] max_rho``, ``Curator(max_rho=)``).

An author-mode spec chooses its own budget and mechanisms; without a lifetime ledger nothing
else bounds what one run spends. Under ``max_rho`` the budget must provably keep every unit
within the cap — checked from the spec's text (or the session's arguments) before anything is
read. Found by attack review R15 (a design note: ``[defaults] budget`` is a default, not a cap).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import write_curator  # noqa: E402

import tabdp  # noqa: E402
from tabdp import cli  # noqa: E402
from tabdp.datasets.synth import generate_establishments  # noqa: E402
from tabdp.exceptions import InvalidParameterError  # noqa: E402

SPEC = """
[release]
name = "capped"
[input]
mode = "author"
dataset = "cbp"
unit = "estab_id"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
bounds = {{ payroll = [0, 1e9], employment = [0, 1e5] }}
[domains]
state = ["01", "02"]
{budget}
[[tables]]
name = "payroll"
kind = "sum"
measures = ["payroll", "employment"]
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 1000.0 }}
[[tables]]
name = "n"
kind = "count"
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 1.0 }}
"""


def _validate(tmp_path: Path, budget: str, extra: str = "") -> tuple[int, str, str]:
    if not (tmp_path / "d.parquet").exists():
        generate_establishments(30, seed=1).write_parquet(tmp_path / "d.parquet")
    cfg = write_curator(tmp_path, {"cbp": "d.parquet"},
                        extra="[policy]\nmax_rho = 2.0\n" + extra, seeded=False)
    (tmp_path / "s.toml").write_text(SPEC.format(budget=budget), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["validate", str(tmp_path / "s.toml"), "--curator", str(cfg)],
                    stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("budget", "ok"), [
    ("[budget]\nrho = 2.0", True),
    ("[budget]\nrho = 2.5", False),
    ("", False),                                   # no budget, no default: refused
    # currencies here: payroll, employment (two measures) and rows, at most 3 + 1 (the
    # two-measure table could be one joint currency): a curve's top limit times 4
    ('[budget]\nrho = { "1e3" = 0.1, "1e7" = 0.5 }', True),
    ('[budget]\nrho = { "1e3" = 0.1, "1e7" = 0.6 }', False),
])
def test_author_budget_within_the_cap(tmp_path: Path, budget: str, ok: bool) -> None:
    code, out, err = _validate(tmp_path, budget)
    if ok:
        assert code == 0, err
    else:
        assert code == 2 and "max_rho" in err, (code, err)
        assert str(tmp_path) not in err  # the message quotes no server path


def test_a_default_budget_is_checked_against_the_cap(tmp_path: Path) -> None:
    code, _, err = _validate(tmp_path, "", extra="[defaults]\nbudget = { rho = 3.0 }\n")
    assert code == 2 and "max_rho" in err
    code, _, err = _validate(tmp_path, "", extra="[defaults]\nbudget = { rho = 1.5 }\n")
    assert code == 0, err


def test_the_cap_is_a_positive_number(tmp_path: Path) -> None:
    from tabdp.release.curator_config import parse_curator_config

    for bad in (0.0, -1.0, "2", True):
        with pytest.raises(tabdp.TabdpError, match="policy.max_rho"):
            parse_curator_config({"datasets": {"d": {"path": "/srv/d.parquet"}},
                                  "policy": {"max_rho": bad}}, "/")
    c = parse_curator_config({"datasets": {"d": {"path": "/srv/d.parquet"}},
                              "policy": {"max_rho": 2}}, "/")
    assert c.max_rho == 2.0


def test_curator_object_caps_author_sessions() -> None:
    df = pl.DataFrame({"county": ["a", "b"], "payroll": [10.0, 20.0]})
    schema = {"county": "String", "payroll": "Float64"}
    with pytest.raises(InvalidParameterError, match="max_rho"):
        tabdp.Curator(budget=3.0, max_rho=2.0)
    c = tabdp.Curator(max_rho=2.0, seed=1)
    c.add("d", df, schema=schema)
    with pytest.raises(InvalidParameterError, match="needs a budget"):
        c.author_session("d")
    with pytest.raises(InvalidParameterError, match="curves without total"):
        c.author_session("d", budget={1e3: 0.1, 1e7: 0.5})
    with pytest.raises(InvalidParameterError, match="a total of 2.5"):
        c.author_session("d", budget=tabdp.Budget({1e3: 0.1}, total=2.5))
    c.author_session("d", budget=2.0)
    c.author_session("d", budget=tabdp.Budget({1e3: 0.1, 1e7: 5.0}, total=2.0))
    c2 = tabdp.Curator(budget=1.0, max_rho=2.0, seed=1)
    c2.add("d", df, schema=schema)
    c2.author_session("d")
