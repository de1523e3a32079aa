"""Author-mode runs charged to the curator's lifetime ledger, on the curator's privacy unit.

Two gaps of author mode (issues 27 and 31): each ``tabdp run`` of an author was a fresh
session, so many runs averaged the noise away; and the author chose ``input.unit``, so a
firm of several rows could be charged row by row. The curator configuration's dataset now
carries ``unit`` and ``ledger`` (docs/privacy-semantics.md, "Lifetime budgets across author
runs" and "The curator fixes the privacy unit").
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.exceptions import SpecError
from tabdp.release import load_curator_config
from tabdp.release.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import warn_from_another_thread, write_curator  # noqa: E402

pytest.importorskip("deltalake")

COUNTIES = ["c1", "c2", "c3"]
LIFETIME = 1.0
#: count with sigma 1: rho per unit per run = max_rows^2 / (2 sigma^2) = 0.5 * (rows <= 1)
SPEC = """
[release]
name = "{name}"
[input]
dataset = "firms"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
{unit}
[domains]
county = {counties}
[randomness]
seed = {seed}
[[tables]]
name = "n"
kind = "count"
by = ["county"]
mechanism = {{ family = "gaussian", sigma = 1.0 }}
"""


def _firms(n: int = 30, extra: bool = False) -> pl.DataFrame:
    """Firms with 1 to 3 rows each (unit = firm), in one county each."""
    ids = np.repeat(np.arange(n, dtype=np.int64), 1 + np.arange(n) % 3)
    df = pl.DataFrame({"firm": ids, "county": np.array(COUNTIES)[ids % 3],
                       "payroll": np.linspace(1.0, 50.0, len(ids))})
    if extra:  # the neighbour: one more firm (one record)
        df = pl.concat([df, pl.DataFrame({"firm": [10**6], "county": ["c2"],
                                          "payroll": [7.0]})])
    return df


def _server(root: Path, *, ledger: bool = True, unit: bool = True, extra: bool = False,
            policy: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    _firms(extra=extra).write_parquet(root / "data" / "firms.parquet")
    if ledger and not (root / "ledgers" / "firms").exists():
        (root / "ledgers").mkdir(mode=0o700, exist_ok=True)
        assert cli.main(["ledger", "init", str(root / "ledgers" / "firms"), "--series",
                         "firms-series", "--lifetime-budget", str(LIFETIME)],
                        stdout=io.StringIO()) == 0
    dataset_keys = {"unit": 'unit = "firm"' if unit else "",
                    "ledger": 'ledger = "ledgers/firms"' if ledger else ""}
    write_curator(root, {"firms": "data/firms.parquet"}, extra=policy,
                  dataset_extra={"firms": "\n".join(v for v in dataset_keys.values() if v)})
    return root / "curator.toml"


def _spec(root: Path, name: str, *, seed: int = 1, unit: str = "") -> Path:
    f = root / f"{name}.toml"
    f.write_text(SPEC.format(name=name, unit=unit, seed=seed, counties=json.dumps(COUNTIES)))
    return f


def _cli(root: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(root)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*args, "--curator", "curator.toml"], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _run(root: Path, monkeypatch: pytest.MonkeyPatch, name: str, **kw: object
         ) -> tuple[int, str, str]:
    spec = _spec(root, name, **kw)  # type: ignore[arg-type]
    return _cli(root, monkeypatch, "run", spec.name, "--test-seed")


def test_repeated_author_runs_are_charged_to_the_ledger(tmp_path, monkeypatch):
    """Run after run, each unit's lifetime rho is the sum of its runs; at the budget: left out."""
    root = tmp_path / "server"
    _server(root)
    firms = _firms()
    n_firms = firms["firm"].n_unique()
    totals = []
    for i in range(3):
        code, _, err = _run(root, monkeypatch, f"r{i}", seed=i + 1)
        assert code == 0, err
        conf = root / "releases" / f"r{i}" / "confidential"
        per = pl.read_parquet(conf / "per_record_losses.parquet")
        summary = json.loads((root / "releases" / f"r{i}" / "public" /
                              "summary.json").read_text())
        life = summary["lifetime"]
        # the statement is from public terms only: the ledger's series and lifetime budget,
        # never its contents (how many releases it holds is not stated)
        assert life["series"] == "firms-series" and "releases_before" not in life
        assert life["lifetime_budget"]["rho"] == LIFETIME  # the ledger's recorded budget
        assert "ledgers" not in json.dumps(summary)  # no server path in public files
        totals.append(per)
    # unit = firm (inherited from the curator): one row per firm, never per row
    assert totals[0].height == n_firms and "firm" in totals[0].columns
    # a count with sigma 1 and one row per unit per cell: rho = 0.5 a run
    assert totals[0]["rho"].to_list() == [0.5] * n_firms
    assert totals[1]["rho_lifetime"].to_list() == [1.0] * n_firms
    # run 3: every firm would pass its lifetime budget 1.0: all left out, charged nothing
    assert totals[2].height == 0
    with tabdp.Ledger.open(root / "ledgers" / "firms") as led:
        assert led.releases == 3
        state = led.state()
        assert state.height == n_firms
        assert state["rho"].to_list() == pytest.approx([1.0] * n_firms, rel=1e-12)
        assert [e.get("label") for e in led.entries[1:]] == ["r0", "r1", "r2"]
    # the third run's counts are noise only (every firm left out; 10 firms a county before)
    n = pl.read_parquet(root / "releases" / "r2" / "public" / "n.parquet")
    assert n.height == 3 and n["estimate"].abs().max() < 6
    first = pl.read_parquet(root / "releases" / "r0" / "public" / "n.parquet")
    assert first["estimate"].min() > 4


