"""``tabdp demo`` replaces only a folder it made itself (review r51).

The demo replaced ``public/`` and ``confidential/`` of any folder (``./tabdp-demo`` by
default, whatever was in it: a user's ``public/mine.txt`` was deleted, exit 0), and a second
``tabdp demo --out d2`` was refused with a hint about the spec's ``[output]`` section, which a
demo user does not have. The demo now marks its folder (``TABDP_DEMO.txt``): a folder with the
marker is replaced, any other existing, non-empty one is refused untouched with a hint naming
``--out``: also one holding nothing but ``public/`` and ``confidential/`` (review r52: that
is a real release's shape, and such a folder was replaced as an older demo's). The bundled
example is swapped for a small spec to keep the runs short (the demo's own run is tested in
test_cli.py and tests/datasets).
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from _specs import hierarchies, release_spec, table

from tabdp import cli
from tabdp.datasets.synth import generate_establishments


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def small_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo runs a small spec (no seed, like the bundled one); the cwd is a fresh folder."""
    generate_establishments(500, seed=2).write_parquet(tmp_path / "d.parquet")
    spec = tmp_path / "demo.toml"
    spec.write_text(release_spec(
        table("estabs", ["state"], '{ family = "gaussian", sigma = 2.0 }', kind="count"),
        name="demo", input_extra='unit = "estab_id"', sections=hierarchies("geo"),
        public="unused/public", confidential="unused/confidential"), encoding="utf-8")
    monkeypatch.setattr(cli, "_example_spec", lambda: spec)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_foreign_folder_refused_and_untouched(small_demo: Path) -> None:
    mine = small_demo / "tabdp-demo" / "public" / "mine.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    for extra in ([], ["--overwrite"]):
        code, out, err = run("demo", "--quiet", *extra)
        assert code == 2, err           # was 0, and mine.txt deleted
        assert f"the demo folder {str(small_demo / 'tabdp-demo')!r} already exists" in err
        assert "was not made by tabdp demo (it has no TABDP_DEMO.txt)" in err
        assert "nothing was written or deleted" in err
        assert "Hint: pass another --out (a new folder), or remove that folder" in err
        assert "[output]" not in err
        assert mine.read_text() == "mine"
        assert sorted(p.name for p in (small_demo / "tabdp-demo").rglob("*")) == [
            "mine.txt", "public"]
    other = small_demo / "d2"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = run("demo", "--out", str(other), "--quiet")
    assert code == 2 and "--out" in err and (other / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    afile = small_demo / "file"
    afile.write_text("x")
    code, _, err = run("demo", "--out", str(afile), "--quiet")
    assert code == 2 and "is not a folder" in err and afile.read_text() == "x"


def test_demo_folder_replaced_on_a_second_run(small_demo: Path) -> None:
    for out in (None, small_demo / "d2"):
        folder = out or small_demo / "tabdp-demo"
        args = [] if out is None else ["--out", str(out)]
        code, _, err = run("demo", "--quiet", *args)
        assert code == 0, err
        assert (folder / "TABDP_DEMO.txt").is_file()
        first = (folder / "public" / "estabs.parquet").read_bytes()
        stale = folder / "public" / "stale.txt"   # inside a demo folder: the demo's to replace
        stale.write_text("x")
        code, _, err = run("demo", "--quiet", *args)
        assert code == 0, err           # --out twice: was exit 2, hint about [output]
        assert not stale.exists()
        assert (folder / "public" / "estabs.parquet").read_bytes() != first  # fresh noise
        assert sorted(p.name for p in folder.iterdir()) == [
            "TABDP_DEMO.txt", "confidential", "public"]
        assert not [p for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_empty_folder_becomes_the_demos(small_demo: Path) -> None:
    (small_demo / "empty").mkdir()
    code, _, err = run("demo", "--out", str(small_demo / "empty"), "--quiet")
    assert code == 0, err
    assert (small_demo / "empty" / "TABDP_DEMO.txt").is_file()


def test_unmarked_demo_folder_is_refused(small_demo: Path) -> None:
    """A folder without the marker is refused even if it holds nothing but a run's outputs.

    Review r52: such a folder was taken for an older demo's and replaced, but ``public/`` and
    ``confidential/`` and nothing else is also the shape of a real release
    (``<output root>/<release name>/``, what author mode always writes).
    """
    assert run("demo", "--quiet")[0] == 0
    folder = small_demo / "tabdp-demo"
    (folder / "TABDP_DEMO.txt").unlink()      # as a tabdp before review r51 left it
    before = snapshot(folder)
    code, _, err = run("demo", "--quiet")
    assert code == 2, err                      # was 0: replaced
    assert "it has no TABDP_DEMO.txt" in err and "remove that folder" in err
    assert "an older tabdp's demo folder has no TABDP_DEMO.txt: remove it" in err
    assert snapshot(folder) == before
    shutil.rmtree(folder)                      # what the hint says: then the demo runs again
    assert run("demo", "--quiet")[0] == 0 and (folder / "TABDP_DEMO.txt").is_file()


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int, int]]:
    """Every entry under ``folder``: its bytes (files), mode and modification time."""
    out: dict[str, tuple[bytes | None, int, int]] = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (p.read_bytes() if p.is_file() else None,
                                           st.st_mode, st.st_mtime_ns)
    return out


def test_a_real_release_folder_is_refused_and_untouched(small_demo: Path) -> None:
    """Review r52's repro: a real release's folder given as --out.

    It holds public/ and confidential/ (a ledger.json and the per-record losses): the demo
    replaced it, exit 0.
    """
    spec = small_demo / "release.toml"
    spec.write_text(cli._example_spec().read_text(encoding="utf-8").replace(
        'name = "demo"', 'name = "real"').replace(
        'path = "d.parquet"', f'path = "{(small_demo.parent / "d.parquet").as_posix()}"')
        .replace("unused/", "real2/"), encoding="utf-8")
    assert run("run", str(spec), "--quiet")[0] == 0
    folder = small_demo / "real2"
    (folder / "confidential" / "ledger.json").write_text('{"release": 4}')  # as a ledger's run
    assert sorted(p.name for p in folder.iterdir()) == ["confidential", "public"]
    before = snapshot(folder)
    for extra in ([], ["--overwrite"]):
        code, out, err = run("demo", "--out", str(folder), "--quiet", *extra)
        assert code == 2, err                  # was 0: the release replaced by the demo
        assert "was not made by tabdp demo (it has no TABDP_DEMO.txt)" in err
        assert "nothing was written or deleted" in err and out == ""
        assert snapshot(folder) == before
        assert not [p for p in small_demo.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
