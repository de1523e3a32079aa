"""Review rev62a: on a server for authors, the command line's paths are no oracle on the data.

Under a curator configuration with ``[policy] author_only = true`` (``TABDP_CURATOR``), an
author who chooses the command's arguments could name a server file as the spec or as
``--curator``, and the error (not found, a directory, a Parquet data file, not TOML) told
whether it exists; a file of a hive partition folder exists exactly when some record is in that
partition. A spec path inside a dataset or a ledger is now "not found" whether or not it exists,
and ``--curator`` may not name another configuration than the server's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import cli_as_author, count_data_locations, write_curator  # noqa: E402


def _server(root: Path) -> Path:
    """A dataset partitioned by state: ``state=04`` holds one record, ``state=05`` none."""
    (root / "data").mkdir(parents=True)
    pl.DataFrame({"state": ["01", "04"], "v": [1, 2]}).write_parquet(
        root / "data" / "cbp", partition_by="state")
    (root / "meta").mkdir()
    write_curator(root, {"cbp": "data/cbp"}, public=[root / "meta"],
                  extra="[policy]\nauthor_only = true\n",
                  schemas={"cbp": {"state": "String", "v": "Int64"}})
    return root


_cli = cli_as_author


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
@pytest.mark.parametrize("tail", ["00000000.parquet", ""])
def test_a_spec_path_in_a_partition_folder_is_not_found_either_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, tail: str) -> None:
    root = _server(tmp_path / "srv")
    assert (root / "data" / "cbp" / "state=04" / "00000000.parquet").is_file()
    seen = [_cli(root, monkeypatch, command, f"data/cbp/state={s}/{tail}".rstrip("/"))
            for s in ("04", "05")]
    assert seen[0][0] == seen[1][0] == 2
    assert seen[0][1:] == tuple(t.replace("state=05", "state=04") for t in seen[1][1:])
    assert "release spec file not found" in seen[0][2]
    assert str(root) not in seen[0][2]


@pytest.mark.parametrize("state", ["04", "05"])
def test_curator_may_not_name_another_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    root = _server(tmp_path / "srv")
    (root / "s.toml").write_text("[release]\nname = 'x'\n", encoding="utf-8")
    code, out, err = _cli(root, monkeypatch, "validate", "s.toml", "--curator",
                          f"data/cbp/state={state}/00000000.parquet")
    assert code == 2 and out == ""
    assert "--curator may not name another configuration" in err
    assert f"state={state}" not in err


def test_curator_naming_the_servers_own_configuration_is_fine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _server(tmp_path / "srv")
    (root / "s.toml").write_text(
        "[release]\nname = 'x'\n[input]\ndataset = 'cbp'\nmode = 'author'\nnulls = 'drop'\n"
        "unit_nulls = 'drop'\n[domains]\nstate = ['01', '04']\n[[tables]]\nname = 'n'\n"
        "kind = 'count'\nby = ['state']\n", encoding="utf-8")
    code, out, err = _cli(root, monkeypatch, "validate", "s.toml", "--curator", "curator.toml")
    assert code == 0, err


AUTHOR_SPEC = ("[release]\nname = 'x'\n[input]\ndataset = 'cbp'\nmode = 'author'\n"
               "nulls = 'drop'\nunit_nulls = 'drop'\n[domains]\nstate = ['01', '04']\n"
               "[[tables]]\nname = 'n'\nkind = 'count'\nby = ['state']\n")


def test_an_author_run_names_no_spark_master(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root = _server(tmp_path / "srv")
    (root / "s.toml").write_text(AUTHOR_SPEC, encoding="utf-8")
    code, out, err = _cli(root, monkeypatch, "run", "s.toml", "--engine", "spark",
                          "--spark-master", "spark://author.example:7077")
    assert code == 2 and out == ""
    assert "--spark-master: is not allowed with an author-mode spec" in err
    assert not (root / "releases").exists()


def test_the_curators_spark_master_is_used(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tabdp.release import runner

    root = _server(tmp_path / "srv")
    text = (root / "curator.toml").read_text(encoding="utf-8")
    (root / "curator.toml").write_text(text + '\n[engine]\nspark_master = "local[3]"\n',
                                       encoding="utf-8")
    (root / "s.toml").write_text(AUTHOR_SPEC, encoding="utf-8")
    seen: list[object] = []

    def fake(spec: object, **kwargs: object) -> object:
        seen.append(kwargs.get("spark_master"))
        raise SystemExit(0)

    monkeypatch.setattr(runner, "run_release", fake)
    with pytest.raises(SystemExit):
        _cli(root, monkeypatch, "run", "s.toml", "--engine", "spark")
    assert seen == ["local[3]"]


@pytest.mark.parametrize("value", ['""', "3", '"yarn\\n"'])
def test_engine_spark_master_is_checked(value: str) -> None:
    import tomllib

    from tabdp.exceptions import SpecError
    from tabdp.release import parse_curator_config

    with pytest.raises(SpecError, match="engine.spark_master"):
        parse_curator_config(tomllib.loads(f"[engine]\nspark_master = {value}\n"), "/")


def test_an_empty_file_in_a_partition_folder_is_not_found_like_a_missing_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # review rev62b: the error line was redacted only for a spec that is an author's or not
    # TOML, read again by path: an empty file (valid TOML) showed the server path
    root = _server(tmp_path / "srv")
    (root / "data" / "cbp" / "state=04" / "empty.csv").write_bytes(b"")
    seen = [_cli(root, monkeypatch, "validate", f"data/cbp/state={s}/empty.csv")
            for s in ("04", "05")]
    assert seen[0][0] == seen[1][0] == 2
    assert seen[0][1:] == tuple(t.replace("state=05", "state=04") for t in seen[1][1:])
    assert str(root) not in seen[0][2]


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_a_spec_replaced_by_a_link_into_a_dataset_after_the_check_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # review rev62b: the spec's path was checked, then read by path: a spec file of the
    # author's replaced by a link to a partition's file in between was read (a Parquet data
    # file) when the partition has records, "not found" when not
    import os

    from tabdp.release import curator_config

    root = _server(tmp_path / "srv")
    locations = curator_config.data_locations
    seen = []
    for state in ("04", "05"):
        spec = root / "s.toml"
        spec.write_text(AUTHOR_SPEC, encoding="utf-8")

        def swapped(path: object, state: str = state, spec: Path = spec) -> list[Path]:
            if spec.exists() and not spec.is_symlink():
                spec.unlink()
                os.symlink(root / "data" / "cbp" / f"state={state}" / "00000000.parquet", spec)
            return locations(path)  # type: ignore[arg-type]

        monkeypatch.setattr(curator_config, "data_locations", swapped)
        seen.append(_cli(root, monkeypatch, "validate", "s.toml"))
        spec.unlink()
    assert seen[0] == seen[1]
    assert seen[0][0] == 2 and "Parquet" not in seen[0][2]


def test_the_configuration_walks_each_dataset_once(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # review rev62b: every command loads the configuration, whose ledger check walked both
    # datasets of every pair (n² walks of folders that may hold many thousand files)
    from tabdp.release import curator_config

    root = tmp_path / "srv"
    for name in "abcd":
        (root / "data" / name).mkdir(parents=True)
    write_curator(root, {n: f"data/{n}" for n in "abcd"}, public=[])
    calls = count_data_locations(monkeypatch)
    curator_config.load_curator_config(root / "curator.toml")
    assert len(calls) == 4


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_data_locations_finds_links_at_any_depth_and_descends_none(tmp_path: Path) -> None:
    import os

    from tabdp.release.curator_config import data_locations

    (tmp_path / "d" / "x=1" / "y=2").mkdir(parents=True)
    (tmp_path / "o" / "deep").mkdir(parents=True)
    (tmp_path / "f.parquet").write_bytes(b"")
    os.symlink(tmp_path / "f.parquet", tmp_path / "d" / "x=1" / "y=2" / "l.parquet")
    os.symlink(tmp_path / "o", tmp_path / "d" / "x=1" / "o")
    (tmp_path / "o" / "deep" / "inner").symlink_to(tmp_path / "never")  # not descended into
    got = data_locations(tmp_path / "d")
    assert got[0] == (tmp_path / "d").resolve()
    assert sorted(got[1:]) == sorted([(tmp_path / "f.parquet").resolve(),
                                      (tmp_path / "o").resolve()])


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="a device file")
def test_a_spec_path_naming_a_device_is_not_read(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # review rev62b: under author_only the spec is opened only if it is a regular file (a
    # device named by the author, /dev/zero or a tape, was opened and read)
    root = _server(tmp_path / "srv")
    code, out, err = _cli(root, monkeypatch, "validate", "/dev/null")
    assert code == 2 and out == ""
    assert "not a regular file" in err


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
@pytest.mark.parametrize("name", ["stderr.log", "failure.json", "confidential_report.html"])
def test_a_spec_path_in_the_output_root_is_not_found_either_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, name: str) -> None:
    # review rev64a: the output root's confidential folders hold per-record files, and some
    # exist only on some data (stderr.log: native output while the data was read); read as a
    # spec, a file there said "not valid TOML (at line L, column C)" and a missing one "not
    # found", so the command line told an author whether (and how) such a file exists
    seen = []
    for there in (True, False):
        root = _server(tmp_path / f"srv{there}")
        conf = root / "releases" / "x" / "confidential"
        conf.mkdir(parents=True)
        if there:
            (conf / name).write_text("thread 'main' panicked at 12345\n", encoding="utf-8")
        seen.append(_cli(root, monkeypatch, command, f"releases/x/confidential/{name}"))
        assert str(root) not in seen[-1][2]
    assert seen[0] == seen[1]
    assert seen[0][0] == 2 and "release spec file not found" in seen[0][2]


def test_a_spec_path_of_a_ledger_anchor_is_not_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the anchor (.<ledger>.head.json, next to the ledger folder) is the ledger's too
    root = _server(tmp_path / "srv")
    text = (root / "curator.toml").read_text(encoding="utf-8")
    (root / "curator.toml").write_text(text.replace(
        'path = "data/cbp"', 'path = "data/cbp"\nunit = "v"\nledger = "led/l"'), encoding="utf-8")
    (root / "led").mkdir()
    (root / "led" / ".l.head.json").write_text('{"head": "abc"}', encoding="utf-8")
    code, out, err = _cli(root, monkeypatch, "validate", "led/.l.head.json")
    assert code == 2 and "release spec file not found" in err, err


# origin: review rev64t (a spec path refused as unreadable named a part of its real path, a
# link's target the author never wrote: "[Errno 22] not a regular file: 'hidden_dir'")
@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
@pytest.mark.parametrize(("given", "target"), [("l.toml", "hidden_dir"),
                                               ("f/x.toml", "hidden_file")])
def test_an_unreadable_spec_is_named_as_written_not_by_its_real_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, target: str) -> None:
    import os

    root = _server(tmp_path / "srv")
    (root / "hidden_dir").mkdir()
    (root / "hidden_file").write_text("x", encoding="utf-8")
    os.symlink(root / "hidden_dir", root / "l.toml")
    os.symlink(root / "hidden_file", root / "f")
    code, out, err = _cli(root, monkeypatch, "validate", given)
    assert code == 2 and out == ""
    assert "cannot read the release spec" in err and f"{given!r}" in err, err
    assert "hidden" not in err and str(root) not in err, err
