"""What a run says of, and does with, the confidential folder's other entries.

Review r51 made a run keep what it did not write in the confidential folder (a comparison,
the curator's files) and say so. Review r52 found three faults:

* author mode: the refusals listed the names of the curator's files and folders there
  (``... also holds compare/, secret_curator_notes_2026.txt, which no tabdp run wrote``); an
  author now gets one fixed text, the curator (curator mode) the detailed one;
* after a killed run, every entry of its staging folder that was not a run file was given
  back as the curator's, tabdp's own scratch included (Spark's
  ``.per_record_losses.parquet.spark-<uuid>/``, a ``.partial`` report, a ``.failure.json.*``
  being written), kept forever and described as "files of yours". A run now writes the names
  of what it carries over into its staging folder first (``.tabdp-carried.json``) and the
  clean-up gives back only those; tabdp's temporary names are never the curator's;
* a confidential folder that is a symbolic link: the curator's entries were moved out of the
  link's target into a new local folder and a ``.confidential.old-*`` link was left behind
  every run. It is refused.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tabdp.exceptions import InvalidParameterError
from tabdp.release import _staging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import AUTHOR_STATE_COUNT_SPEC, STATE_COUNT_SPEC  # noqa: E402
from _staging_common import HIER, curator_spec, names, run, server  # noqa: E402, F401

RELEASE = {"per_record_losses.parquet", "worst_cells.parquet", "confidential.json",
           "confidential_report.html"}
#: What the curator keeps in the confidential folder: no author may see these names.
CURATOR_NAMES = ("compare", "secret_curator_notes_2026", "cmp_p15", "ledger.json",
                 "per_record_losses", "worst_cells", "confidential.json")

CURATOR_SPEC = STATE_COUNT_SPEC

AUTHOR_SPEC = AUTHOR_STATE_COUNT_SPEC






def author_run(root: Path, monkeypatch: pytest.MonkeyPatch, *extra: str
               ) -> tuple[int, str, str]:
    monkeypatch.chdir(root)
    return run("run", "s.toml", "--curator", "curator.toml", "--test-seed", "--quiet", *extra)


def curator_files(conf: Path) -> None:
    """The curator's entries of review r52's repro, and a second comparison."""
    (conf / "compare").mkdir()
    (conf / "compare" / "compare.json").write_text("{}")
    (conf / "cmp_p15").mkdir()
    (conf / "cmp_p15" / "compare.json").write_text("{}")
    (conf / "secret_curator_notes_2026.txt").write_text("x")


def test_author_refusals_name_nothing_in_the_confidential_folder(
        tmp_path: Path, staging_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review r52's repro: the author saw 'also holds compare/, secret_curator_notes...'."""
    texts: dict[str, list[str]] = {}
    for case in ("plain", "curator files"):
        root = tmp_path / case.replace(" ", "_")
        top = server(root, staging_data)
        code, _, err = author_run(root, monkeypatch)
        assert code == 0, err
        conf = top / "confidential"
        if case == "curator files":
            curator_files(conf)
            (conf / "ledger.json").write_text("{}")
        # the public folder's refusal, then (without it) the confidential folder's
        code, out, err = author_run(root, monkeypatch)
        assert code == 2 and "the public output folder" in err, err
        public_text = err
        (top / "public").rename(root / "public.bak")
        code, out, err = author_run(root, monkeypatch)
        assert code == 2 and "the confidential output folder" in err, err
        for text in (public_text, err):
            assert not [n for n in CURATOR_NAMES if n in text], text   # was: listed
            assert str(root) not in text
            assert "keeps any others there (a comparison, the curator's files" in text
            assert "Hint: choose another release name" in text and "[output]" not in text
        texts[case] = [public_text, err]
        # --overwrite: the curator's entries are kept
        (root / "public.bak").rename(top / "public")
        code, _, err = author_run(root, monkeypatch, "--overwrite")
        assert code == 0, err
        if case == "curator files":
            assert names(conf) == RELEASE | {"compare", "cmp_p15",
                                             "secret_curator_notes_2026.txt"}
    # the same words whatever the curator keeps there
    assert texts["plain"] == texts["curator files"]


