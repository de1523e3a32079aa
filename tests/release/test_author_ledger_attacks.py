"""R13: a query author attacks the dataset's lifetime ledger and fixed unit (CLI, config).

The author holds only an author-mode spec, the CLI's exit codes and output, and the public
folder; the curator's dataset declares ``unit`` and ``ledger`` (docs/privacy-semantics.md,
"Repeated runs and the privacy unit: what the curator fixes"). Each test is one attack: those
that hold are regression tests; a gap found is fixed here or marked ``xfail(strict=True)``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import polars as pl
import pytest

import tabdp
from tabdp.exceptions import SpecError
from tabdp.release import load_curator_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_author_ledger import _cli, _firms, _run, _server, _spec  # noqa: E402

pytest.importorskip("deltalake")


def _ledger(root: Path) -> tuple[int, float]:
    """(releases, largest lifetime rho of a unit) of the server's dataset ledger."""
    with tabdp.Ledger.open(root / "ledgers" / "firms") as led:
        state = led.state()
        return led.releases, float(state["rho"].max()) if state.height else 0.0


# -- (1) more loss than the lifetime budget ---------------------------------------------------


def test_overwrite_reruns_are_charged_every_time(tmp_path, monkeypatch):
    """``--overwrite`` of the same spec is a new release: charged, never a free redraw."""
    root = tmp_path / "server"
    _server(root)
    assert _run(root, monkeypatch, "r0", seed=1)[0] == 0
    assert _ledger(root) == (1, 0.5)
    spec = _spec(root, "r0", seed=1)
    for n in (2, 3):
        code, _, err = _cli(root, monkeypatch, "run", spec.name, "--test-seed", "--overwrite")
        assert code == 0, err
        assert _ledger(root) == (n, 1.0)   # capped at the lifetime budget
    # the third release left every unit out: its counts are noise only (the data's are >= 10)
    est = pl.read_parquet(root / "releases" / "r0" / "public" / "n.parquet")["estimate"]
    assert est.abs().max() < 6


def test_python_session_and_cli_runs_share_the_ledger(tmp_path, monkeypatch):
    """A Python author session holds the ledger: a CLI run is refused until it is closed."""
    root = tmp_path / "server"
    _server(root)
    cur = tabdp.Curator(seed=1)
    cur.add("firms", root / "data" / "firms.parquet", unit="firm",
            ledger=root / "ledgers" / "firms",
            schema={"firm": "Int64", "county": "String", "payroll": "Float64"})
    author = cur.author_session("firms", name="py")
    author.count(by="county", keys=tabdp.KeySet.from_dict(county=["c1", "c2", "c3"]),
                 mechanism=tabdp.mechanisms.Gaussian(1.0), max_rows=1)
    code, out, err = _run(root, monkeypatch, "during", seed=2)
    assert code == 2 and "in use by another run" in err
    assert str(tmp_path) not in out + err
    cur.close("py")
    assert _ledger(root) == (1, 0.5)
    assert _run(root, monkeypatch, "after", seed=3)[0] == 0
    assert _ledger(root) == (2, 1.0)


