"""A comparison in the confidential folder survives every run (review r51).

``tabdp compare`` writes by default to ``<confidential>/compare/``. A later ``tabdp run`` was
refused ("already exists ... pass --overwrite") although no release was there, and
``run --overwrite`` then deleted the comparison without a word. A run now replaces only its
own files in the confidential folder (``_staging.RUN_FILES``) and carries everything else
over: a folder holding only a comparison needs no ``--overwrite``, a refusal says what the
folder holds, and neither a failed run nor a failed swap loses the comparison. The
comparison is laid out by hand (Tau-Argus is not needed to test the run side).
"""

from __future__ import annotations

import io
import os
import pathlib
import sys
from pathlib import Path

import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.exceptions import InvalidParameterError
from tabdp.release import _staging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import STATE_COUNT_SPEC  # noqa: E402

SPEC = STATE_COUNT_SPEC

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"
RELEASE = {"per_record_losses.parquet", "worst_cells.parquet", "confidential.json",
           "confidential_report.html"}


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("data")
    good = d / "good.parquet"
    df = generate_establishments(800, seed=5)
    df.write_parquet(good)
    bad = d / "bad.parquet"  # a negative payroll: refused after the data is read (exit 4)
    df.with_columns(pl.when(pl.col("estab_id") == df["estab_id"][0]).then(-1.0)
                    .otherwise(pl.col("payroll")).alias("payroll")).write_parquet(bad)
    return good, bad


def spec(folder: Path, data: Path) -> str:
    path = folder / "s.toml"
    body = SPEC.format(data=data.as_posix(), hier=HIER.as_posix())
    if data.name == "bad.parquet":  # a sum, so that the negative value is read and refused
        body += ('[[tables]]\nname = "pay"\nmeasures = ["payroll"]\nby = ["state"]\n'
                 'mechanism = { family = "gaussian", sigma = 1e6 }\n')
    path.write_text(body, encoding="utf-8")
    return str(path)


def fake_comparison(conf: Path) -> dict[str, bytes]:
    """``<conf>/compare/`` as tabdp compare leaves it (owner-only); its files' bytes."""
    cmp = conf / "compare"
    (cmp / "tau" / "estabs__count").mkdir(parents=True)
    (cmp / "dp_release" / "tables").mkdir(parents=True)
    files = {"compare_report.html": b"<html>report</html>", "compare.json": b"{}",
             "sdc_cells.parquet": b"PAR1cells", "tau/estabs__count/micro.asc": b"1 2 3\n",
             "dp_release/tables/summary.json": b"{}"}
    for name, content in files.items():
        (cmp / name).write_bytes(content)
    for base, _, names in os.walk(conf):
        os.chmod(base, 0o700)
        for n in names:
            os.chmod(os.path.join(base, n), 0o600)
    return files