def test_author_give_back_refusal_names_nothing(tmp_path: Path, staging_data: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed run's staging folder whose carried entries cannot go back: no name shown."""
    root = tmp_path / "srv"
    top = server(root, staging_data)
    assert author_run(root, monkeypatch)[0] == 0
    conf = top / "confidential"
    curator_files(conf)
    stale = top / ".confidential.tmp-999999999-abcd"
    stale.mkdir()
    (stale / "secret_curator_notes_2026.txt").write_text("y")   # also in the folder: refused
    code, _, err = author_run(root, monkeypatch, "--overwrite")
    assert code == 2 and "tabdp does not delete them" in err, err
    assert "secret_curator" not in err and "compare" not in err   # was: named
    assert "the curator must move them back" in err and str(root) not in err
    # the curator (the function in curator mode) is told the names
    with pytest.raises(InvalidParameterError, match="secret_curator_notes_2026.txt"):
        _staging.clean_stale_staging([conf], private=[True])
    assert (stale / "secret_curator_notes_2026.txt").read_text() == "y"


def test_curator_mode_keeps_the_detailed_message(tmp_path: Path, staging_data: Path) -> None:
    s = curator_spec(tmp_path, staging_data)
    assert run("run", "--test-seed", s, "--quiet")[0] == 0
    conf = tmp_path / "out" / "confidential"
    curator_files(conf)
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 2 and "also holds cmp_p15/, compare/, secret_curator_notes_2026.txt" in err
    (tmp_path / "out" / "public").rename(tmp_path / "public.bak")
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 2 and "the comparison cmp_p15/, compare/ (tabdp compare)" in err, err
    assert "secret_curator_notes_2026.txt, which no tabdp run wrote" in err
    assert "confidential.json" in err


def _killed_run(root: Path, manifest: list[str] | None) -> Path:
    """A confidential staging folder of a run killed after carrying compare/ into it."""
    stale = root / ".confidential.tmp-999999999-abcd"
    scratch = stale / ".per_record_losses.parquet.spark-0123abcd"
    (scratch / "_temporary").mkdir(parents=True)
    (scratch / "part-00000.parquet").write_bytes(b"PAR1 per-record rows")
    (stale / ".per_record_losses.parquet.4242.partial").write_bytes(b"PAR1 partial")
    (stale / ".failure.json.k3j_x9a0").write_text("{}")
    (stale / "confidential.json").write_text("new")
    if manifest is not None:
        _staging._write_carried(stale, manifest)
    (stale / "compare").mkdir()
    (stale / "compare" / "compare.json").write_text("{}")
    return stale


@pytest.mark.parametrize("manifest", [["compare"], None], ids=["manifest", "no manifest"])
def test_a_killed_runs_scratch_is_deleted_and_the_comparison_kept(
        tmp_path: Path, staging_data: Path, manifest: list[str] | None) -> None:
    s = curator_spec(tmp_path, staging_data)
    out = tmp_path / "out"
    (out / "confidential").mkdir(parents=True)   # compare/ was carried out of it
    stale = _killed_run(out, manifest)
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 0, err
    conf = out / "confidential"
    assert names(conf) == RELEASE | {"compare"}   # was: the scratch given back too
    assert (conf / "compare" / "compare.json").read_text() == "{}"
    assert not stale.exists() and names(out) == {"confidential", "public"}
    # and the next run (--overwrite) keeps it, with nothing of tabdp's in the folder
    assert run("run", "--test-seed", s, "--quiet", "--overwrite")[0] == 0
    assert names(conf) == RELEASE | {"compare"}


def test_only_what_the_manifest_lists_is_given_back(tmp_path: Path) -> None:
    conf = tmp_path / "confidential"
    conf.mkdir()
    stale = _killed_run(tmp_path, ["compare", "gone.txt"])
    (stale / "junk").mkdir()   # not listed: the run's own (a scratch name tabdp may add)
    assert _staging.clean_stale_staging([conf], private=[True]) == [stale]
    assert names(conf) == {"compare"} and not stale.exists()


def test_scratch_is_never_called_the_curators(tmp_path: Path, staging_data: Path) -> None:
    """A stray temporary file of a failed run's failure.json: not 'no tabdp run wrote' it."""
    s = curator_spec(tmp_path, staging_data)
    conf = tmp_path / "out" / "confidential"
    conf.mkdir(parents=True)
    (conf / "failure.json").write_text("{}")
    (conf / ".failure.json.k3j_x9a0").write_text("{}")   # killed while writing the next one
    (conf / ".per_record_losses.parquet.777.partial").write_bytes(b"PAR1")
    code, _, err = run("run", "--test-seed", s, "--quiet")
    assert code == 0, err   # was 2: "holds no release, but .failure.json.k3j_x9a0, ..."
    assert names(conf) == RELEASE


def test_staging_writes_the_manifest_first_and_removes_it(tmp_path: Path) -> None:
    pub, conf = tmp_path / "public", tmp_path / "confidential"
    pub.mkdir()
    conf.mkdir()
    curator_files(conf)
    (conf / "confidential.json").write_text("old")
    staging = _staging._Staging([pub, conf], True, private=[False, True])
    seen: list[object] = []

    def commit() -> None:   # after the carrying, before the renames
        tmp = staging.tmps[1]
        seen.append(json.loads((tmp / _staging.CARRIED_MANIFEST).read_text()))
        seen.append(sorted(names(tmp)))

    with staging as (p, c):
        (c / "confidential.json").write_text("new")
        (p / "manifest.json").write_text("new")
        staging.commit = commit
    assert seen[0] == {"carried": ["cmp_p15", "compare", "secret_curator_notes_2026.txt"]}
    assert _staging.CARRIED_MANIFEST in seen[1] and "compare" in seen[1]
    assert names(conf) == {"confidential.json", "compare", "cmp_p15",
                           "secret_curator_notes_2026.txt"}   # the manifest gone
    assert names(tmp_path) == {"public", "confidential"}


def test_a_linked_confidential_folder_is_refused(tmp_path: Path, staging_data: Path) -> None:
    s = curator_spec(tmp_path, staging_data)
    real = tmp_path / "vault" / "conf"
    real.mkdir(parents=True)
    curator_files(real)
    (tmp_path / "out").mkdir()
    os.symlink(real, tmp_path / "out" / "confidential")
    for extra in ([], ["--overwrite"]):
        code, _, err = run("run", "--test-seed", s, "--quiet", *extra)
        assert code == 2 and "is not a plain folder but a symbolic link" in err, err
        assert "Hint: name the link's target" in err
        # was: compare/ and the notes moved out of the vault, a .old-* link left behind
        assert names(real) == {"compare", "cmp_p15", "secret_curator_notes_2026.txt"}
        assert names(tmp_path / "out") == {"confidential"}
    # a .old-* link an earlier run left: removed, what it points to kept
    (tmp_path / "out" / "confidential").unlink()
    (tmp_path / "out" / "confidential").mkdir()
    os.symlink(real, tmp_path / "out" / ".confidential.old-999999999-abcd")
    assert run("run", "--test-seed", s, "--quiet")[0] == 0
    assert names(tmp_path / "out") == {"confidential", "public"}
    assert names(real) == {"compare", "cmp_p15", "secret_curator_notes_2026.txt"}