def test_public_staging_is_private_until_the_ledger_commits(tmp_path, monkeypatch):
    """The public tables are written to a staging folder before the ledger commits.

    Were that folder readable by others while the run is not yet charged, an author who
    can list the release folder reads the noisy tables, and a run killed before the commit
    (a server's time limit, the OOM killer: the author can make the confidential steps slow
    and large) is never charged, its staging folder left behind until the next run.
    """
    import tabdp.release._ledger as ledger_mod

    root = tmp_path / "server"
    _server(root)
    seen: dict[str, int] = {}
    real = ledger_mod.commit_release

    def spy(session, spec, public, confidential, **kw):  # type: ignore[no-untyped-def]
        seen["public"] = stat.S_IMODE(public.stat().st_mode)
        seen["tables"] = sum(p.suffix == ".parquet" for p in public.iterdir())
        return real(session, spec, public, confidential, **kw)

    monkeypatch.setattr(ledger_mod, "commit_release", spy)
    code, _, err = _run(root, monkeypatch, "st", seed=1)
    assert code == 0, err
    assert seen["tables"] == 1                      # the noisy table is already there
    assert seen["public"] & 0o077 == 0, oct(seen["public"])   # but no one else can read it
    # once committed and moved into place, the public folder has the usual permissions
    final = stat.S_IMODE((root / "releases" / "st" / "public").stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert final == 0o777 & ~umask


# -- two dataset names over the same data ------------------------------------------------------


def _config(tmp_path: Path, body: str) -> Path:
    (tmp_path / "ledgers").mkdir(exist_ok=True)
    f = tmp_path / "curator.toml"
    f.write_text(body + '\n[output]\nroot = "releases"\n', encoding="utf-8")
    return f


@pytest.mark.parametrize("other", ['"LAKE.FIRMS"', '"Lake.firms"',
                                   '"spark_catalog.lake.firms"'])
def test_the_same_spark_table_in_other_case_is_the_same_data(tmp_path, other):
    """One Spark table under two spellings is the same data.

    Spark's catalog names are case-insensitive: ``lake.firms`` and ``LAKE.FIRMS`` are one
    table, so the second (no ledger) would let an author step around the first's ledger.
    """
    f = _config(tmp_path, f"""
[datasets.firms]
table = "lake.firms"
unit = "firm"
ledger = "ledgers/firms"
[datasets.firms2]
table = {other}
""")
    with pytest.raises(SpecError, match="reads the same data as dataset 'firms'"):
        load_curator_config(f)


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_folder_dataset_linking_to_a_ledgered_file_is_the_same_data(tmp_path, link):
    data = tmp_path / "data"
    (data / "firms").mkdir(parents=True)
    _firms().write_parquet(data / "firms" / "part-0.parquet")
    (data / "mirror").mkdir()
    target = data / "firms" / ("part-0.parquet" if link == "file" else "")
    os.symlink(target, data / "mirror" / ("x.parquet" if link == "file" else "sub"))
    # the folder dataset reads the ledgered rows through the link
    assert pl.scan_parquet(str(data / "mirror" / "**" / "*.parquet")).collect().height == \
        _firms().height
    f = _config(tmp_path, """
[datasets.firms]
path = "data/firms"
unit = "firm"
ledger = "ledgers/firms"
[datasets.mirror]
path = "data/mirror"
""")
    with pytest.raises(SpecError, match="reads the same data"):
        load_curator_config(f)


@pytest.mark.parametrize("second", ["data/firms/", "data/./firms", "data/x/../firms",
                                    "data/firms/year=2026", "data/firms/year=2026/p.parquet",
                                    "alias"])
def test_the_same_folder_under_other_spellings_is_the_same_data(tmp_path, second):
    """Trailing slashes, dots, hive subfolders, a symbolic link to the folder: one data."""
    part = tmp_path / "data" / "firms" / "year=2026"
    part.mkdir(parents=True)
    (tmp_path / "data" / "x").mkdir()
    _firms().write_parquet(part / "p.parquet")
    os.symlink(tmp_path / "data" / "firms", tmp_path / "alias")
    f = _config(tmp_path, f"""
[datasets.firms]
path = "data/firms"
unit = "firm"
ledger = "ledgers/firms"
[datasets.other]
path = "{second}"
unit = "firm"
""")
    with pytest.raises(SpecError, match="reads the same data as dataset 'firms'"):
        load_curator_config(f)


# -- (2) neighbouring servers, ledgers in several states ----------------------------------------


def _seen(root: Path, code: int, out: str, err: str, name: str) -> tuple[object, ...]:
    pub = root / "releases" / name / "public"
    table = pl.read_parquet(pub / "n.parquet")
    summary = json.loads((pub / "summary.json").read_text())
    return (code, out.replace(str(root), "ROOT"), err.replace(str(root), "ROOT"),
            table.drop("estimate", "lower", "upper", "cv", "flag", strict=False).to_dicts(),
            json.dumps(summary["lifetime"], sort_keys=True),
            sorted(p.name for p in pub.iterdir()))


@pytest.mark.parametrize("state", ["at_budget", "absent", "half"])
def test_one_more_firm_in_any_ledger_state_looks_alike(tmp_path, monkeypatch, state):
    """One firm more, at its lifetime budget, entering, or half-spent: the same but the noise.

    Server 1 has one firm more than server 0; its ledger holds that firm at its lifetime
    budget, not at all (entering), or half-spent. Everything but the noise is the same.
    """
    results = []
    for extra in (False, True):
        root = tmp_path / f"d{int(extra)}"
        _server(root, extra=extra)
        with tabdp.Ledger.open(root / "ledgers" / "firms", autocommit=False) as led:
            rho = {"at_budget": 1.0, "absent": 0.0, "half": 0.5}[state]
            if extra and rho:
                import numpy as np
                led.charge(pl.Series([10**6]), {"rho": np.array([rho])}, {})
            led.commit(label="curator-2025")
        runs = []
        for i in range(3):
            code, out, err = _run(root, monkeypatch, f"r{i}", seed=11 + i)
            runs.append(_seen(root, code, out, err, f"r{i}"))
        results.append(runs)
    assert results[0] == results[1]
    assert all(r[0] == 0 for r in results[0])


def test_the_lifetime_statement_names_no_earlier_release(tmp_path, monkeypatch):
    """The public lifetime statement is from public terms only: no earlier release's label.

    Earlier releases' names are other authors' words, and how many there were depends on the
    ledger's contents: neither is in a release's public summary (R13 found labels there).
    """
    root = tmp_path / "server"
    _server(root)
    assert _run(root, monkeypatch, "alice_probe", seed=1)[0] == 0
    assert _run(root, monkeypatch, "bob", seed=2)[0] == 0
    public = root / "releases" / "bob" / "public"
    life = json.loads((public / "summary.json").read_text())["lifetime"]
    assert "releases_before" not in life and "labels_before" not in life
    for f in public.rglob("*"):
        if f.is_file():
            assert b"alice_probe" not in f.read_bytes(), f.name


# -- (3) a finer unit ---------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ['unit = "Firm"', 'unit = "firm "', 'unit = "county"',
                                  'unit = "payroll"'])
