"""The fix an error's hint suggests works when applied literally (review rev67w).

Each case is a spec (or command line) that fails, and the same spec with the hint's fix
applied as the hint words it; the fixed spec must then validate.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _specs import hierarchies, release_spec  # noqa: E402

from tabdp.cli import main
from tabdp.compare.sdc import parse_sdc
from tabdp.datasets import cbp_sample_path, hierarchy_path
from tabdp.exceptions import InvalidParameterError

#: The one table every case starts from (the cases replace its mechanism's words).
_TABLE = """[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county", "naics2"]
mechanism = { family = "gaussian", sigma = 1e5 }
"""
_DOMAINS = '[domains]\nnaics2 = ["11", "21"]'
_CONSISTENT = 'consistent = true\nrollups = [{ by = ["state", "naics2"], direct = true }]\n'


def _spec(domains: str = _DOMAINS, table: str = "", input_: str = "") -> str:
    return release_spec(
        _TABLE + table, name="t", path=cbp_sample_path().as_posix(),
        input_extra=f'unit = "estab_id"\n{input_}'.rstrip("\n"),
        sections=hierarchies("geo", files={"geo": hierarchy_path("geography").as_posix()})
        + domains)


def _validate(tmp_path: Path, spec: str) -> tuple[int, str]:
    path = tmp_path / "release.toml"
    path.write_text(spec, encoding="utf-8")
    out = io.StringIO()
    rc = main(["validate", str(path)], stdout=out, stderr=out)
    return rc, out.getvalue()


# (id, failing spec, words of the hint, spec with the hint applied literally)
_CASES = [
    # The hint said "add domains.naics2 = [...]": added at the end of a spec (after
    # [[tables]] or [output]) that dotted key lands inside the last table and is refused there.
    ("by column without a domain", _spec(domains=""),
     "add naics2 = [...] in the [domains] section",
     _spec(domains="") + '[domains]\nnaics2 = ["11", "21"]\n'),
    ("nonfinite clamp without bounds", _spec(input_='nonfinite = "clamp"\n'),
     "add input.bounds = { payroll = [0, 1e10] }",
     _spec(input_='nonfinite = "clamp"\nbounds = { payroll = [0, 1e10] }\n')),
    ("sum table without a mechanism",
     _spec().replace('mechanism = { family = "gaussian", sigma = 1e5 }\n', ""),
     'add calibrate = { family = "exp_polylog", targets = { "2.5e5" = 0.5, "2e10" = 50.0 }, '
     'typical_total = 1e7, fixed = { p = 1 } }',
     _spec().replace('mechanism = { family = "gaussian", sigma = 1e5 }',
                     'calibrate = { family = "exp_polylog", targets = { "2.5e5" = 0.5, '
                     '"2e10" = 50.0 }, typical_total = 1e7, fixed = { p = 1 } }')),
    ("consistent without a direct rollup",
     _spec(table='consistent = true\nrollups = [{ by = ["state", "naics2"] }]\n'),
     "add direct = true to a rollup", _spec(table=_CONSISTENT)),
    ("consistent with a non-additive mechanism",
     _spec(table=_CONSISTENT).replace('{ family = "gaussian", sigma = 1e5 }',
                                      '{ family = "log", sigma = 0.3, offset = 1e4 }'),
     'use e.g. family = "gaussian", "exp_polylog" or "laplace"',
     _spec(table=_CONSISTENT).replace('{ family = "gaussian", sigma = 1e5 }',
                                      '{ family = "laplace", scale = 1e5 }')),
    ("integer with a coarse grid", _spec(table="grid = 1000.0\ninteger = true\n" + _CONSISTENT),
     "set grid = 1.0, or remove integer",
     _spec(table="grid = 1.0\ninteger = true\n" + _CONSISTENT)),
    ("global rounding swamping the noise",
     _spec().replace("[output]", "[publication]\nround = 1e7\n[output]"),
     "tables[0].publication = { round = false }",
     _spec(table="publication = { round = false }\n").replace(
         "[output]", "[publication]\nround = 1e7\n[output]")),
    ("per-measure rounding in [publication]",
     _spec().replace("[output]", "[publication]\nround = { payroll = 1000 }\n[output]"),
     "round = 1000.0", _spec().replace("[output]", "[publication]\nround = 1000.0\n[output]")),
    ("ledger without a unit",
     _spec().replace('unit = "estab_id"\n', "")
     + '[ledger]\npath = "led"\nseries = "s"\nlifetime_budget = 8.0\n',
     'set input.unit = "<stable id column>" (e.g. "estab_id")',
     _spec() + '[ledger]\npath = "led"\nseries = "s"\nlifetime_budget = 8.0\n'),
    ("max_cells of zero", _spec(input_="max_cells = 0\n"), "e.g. max_cells = 10",
     _spec(input_="max_cells = 10\n")),
    ("discrete mechanism on a fractional grid",
     _spec(table="grid = 2.5\n").replace('"gaussian", sigma = 1e5',
                                         '"discrete_gaussian", sigma = 1e5'),
     "use a whole-number grid (e.g. 10)",
     _spec(table="grid = 10\n").replace('"gaussian", sigma = 1e5',
                                        '"discrete_gaussian", sigma = 1e5')),
    ("hive partitioning of a catalog table",
     _spec().replace(f'path = "{cbp_sample_path().as_posix()}"',
                     'table = "db.t"\nhive_partitioning = true'),
     "remove input.hive_partitioning",
     _spec().replace(f'path = "{cbp_sample_path().as_posix()}"', 'table = "db.t"')),
    ("falling calibration targets",
     _spec().replace('mechanism = { family = "gaussian", sigma = 1e5 }',
                     'calibrate = { family = "exp_polylog", targets = { "1e3" = 5.0, '
                     '"1e7" = 1.0 }, typical_total = 1e7, fixed = { p = 1 } }'),
     'e.g. targets = { "1e3" = 0.5, "1e7" = 10.0 }',
     _spec().replace('mechanism = { family = "gaussian", sigma = 1e5 }',
                     'calibrate = { family = "exp_polylog", targets = { "1e3" = 0.5, '
                     '"1e7" = 10.0 }, typical_total = 1e7, fixed = { p = 1 } }')),
    # stop 68: the levels of a hierarchy written finest first; the hint said "fix the mapping
    # file, or list the levels coarsest first" (the file was right) under the key
    # hierarchies.geo.file
    ("hierarchy levels finest first",
     _spec().replace('levels = ["state", "county"]', 'levels = ["county", "state"]'),
     'write levels = ["state", "county"] in [hierarchies.geo]', _spec()),
    # stop 68: a cv threshold written as a percentage passed silently (it flagged almost
    # nothing: cv_flag = 30 flags only cells whose sd is 30 times their estimate)
    ("cv_flag as a percentage",
     _spec().replace("[output]", "[publication]\ncv_flag = 30\n[output]"),
     "write cv_flag = 0.3 for 30 %",
     _spec().replace("[output]", "[publication]\ncv_flag = 0.3\n[output]")),
    ("a table's suppress_cv as a percentage", _spec(table="publication = { suppress_cv = 50 }\n"),
     "write suppress_cv = 0.5 for 50 %", _spec(table="publication = { suppress_cv = 0.5 }\n")),
]


@pytest.mark.parametrize(("bad", "hint", "fixed"), [c[1:] for c in _CASES],
                         ids=[c[0] for c in _CASES])
def test_the_hint_fixes_the_spec(tmp_path: Path, bad: str, hint: str, fixed: str) -> None:
    rc, out = _validate(tmp_path, bad)
    assert rc == 2, out
    assert hint in out.split("Hint:", 1)[-1].replace("\n", " "), out
    rc, out = _validate(tmp_path, fixed)
    assert rc == 0, out


def test_sdc_help_and_hint_name_every_option() -> None:
    """``--sdc`` accepts ``time=N``; its help and its error hint named every option but that.

    The hint's example options, applied literally, parse.
    """
    import argparse

    from tabdp.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    sdc_help = next(a.help for a in sub.choices["compare"]._actions if "--sdc" in a.option_strings)
    with pytest.raises(InvalidParameterError) as err:
        parse_sdc("p=10; bogus=3")
    hint = str(err.value).split("Hint:", 1)[1]
    from tabdp.compare import sdc

    for key in sdc._KEYS:
        assert f"{key}=" in (sdc_help or "").replace("|", "="), key
        assert f"{key}=" in hint, key
    assert parse_sdc("p=10; nk=2,85; freq=3; secondary=OPT; time=5").time == 5
    defaults = parse_sdc(None)
    stated = f"p={defaults.p}; secondary={defaults.secondary}; time={defaults.time}; linked="
    assert stated in (sdc_help or "")
    page = (Path(__file__).resolve().parents[1] / "docs" / "compare.md").read_text("utf-8")
    assert f"Default:\n`{stated}{defaults.linked}`" in page


def test_no_ledger_hint_gives_a_working_init_command(tmp_path: Path) -> None:
    """``tabdp ledger verify`` of a missing ledger names a ``tabdp ledger init`` that runs.

    The hint said "`tabdp ledger init PATH`", which argparse refuses (--series and
    --lifetime-budget are required).
    """
    import re
    import shlex

    pytest.importorskip("deltalake")
    path = tmp_path / "ledger"
    out = io.StringIO()
    assert main(["ledger", "verify", str(path)], stdout=out, stderr=out) == 2
    command = re.search(r"`tabdp (ledger init [^`]*)`", out.getvalue())
    assert command, out.getvalue()
    argv = [{"PATH": str(path), "S": "s", "B": "4.0"}.get(a, a)
            for a in shlex.split(command.group(1))]
    try:
        rc = main(argv, stdout=out, stderr=out)
    except SystemExit as exit_:  # argparse refuses a command line by exiting
        rc = exit_.code
    assert rc == 0, out.getvalue()
    assert main(["ledger", "verify", str(path)], stdout=out, stderr=out) == 0, out.getvalue()


def test_existing_plan_out_folder_hint_names_out(tmp_path: Path) -> None:
    """``tabdp plan --out DIR`` of an existing DIR: the hint names --out, which chose DIR.

    The hint said only "choose a new folder in the spec's [output] section", which does not
    move a folder given with --out.
    """
    spec = tmp_path / "release.toml"
    spec.write_text(_spec(), encoding="utf-8")
    (tmp_path / "p1").mkdir()
    out = io.StringIO()
    assert main(["plan", str(spec), "--out", str(tmp_path / "p1")], stdout=out, stderr=out) == 2
    assert "(or another plan --out)" in out.getvalue().split("Hint:", 1)[1], out.getvalue()
    assert main(["plan", str(spec), "--out", str(tmp_path / "p2")], stdout=out, stderr=out) == 0


@pytest.mark.parametrize("call", ["Publication", "forecast", "usability_issues"])
def test_python_api_refuses_a_percentage_cv_threshold(call: str) -> None:
    """``cv_flag=30`` (meant as 30 %) passed silently in the Python API too (stop 68)."""
    from tabdp.mechanisms import Gaussian
    from tabdp.planning import forecast, usability_issues
    from tabdp.release.spec import Publication

    run = {"Publication": lambda: Publication(cv_flag=30),
           "forecast": lambda: forecast(Gaussian(sigma=1.0), [10.0], cv_flag=30),
           "usability_issues": lambda: usability_issues(Gaussian(sigma=1.0), cv_flag=30)}[call]
    with pytest.raises(InvalidParameterError, match=r"got 30\.\nHint: write cv_flag=0\.3 "):
        run()


def test_hierarchy_file_that_does_not_nest_names_the_file_and_a_code(tmp_path: Path) -> None:
    """A mapping that nests in no order: the file is to fix; the hint names a code (stop 68)."""
    geo = tmp_path / "geo.csv"
    geo.write_text("state,county\nA,a1\nA,a2\nB,a2\nB,b1\n", encoding="utf-8")
    spec = release_spec(_TABLE, name="t", path=cbp_sample_path().as_posix(),
                        input_extra='unit = "estab_id"',
                        sections=hierarchies("geo", files={"geo": geo.as_posix()}) + _DOMAINS)
    rc, out = _validate(tmp_path, spec)
    assert rc == 2 and "hierarchies.geo.file:" in out, out
    hint = out.split("Hint:", 1)[-1].replace("\n", " ")
    assert "each 'county' code is on rows of one 'state' code" in hint, out
    assert "'a2'" in hint and "['A', 'B']" in hint, out


def test_consistent_hint_reorders_a_fine_to_coarse_mapping() -> None:
    """``consistent`` given a mapping fine to coarse: the hint's select makes it work (stop 68)."""
    import polars as pl

    from tabdp.hierarchy import consistent
    from tabdp.mechanisms import Gaussian

    frame = pl.DataFrame({"county": ["a1", "a2", "b1"], "state": ["A", "A", "B"]})
    released = {("county",): pl.DataFrame({"county": ["a1", "a2", "b1"], "n": [1.0, 2.0, 3.0]}),
                ("state",): pl.DataFrame({"state": ["A", "B"], "n": [3.0, 3.0]})}
    args = {"measures": ["n"], "mechanisms": {k: Gaussian(sigma=1.0) for k in released},
            "outputs": list(released)}
    with pytest.raises(InvalidParameterError) as info:
        consistent(released, hierarchies={"geo": frame}, **args)
    hint = str(info.value).split("Hint:", 1)[1]
    assert "pass hierarchies={'geo': frame.select(['state', 'county'])}" in hint, hint
    out = consistent(released, hierarchies={"geo": frame.select(["state", "county"])}, **args)
    assert out[("state",)]["n"].to_list() == pytest.approx([3.0, 3.0])