def test_validate_charges_nothing_and_opens_no_ledger(tmp_path, monkeypatch):
    root = tmp_path / "server"
    _server(root)
    spec = _spec(root, "v")
    with tabdp.Ledger.open(root / "ledgers" / "firms"):  # held: validate must not need it
        code, _, err = _cli(root, monkeypatch, "validate", spec.name)
    assert code == 0, err
    with tabdp.Ledger.open(root / "ledgers" / "firms") as led:
        assert led.releases == 0


def test_concurrent_author_run_refused_before_data_without_server_paths(tmp_path,
                                                                      monkeypatch):
    root = tmp_path / "server"
    _server(root)
    with tabdp.Ledger.open(root / "ledgers" / "firms"):
        code, out, err = _run(root, monkeypatch, "busy")
    assert code == 2
    assert "ledger of dataset 'firms' is in use by another run" in err
    assert str(tmp_path) not in out + err and "ledgers" not in out + err
    assert not (root / "releases" / "busy" / "public").exists()
    # a missing ledger: refused the same way, no path either
    os.rename(root / "ledgers" / "firms", root / "ledgers" / "moved")
    code, out, err = _run(root, monkeypatch, "gone")
    assert code == 2 and "cannot be used" in err
    assert str(tmp_path) not in out + err


def test_neighbouring_servers_with_a_ledger_look_alike(tmp_path, monkeypatch):
    """One firm more: the same exit codes, messages, and non-noisy outputs, run after run."""
    results = []
    for extra in (False, True):
        root = tmp_path / ("d1" if extra else "d0")
        _server(root, extra=extra)
        runs = []
        for i in range(3):
            code, out, err = _run(root, monkeypatch, f"r{i}", seed=7 + i)
            pub = root / "releases" / f"r{i}" / "public"
            table = pl.read_parquet(pub / "n.parquet")
            summary = json.loads((pub / "summary.json").read_text())
            runs.append((code, out.replace(str(root), "ROOT"), err.replace(str(root), "ROOT"),
                         table.drop("estimate", "lower", "upper", "cv", "flag",
                                    strict=False).to_dicts(),
                         json.dumps(summary["lifetime"], sort_keys=True),
                         sorted(p.name for p in pub.iterdir())))
        results.append(runs)
    assert results[0] == results[1]
    assert all(r[0] == 0 for r in results[0])