def test_no_other_spelling_of_the_unit(tmp_path, monkeypatch, unit):
    root = tmp_path / "server"
    _server(root)
    code, out, err = _run(root, monkeypatch, "u", unit=unit)
    assert code == 2 and "the curator fixes the privacy unit" in err
    assert str(tmp_path) not in out + err
    assert _ledger(root) == (0, 0.0)


@pytest.mark.parametrize("domain", ["ints", "bools"])
def test_the_unit_column_may_not_be_a_key(tmp_path, monkeypatch, domain):
    """The unit column may not be a key (its domain's type would recast the unit ids).

    Grouping by the unit column would cast it to its domain's type: to Boolean, every firm
    would become one of two units (``true``/``false``). The spec is refused (exit 2, from the
    text), nothing is read or charged.
    """
    root = tmp_path / "server"
    _server(root)
    spec = root / "k.toml"
    ids = sorted(set(_firms()["firm"].to_list()))
    values = json.dumps(ids if domain == "ints" else [True, False])
    codes = []
    for i in range(3):
        spec.write_text(f"""
[release]
name = "k{i}"
[input]
dataset = "firms"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
[domains]
firm = {values}
[randomness]
seed = {i + 1}
[[tables]]
name = "n"
kind = "count"
by = ["firm"]
mechanism = {{ family = "gaussian", sigma = 1.0 }}
""")
        code, out, err = _cli(root, monkeypatch, "run", spec.name, "--test-seed")
        assert str(tmp_path) not in out + err
        codes.append(code)
        assert "the unit column 'firm' (input.unit) is also a key" in err
    assert codes == [2, 2, 2]
    assert _ledger(root) == (0, 0.0)


# -- (4) server paths in messages ---------------------------------------------------------------


def test_ledger_refusals_never_name_a_server_path(tmp_path, monkeypatch):
    """Busy, missing, a file in its place, a broken chain: the dataset, never a path."""
    root = tmp_path / "server"
    _server(root)
    led = root / "ledgers" / "firms"
    texts = []
    with tabdp.Ledger.open(led):
        texts.append(_run(root, monkeypatch, "busy"))
    (led / "chain" / "00000000.json").write_text("{}")
    texts.append(_run(root, monkeypatch, "broken"))
    os.rename(led, root / "ledgers" / "aside")
    led.write_text("not a ledger")
    texts.append(_run(root, monkeypatch, "file"))
    for code, out, err in texts:
        assert code == 2, err
        assert "dataset 'firms'" in err
        for secret in (str(tmp_path), "ledgers", "chain", "lock", "pid"):
            assert secret not in out + err, (secret, err)

