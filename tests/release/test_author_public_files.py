"""Review rev62a: an author-mode public file is read as it was checked, never through a link.

An author-mode spec names public metadata files (keys, domains, hierarchies) by name; the name
is checked (its real path in a public folder, outside every dataset, one hard link) and the file
read then, and a keys file again at run time. A name replaced by a link to the data between the
check and a read (by anyone who can write in a public folder) must not be read: every read opens
the checked file below its public folder without following links (docs/privacy-semantics.md,
"The author/curator boundary").
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import polars as pl
import pytest

from tabdp.exceptions import SpecError
from tabdp.release import load_curator_config
from tabdp.release.runner import run_release
from tabdp.release.spec import files, load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import write_curator  # noqa: E402

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links, POSIX open flags")

SPEC = """
[release]
name = "swap"
[input]
dataset = "d"
mode = "author"
nulls = "drop"
unit_nulls = "drop"
{domains}
[[tables]]
name = "n"
kind = "count"
by = ["code"]
{keys}
[randomness]
seed = 3
"""

#: The data's codes (confidential: which codes occur) and the public key list's.
SECRET = ["77", "88", "99"]
PUBLIC = ["01", "02"]


def _server(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    pl.DataFrame({"code": SECRET, "v": [1, 2, 3]}).write_parquet(root / "data" / "k.parquet")
    (root / "meta" / "sub").mkdir(parents=True)
    pl.DataFrame({"code": PUBLIC}).write_parquet(root / "meta" / "k.parquet")
    pl.DataFrame({"code": PUBLIC}).write_parquet(root / "meta" / "sub" / "k.parquet")
    os.symlink("sub/k.parquet", root / "meta" / "via.parquet")  # a link inside the folder
    write_curator(root, {"d": "data/k.parquet"}, public=[root / "meta"],
                  schemas={"d": {"code": "String", "v": "Int64"}})
    return root


def _spec(root: Path, **parts: str) -> object:
    text = SPEC.format(domains=parts.get("domains", ""), keys=parts.get("keys", ""))
    (root / "s.toml").write_text(text, encoding="utf-8")
    return load_spec(root / "s.toml", curator=load_curator_config(root / "curator.toml"))


def _swap(link: Path, target: Path) -> None:
    """Replace ``link`` (a file or folder) by a symbolic link to ``target``."""
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    else:
        link.unlink()
    os.symlink(target, link)


@pytest.mark.parametrize("name", ["k.parquet", "via.parquet"])
def test_a_keys_file_replaced_by_a_link_after_the_check_is_not_read(
        tmp_path: Path, name: str) -> None:
    root = _server(tmp_path / "srv")
    spec = _spec(root, keys=f'keys = {{ file = "{name}" }}')
    # after the spec was checked: the name (or the folder on its way) now leads to the data
    if name == "k.parquet":
        _swap(root / "meta" / "k.parquet", root / "data" / "k.parquet")
    else:
        _swap(root / "meta" / "sub", root / "data")
    with pytest.raises(SpecError, match="no longer a file of the curator's public folders"):
        run_release(spec, test_seed=True)  # type: ignore[arg-type]
    assert not (root / "releases" / "swap" / "public").exists()


def test_the_keys_file_as_checked_is_still_released(tmp_path: Path) -> None:
    root = _server(tmp_path / "srv")
    run_release(_spec(root, keys='keys = { file = "via.parquet" }'),  # type: ignore[arg-type]
                test_seed=True)
    out = pl.read_parquet(root / "releases" / "swap" / "public" / "n.parquet")
    assert sorted(out["code"].unique()) == PUBLIC


def test_a_name_replaced_between_its_check_and_its_read_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _server(tmp_path / "srv")
    checked = files._public_file

    def then_swapped(*args: object, **kwargs: object) -> Path:
        found = checked(*args, **kwargs)  # type: ignore[arg-type]
        _swap(root / "meta" / "k.parquet", root / "data" / "k.parquet")
        return found

    monkeypatch.setattr(files, "_public_file", then_swapped)
    with pytest.raises(SpecError, match="not in the curator's public folders") as got:
        _spec(root, domains='[domains]\ncode = { file = "k.parquet", column = "code" }')
    assert str(root) not in str(got.value)


def test_a_public_folder_replaced_by_a_link_after_the_check_is_not_read(
        tmp_path: Path) -> None:
    # the public folder itself (not only a folder below it) swapped for a link to the data's
    # folder, which holds a file of the checked name: never followed (review rev62b)
    root = _server(tmp_path / "srv")
    spec = _spec(root, keys='keys = { file = "k.parquet" }')
    os.rename(root / "meta", root / "meta.old")
    os.symlink(root / "data", root / "meta")
    with pytest.raises(SpecError, match="no longer a file of the curator's public folders"):
        run_release(spec, test_seed=True)  # type: ignore[arg-type]
    assert not (root / "releases" / "swap" / "public").exists()


def test_a_hard_link_to_the_data_removed_just_after_its_open_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a hard link to a data file (two names) is opened, then its public name removed: the open
    # file's link count is 1 when checked, but it is the data file (review rev62b)
    root = _server(tmp_path / "srv")
    spec = _spec(root, keys='keys = { file = "k.parquet" }')
    public = root / "meta" / "k.parquet"
    public.unlink()
    os.link(root / "data" / "k.parquet", public)
    fstat = os.fstat

    def unlinked_first(fd: int) -> os.stat_result:
        if public.exists() and os.path.samestat(fstat(fd), os.stat(public)):
            public.unlink()
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", unlinked_first)
    keys = spec.tables[0].keys_file  # type: ignore[attr-defined]
    with pytest.raises(SpecError, match="no longer a file of the curator's public folders"):
        files.read_table_file(keys)  # before the fix: the data's codes