def test_require_ledger_refuses_from_the_configuration(tmp_path, monkeypatch):
    root = tmp_path / "server"
    _server(root, ledger=False, policy="[policy]\nrequire_ledger = true\n")
    spec = _spec(root, "nr")
    for command in ("validate", "run"):
        args = (command, spec.name) + (("--test-seed",) if command == "run" else ())
        code, out, err = _cli(root, monkeypatch, *args)
        assert code == 2
        assert "require_ledger" in err and "'firms' has none" in err
        assert str(tmp_path) not in out + err
    assert not (root / "releases" / "nr").exists()
    # without the policy: runs (no lifetime accounting), as before
    _server(root, ledger=False)
    code, _, err = _run(root, monkeypatch, "ok")
    assert code == 0, err
    summary = json.loads((root / "releases" / "ok" / "public" / "summary.json").read_text())
    assert "lifetime" not in summary


@pytest.mark.parametrize("unit, expect", [
    ("", "firm"),                    # omitted: inherited from the curator
    ('unit = "firm"', "firm"),       # the same column: accepted
    ('unit = "county"', None),       # another column: refused
    ('unit = "payroll"', None),
])
def test_the_curator_fixes_the_unit(tmp_path, monkeypatch, unit, expect):
    root = tmp_path / "server"
    config = _server(root, ledger=False)
    spec = _spec(root, "u", unit=unit)
    curator = load_curator_config(config)
    if expect is not None:
        assert load_spec(spec, curator=curator).input.unit == expect
        return
    with pytest.raises(SpecError) as info:
        load_spec(spec, curator=curator)
    msg = str(info.value)
    assert msg.startswith("input.unit:") and "'firm'" in msg and str(tmp_path) not in msg
    code, out, err = _cli(root, monkeypatch, "run", spec.name, "--test-seed")
    assert code == 2 and "input.unit" in err and str(tmp_path) not in out + err
    assert not (root / "releases" / "u").exists()


def test_row_mode_on_a_unit_dataset_is_charged_per_unit(tmp_path, monkeypatch):
    """Omitting the unit on a dataset with one is not row mode: a firm's rows are one unit."""
    root = tmp_path / "server"
    _server(root, ledger=False)
    code, _, err = _run(root, monkeypatch, "rows")
    assert code == 0, err
    per = pl.read_parquet(root / "releases" / "rows" / "confidential" /
                          "per_record_losses.parquet")
    firms = _firms()
    assert per.height == firms["firm"].n_unique() < firms.height
    assert "firm" in per.columns


def test_dataset_without_unit_leaves_the_choice_to_the_author(tmp_path, monkeypatch):
    root = tmp_path / "server"
    config = _server(root, ledger=False, unit=False)
    curator = load_curator_config(config)
    assert load_spec(_spec(root, "a"), curator=curator).input.unit is None
    assert load_spec(_spec(root, "b", unit='unit = "payroll"'),
                     curator=curator).input.unit == "payroll"