def intact(conf: Path, files: dict[str, bytes]) -> bool:
    return all((conf / "compare" / n).read_bytes() == b for n, b in files.items())


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_compare_then_run_needs_no_overwrite_and_keeps_it(tmp_path: Path,
                                                          data: tuple[Path, Path]) -> None:
    conf = tmp_path / "out" / "confidential"
    files = fake_comparison(conf)
    (conf / "cmp_p15").mkdir(mode=0o700)   # a second comparison: tabdp compare --out there
    (conf / "cmp_p15" / "compare.json").write_text("{}")
    code, out, err = run("run", "--test-seed", spec(tmp_path, data[0]), "--quiet")
    assert code == 0, err   # was 2: "already exists ... pass --overwrite"
    assert intact(conf, files) and (conf / "cmp_p15" / "compare.json").read_text() == "{}"
    assert names(conf) == RELEASE | {"compare", "cmp_p15"}
    assert conf.stat().st_mode & 0o777 == 0o700
    assert (conf / "compare").stat().st_mode & 0o777 == 0o700
    assert not [p for p in conf.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_run_compare_run_overwrite_keeps_the_comparison(tmp_path: Path,
                                                        data: tuple[Path, Path]) -> None:
    conf = tmp_path / "out" / "confidential"
    s = spec(tmp_path, data[0])
    assert run("run", "--test-seed", s, "--quiet")[0] == 0
    before = (conf / "confidential.json").read_bytes()
    files = fake_comparison(conf)
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 2   # the public folder first: it says what a run keeps
    assert "the public output folder" in err and "also holds compare/" in err, err
    assert "a run keeps it, with or without --overwrite" in err
    # then the confidential one, without the public folder: what it holds, exactly
    (tmp_path / "out" / "public").rename(tmp_path / "public.bak")
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 2, err
    assert "holds the confidential files of an earlier release" in err
    assert "confidential.json" in err and "per_record_losses.parquet" in err
    assert "the comparison compare/ (tabdp compare)" in err and "a run keeps it" in err
    assert "--overwrite (it replaces only the release's files)" in err
    assert (conf / "confidential.json").read_bytes() == before and intact(conf, files)
    code, _, err = run("run", "--test-seed", s, "--quiet", "--overwrite")
    assert code == 0, err
    assert intact(conf, files)   # was: deleted without a word
    assert names(conf) == RELEASE | {"compare"}


def test_failed_run_leaves_the_comparison(tmp_path: Path, data: tuple[Path, Path]) -> None:
    conf = tmp_path / "out" / "confidential"
    files = fake_comparison(conf)
    bad = spec(tmp_path, data[1])
    for extra in ([], ["--overwrite"]):
        code, _, err = run("run", "--test-seed", bad, "--quiet", *extra)
        assert code == 4 and "data-dependent failure" in err, err
        assert intact(conf, files) and names(conf) == {"compare", "failure.json"}
    # the failed run's report is replaced by the next run, the comparison kept
    code, _, err = run("run", "--test-seed", spec(tmp_path, data[0]), "--quiet")
    assert code == 0, err
    assert intact(conf, files) and names(conf) == RELEASE | {"compare"}


def test_foreign_entries_are_named_and_kept(tmp_path: Path, data: tuple[Path, Path]) -> None:
    conf = tmp_path / "out" / "confidential"
    conf.mkdir(parents=True)
    (conf / "notes.txt").write_text("mine")
    s = spec(tmp_path, data[0])
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 2
    assert "holds no release, but notes.txt, which no tabdp run wrote" in err, err
    assert "pass --overwrite to write the release beside them" in err
    assert names(conf) == {"notes.txt"}
    assert run("run", "--test-seed", s, "--quiet", "--overwrite")[0] == 0
    assert (conf / "notes.txt").read_text() == "mine" and names(conf) == RELEASE | {"notes.txt"}


def _release_layout(root: Path) -> tuple[Path, Path, dict[str, bytes]]:
    pub, conf = root / "public", root / "confidential"
    pub.mkdir(parents=True)
    (pub / "manifest.json").write_text("old")
    files = fake_comparison(conf)
    (conf / "confidential.json").write_text("old")
    return pub, conf, files


def _stage(pub: Path, conf: Path) -> _staging._Staging:
    return _staging._Staging([conf, pub], True, private=[True, False])


def test_failed_commit_keeps_old_release_and_comparison(tmp_path: Path) -> None:
    pub, conf, files = _release_layout(tmp_path)
    staging = _stage(pub, conf)

    def commit() -> None:
        assert (staging.tmps[0] / "compare").is_dir()   # carried over before the commit
        raise RuntimeError("commit failed")

    with pytest.raises(RuntimeError, match="commit failed"), staging as (c, p):
        (c / "confidential.json").write_text("new")
        (p / "manifest.json").write_text("new")
        staging.commit = commit
    assert intact(conf, files) and (conf / "confidential.json").read_text() == "old"
    assert (pub / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["confidential", "public"]


def test_failed_rename_after_the_comparison_moved_keeps_it(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The confidential folder placed (with the comparison in it), then the public one fails."""
    pub, conf, files = _release_layout(tmp_path)
    staging = _stage(pub, conf)
    real = pathlib.Path.rename

    def rename(self: Path, target: Path) -> Path:
        if Path(target) == pub and ".tmp-" in self.name:
            # the new confidential folder is in place, the comparison carried into it
            assert (conf / "confidential.json").read_text() == "new"
            assert intact(conf, files)
            raise OSError("rename failed (injected)")
        return real(self, target)

    with pytest.raises(OSError, match="injected"), staging as (c, p):
        (c / "confidential.json").write_text("new")
        monkeypatch.setattr(pathlib.Path, "rename", rename)
    monkeypatch.undo()
    assert intact(conf, files) and (conf / "confidential.json").read_text() == "old"
    assert (pub / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["confidential", "public"]


def test_killed_run_gives_the_comparison_back(tmp_path: Path) -> None:
    """A run killed between carrying compare/ over and its last rename: the next run mends it."""
    conf = tmp_path / "confidential"
    conf.mkdir()
    (conf / "confidential.json").write_text("old")
    stale = tmp_path / ".confidential.tmp-999999999-abc"
    files = fake_comparison(stale)
    (stale / "confidential.json").write_text("new")
    removed = _staging.clean_stale_staging([tmp_path / "public", conf], private=[False, True])
    assert removed == [stale] and intact(conf, files)
    # the target gone as well (killed after moving it aside): refused, nothing deleted
    stale = tmp_path / ".other.tmp-999999999-abc"
    fake_comparison(stale)
    with pytest.raises(InvalidParameterError, match="tabdp does not delete them"):
        _staging.clean_stale_staging([tmp_path / "other"], private=[True])
    assert (stale / "compare" / "compare.json").exists()


@pytest.mark.slow  # a real tabdp compare (Tau-Argus, about 10 s): CI
def test_real_compare_survives_runs(tmp_path: Path, data: tuple[Path, Path]) -> None:
    pytest.importorskip("pytauargus")
    s = spec(tmp_path, data[0])
    code, _, err = run("compare", s, "--sdc", "p=10; freq=3", "--test-seed")
    assert code == 0, err
    cmp = tmp_path / "out" / "confidential" / "compare"
    files = {p: p.read_bytes() for p in cmp.rglob("*") if p.is_file()}
    assert (cmp / "compare_report.html") in files
    assert run("run", "--test-seed", s, "--quiet")[0] == 0
    assert run("run", "--test-seed", s, "--quiet", "--overwrite")[0] == 0
    assert {p: p.read_bytes() for p in cmp.rglob("*") if p.is_file()} == files