def test_configuration_refusals(tmp_path):
    root = tmp_path / "server"
    root.mkdir()
    # a ledger needs the dataset's unit
    write_curator(root, {"firms": "data/firms.parquet"},
                  dataset_extra={"firms": 'ledger = "ledgers/firms"'})
    with pytest.raises(SpecError, match=r"datasets\.firms\.ledger: .*declares no unit"):
        load_curator_config(root / "curator.toml")
    # a ledger inside the dataset (read whole) or the output root
    for where in ("data/ledger", "releases/ledger"):
        write_curator(root, {"firms": "data"},
                      dataset_extra={"firms": f'unit = "firm"\nledger = "{where}"'})
        with pytest.raises(SpecError, match=r"datasets\.firms\.ledger: the ledger .* overlaps"):
            load_curator_config(root / "curator.toml")
    # the same data under a second name without the ledger (or unit): refused
    (root / "ledgers").mkdir(mode=0o700)
    write_curator(root, {"firms": "data", "raw": "data/2026"},
                  dataset_extra={"firms": 'unit = "firm"\nledger = "ledgers/firms"'})
    with pytest.raises(SpecError, match=r"datasets\.raw: reads the same data as dataset "
                                        r"'firms'"):
        load_curator_config(root / "curator.toml")
    write_curator(root, {"firms": "data", "raw": "data/2026"},
                  dataset_extra={n: 'unit = "firm"\nledger = "ledgers/firms"'
                                 for n in ("firms", "raw")})
    assert load_curator_config(root / "curator.toml").datasets["raw"].unit == "firm"
    # the unit must be in a declared schema; require_ledger must be a bool
    write_curator(root, {"firms": "data/firms.parquet"},
                  dataset_extra={"firms": 'schema = { county = "String" }\nunit = "firm"'})
    with pytest.raises(SpecError, match=r"datasets\.firms\.unit: .*not in the declared schema"):
        load_curator_config(root / "curator.toml")
    write_curator(root, {"firms": "data/firms.parquet"}, extra="[policy]\nrequire_ledger = 1")
    with pytest.raises(SpecError, match=r"policy\.require_ledger: must be true or false"):
        load_curator_config(root / "curator.toml")


def test_curator_mode_spec_on_a_ledger_dataset_may_not_add_its_own(tmp_path):
    root = tmp_path / "server"
    config = _server(root)
    spec = root / "c.toml"
    spec.write_text(SPEC.format(name="c", unit="", seed=1, counties=json.dumps(COUNTIES))
                    .replace('mode = "author"', 'mode = "curator"')
                    + '[output]\npublic = "out/p"\nconfidential = "out/c"\n'
                    '[ledger]\npath = "other"\nseries = "s"\nlifetime_budget = 1.0\n')
    with pytest.raises(SpecError, match=r"^ledger: dataset 'firms' has a lifetime ledger"):
        load_spec(spec, curator=load_curator_config(config))


def test_curator_mode_spec_naming_the_dataset_is_charged_too(tmp_path, monkeypatch):
    root = tmp_path / "server"
    _server(root)
    spec = root / "c.toml"
    spec.write_text(SPEC.format(name="c", unit="", seed=1, counties=json.dumps(COUNTIES))
                    .replace('mode = "author"', 'mode = "curator"')
                    + '[output]\npublic = "out/p"\nconfidential = "out/c"\n')
    code, _, err = _cli(root, monkeypatch, "run", spec.name, "--test-seed")
    assert code == 0, err
    with tabdp.Ledger.open(root / "ledgers" / "firms") as led:
        assert led.releases == 1 and led.state().height == 30


def test_datasets_sharing_a_ledger_declare_one_unit(tmp_path):
    """One ledger, one account per unit value: its datasets agree on the unit and its type.

    Otherwise a unit is charged separately through each dataset (the text ``"7"`` and the
    integer ``7`` are two accounts, each with the whole lifetime budget).
    """
    root = tmp_path / "server"
    (root / "ledgers").mkdir(parents=True, mode=0o700)
    both = 'ledger = "ledgers/firms"'
    cases = [  # (schema of b, unit of b) -> refused?
        ({"firm": "Int64", "county": "String"}, "firm", False),
        ({"firm": "String", "county": "String"}, "firm", True),
        ({"firm": "Int64", "county": "String"}, "county", True),
    ]
    for schema_b, unit_b, refused in cases:
        write_curator(root, {"a": "data/a", "b": "data/b"},
                      schemas={"a": {"firm": "Int64", "county": "String"}, "b": schema_b},
                      dataset_extra={"a": f'unit = "firm"\n{both}',
                                     "b": f'unit = "{unit_b}"\n{both}'})
        if not refused:
            assert load_curator_config(root / "curator.toml").datasets["b"].unit == "firm"
            continue
        with pytest.raises(SpecError, match=r"datasets\.b\.ledger: datasets 'a' and 'b' share "
                                            r"one lifetime ledger but declare different units"):
            load_curator_config(root / "curator.toml")
    # the Python curator: the same rule at add()
    cur = tabdp.Curator()
    cur.add("a", _firms(), schema={"firm": "Int64", "county": "String"}, unit="firm",
            ledger=root / "ledgers" / "firms")
    cur.add("c", _firms(), schema={"firm": "Int64", "county": "String"}, unit="firm",
            ledger=root / "ledgers" / "firms")
    with pytest.raises(tabdp.exceptions.InvalidParameterError,
                       match="datasets 'a' and 'b' share one lifetime ledger"):
        cur.add("b", _firms().with_columns(pl.col("firm").cast(pl.String)),
                schema={"firm": "String", "county": "String"}, unit="firm",
                ledger=root / "ledgers" / "firms")


@pytest.mark.parametrize("ledger", ["missing", "busy"])
def test_a_ledger_refusal_never_depends_on_the_data(tmp_path, monkeypatch, ledger):
    """The ledger is opened before anything of the data is read, footers included.

    D' holds one more file named ``*.parquet`` that is not Parquet (its footer cannot be
    read; the run then stops with the generic failure). With an unusable ledger (missing, or
    held by another run) both servers must refuse for the ledger alike: before the fix the
    declared scan read the footers first, so D' failed with exit 4 and D with exit 2.
    """
    views = []
    for extra in (False, True):
        root = tmp_path / ("d1" if extra else "d0")
        config = _server(root)
        text = config.read_text().replace('path = "data/firms.parquet"', 'path = "data"')
        config.write_text(text)
        if extra:
            (root / "data" / "zz.parquet").write_bytes(b"not parquet")
        held = None
        if ledger == "missing":
            import shutil

            shutil.rmtree(root / "ledgers" / "firms")
        else:
            held = tabdp.Ledger.open(root / "ledgers" / "firms")
        try:
            code, out, err = _run(root, monkeypatch, "lr")
        finally:
            if held is not None:
                held.close()
        views.append((code, out.replace(str(root), "ROOT"), err.replace(str(root), "ROOT"),
                      (root / "releases" / "lr").exists()))
    assert views[0] == views[1], views
    assert views[0][0] == 2 and not views[0][3], views


def _ids_to_text(root: Path) -> None:
    """The curator switches the dataset's firm ids to text (data and declared schema)."""
    _firms().with_columns(pl.col("firm").cast(pl.String)).write_parquet(
        root / "data" / "firms.parquet")
    write_curator(root, {"firms": "data/firms.parquet"},
                  dataset_extra={"firms": 'unit = "firm"\nledger = "ledgers/firms"'})


def test_author_run_with_unit_ids_of_another_type_refused_from_the_schema(tmp_path,
                                                                          monkeypatch):
    """Review (C), author mode: the declared unit type against the dataset ledger's, no data.

    The curator's dataset had Int64 firm ids (one author run charged); its declared schema
    now says String. The next author run is refused before any data is read (exit 2), naming
    the dataset and both types, never the ledger's server path.
    """
    root = tmp_path / "server"
    _server(root)
    code, _, err = _run(root, monkeypatch, "r0")
    assert code == 0, err
    _ids_to_text(root)
    from tabdp.release import runner

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read")

    monkeypatch.setattr(runner, "_run_with_data", no_data)
    code, out, err = _run(root, monkeypatch, "r1")
    assert code == 2, err
    assert ("the lifetime ledger of dataset 'firms' keys units by Int64 ids" in err
            and "the unit column 'firm' has type String in the declared dataset schema" in err)
    assert "Refused before any data was read" in err and "data-dependent" not in err
    assert str(tmp_path) not in out + err and "ledgers" not in out + err
    assert not (root / "releases" / "r1" / "public").exists()
    with tabdp.Ledger.open(root / "ledgers" / "firms") as led:
        assert led.releases == 1


def test_the_id_type_refusal_never_depends_on_one_firm_of_an_earlier_release(tmp_path,
                                                                            monkeypatch):
    """Review r83: the dataset's first release held no firm (D) or one firm (D').

    The ledger pinned its id type only when a release charged a unit: after the curator
    switched the dataset's ids to text, the author's next run went through on D (exit 0) and
    was refused on D' (exit 2): the exit code told whether one firm was in the first release.
    The type now comes from the releases' schema: refused on both, alike.
    """
    views = []
    for extra in (False, True):
        root = tmp_path / ("d1" if extra else "d0")
        _server(root)
        _firms(0, extra=extra).write_parquet(root / "data" / "firms.parquet")
        code, _, err = _run(root, monkeypatch, "r0")
        assert code == 0, err
        _ids_to_text(root)
        code, out, err = _run(root, monkeypatch, "r1")
        views.append((code, out.replace(str(root), "ROOT"), err.replace(str(root), "ROOT"),
                      (root / "releases" / "r1" / "public").exists()))
    assert views[0] == views[1], views
    assert views[0][0] == 2 and "keys units by Int64 ids" in views[0][2]


# origin: stop 64 (the author's anchor warning was made of every PrivacyWarning recorded while
# the ledger opened, process-wide: another thread's, perhaps about its data, became one)
def test_the_authors_anchor_warning_comes_from_the_ledger_alone(tmp_path, monkeypatch):
    import warnings

    root = tmp_path / "server"
    _server(root)

    def run(name: str) -> str:  # what the run says: its warnings and its stderr
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            code, out, err = _run(root, monkeypatch, name)
        assert code == 0, err
        return "\n".join([out, err, *(str(w.message) for w in got)])

    (root / "ledgers" / ".firms.head.json").unlink()  # the true case: warned as before
    said = run("r1")
    assert said.count("the lifetime ledger of dataset 'firms': its anchor (the record of its "
                      "last release kept next to it) was missing or replaced") == 1, said
    assert str(root) not in said and "ledgers" not in said
    warn_from_another_thread(monkeypatch, "elsewhere")  # while the ledger opens
    said = run("r2")  # an intact ledger with its anchor: no anchor warning
    assert "anchor" not in said and "elsewhere" in said, said


# origin: stop 65 (an author run whose ledger open failed after the anchor was written lost the
# anchor notice; the author is told it as on success, naming the dataset only)
def test_the_authors_anchor_notice_is_kept_when_the_open_then_fails(tmp_path, monkeypatch):
    import warnings

    from tabdp.exceptions import LedgerError
    from tabdp.privacy import lifetime

    root = tmp_path / "server"
    _server(root)
    (root / "ledgers" / ".firms.head.json").unlink()  # no release yet: written at open

    def rollback(cls, where, entries):  # the open fails after the anchor was written
        raise LedgerError(f"the ledger {where} could not be rolled back")

    monkeypatch.setattr(lifetime.Ledger, "_rollback", classmethod(rollback))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        code, out, err = _run(root, monkeypatch, "r1")
    said = "\n".join([out, err, *(str(w.message) for w in got)])
    assert code == 2 and "lifetime ledger of dataset 'firms' cannot be used" in err, said
    assert said.count("the lifetime ledger of dataset 'firms': its anchor (the record of its "
                      "last release kept next to it) was missing or replaced") == 1, said
    assert str(root) not in said and "rolled back" not in said
    assert (root / "ledgers" / ".firms.head.json").exists()
