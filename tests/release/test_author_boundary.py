"""Issue 27: author mode as a real boundary (the spec / CLI side).

An author-mode spec names a dataset of the curator configuration and public metadata files by
name only. Paths, globs, partitions, absolute paths, ``..`` and names resolving into a dataset
are refused from the text alone, before anything is read, with the same exit code and the same
bytes on stdout / stderr whatever the server holds (docs/privacy-semantics.md, "The
author/curator boundary").
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.exceptions import SpecError
from tabdp.release import CuratorConfig, load_curator_config, parse_curator_config
from tabdp.release.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import NOISY, R15_SPEC, run_cli, schema_of, write_curator  # noqa: E402
from _specs import author_input  # noqa: E402

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"

SPEC = """
[release]
name = "boundary"
{input}{domains}
[hierarchies.geo]
file = "{hier_file}"
levels = ["state", "county"]
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 1e5 }}
[[tables]]
name = "n"
kind = "count"
by = [{count_by}]
{keys}
"""


def spec_text(*, input: str = 'dataset = "cbp"', domains: str = "",  # noqa: A002
              hier_file: str = "geography.csv", count_by: str = '"county"',
              keys: str = "") -> str:
    return SPEC.format(input=author_input("payroll = [0, 1e9]", source=input), domains=domains,
                       hier_file=hier_file, count_by=count_by, keys=keys)


def _server(root: Path, with_04: bool) -> Path:
    """A server: hive and plain layouts of a dataset (state 04 present or not), metadata."""
    root.mkdir(parents=True)
    df = generate_establishments(400, seed=3).filter(pl.col("state").is_in(["01", "02"]))
    if with_04:
        extra = df.head(1).with_columns(pl.lit("04").alias("state"),
                                        (pl.col("estab_id") + 10**6).alias("estab_id"))
        df = pl.concat([df, extra])
    df.write_parquet(root / "data" / "hive", partition_by="state")
    (root / "data" / "plain" / "parts").mkdir(parents=True)
    for (state,), part in df.partition_by("state", as_dict=True).items():
        part.write_parquet(root / "data" / "plain" / "parts" / f"x_{state}.parquet")
    df.write_parquet(root / "data" / "input.parquet")
    meta = root / "meta"
    meta.mkdir()
    (meta / "geography.csv").write_bytes((HIER / "geography.csv").read_bytes())
    pl.DataFrame({"naics2": ["11", "21"]}).write_csv(meta / "naics2.csv")
    # a public-looking name that is a link to the confidential data
    os.symlink(root / "data" / "input.parquet", meta / "linked.parquet")
    # a hard link has no other real path: the realpath check alone would accept it
    os.link(root / "data" / "input.parquet", meta / "hardlinked.parquet")
    write_curator(root, {"cbp": "data/hive", "plain": "data/plain",
                         "flat": "data/input.parquet"}, public=[meta], root="releases",
                  schemas=dict.fromkeys(("cbp", "plain", "flat"), schema_of(df)))
    return root


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("servers")
    return _server(base / "with04", True), _server(base / "without04", False)


def _cli(server: Path, monkeypatch: pytest.MonkeyPatch, text: str, *args: str
         ) -> tuple[int, str, str]:
    """Run ``tabdp <args> s.toml --curator curator.toml`` from the server's folder."""
    monkeypatch.chdir(server)
    (server / "s.toml").write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*args, "s.toml", "--curator", "curator.toml"], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _both(servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, text: str,
          *args: str) -> tuple[int, str, str]:
    """The same spec on both servers: identical exit code, stdout and stderr, byte for byte."""
    a = _cli(servers[0], monkeypatch, text, *args)
    b = _cli(servers[1], monkeypatch, text, *args)
    assert a == b, (a, b)
    for server in servers:  # no server path, in any form
        assert str(server) not in a[1] + a[2] and str(server.parent) not in a[1] + a[2]
    return a


# -- finding 1: any server file became a "public" key list -----------------------------------
METADATA_ATTACKS = {
    "domain, the data's file name": dict(
        domains='[domains]\npayroll = { file = "input.parquet", column = "payroll" }',
        count_by='"payroll"'),
    "domain, a relative path": dict(
        domains='[domains]\npayroll = { file = "../data/input.parquet", column = "payroll" }',
        count_by='"payroll"'),
    "domain, an absolute path": dict(
        domains='[domains]\npayroll = { file = "/etc/passwd", column = "payroll" }',
        count_by='"payroll"'),
    "domain, a link to the data": dict(
        domains='[domains]\npayroll = { file = "linked.parquet", column = "payroll" }',
        count_by='"payroll"'),
    "keys, the data's file": dict(keys='keys = { file = "input.parquet" }',
                                  count_by='"county"'),
    "keys, a path": dict(keys='keys = { file = "../data/input.parquet" }', count_by='"county"'),
    "keys, a link to the data": dict(keys='keys = { file = "linked.parquet" }',
                                     count_by='"county"'),
    "domain, a hard link to the data": dict(
        domains='[domains]\npayroll = { file = "hardlinked.parquet", column = "payroll" }',
        count_by='"payroll"'),
    "keys, a hard link to the data": dict(keys='keys = { file = "hardlinked.parquet" }',
                                          count_by='"county"'),
    "hierarchy, the data's file": dict(hier_file="input.parquet"),
    "hierarchy, a path": dict(hier_file="../data/input.parquet"),
    "hierarchy, a home path": dict(hier_file="~/geo.csv"),
    "hierarchy, a glob": dict(hier_file="geo*.csv"),
}


@pytest.mark.parametrize("attack", list(METADATA_ATTACKS))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_metadata_files_name_public_files_only(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, attack: str,
        command: str) -> None:
    """Finding 1: ``file = "input.parquet"`` (and paths, links) are refused, exit 2, nothing read.

    Before, ``[domains] payroll = { file = "input.parquet", column = "payroll" }`` published
    every distinct confidential payroll value.
    """
    code, out, err = _both(servers, monkeypatch, spec_text(**METADATA_ATTACKS[attack]),
                           command)
    assert code == 2 and out == "", err
    assert "author mode" in err or "not in the curator's public folders" in err, err
    assert not (servers[0] / "releases").exists()   # nothing written (nor read)


def test_a_link_is_refused_like_a_missing_file(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A public name linking into a dataset: the message of a missing public file."""
    link = spec_text(**METADATA_ATTACKS["domain, a link to the data"])
    missing = link.replace("linked.parquet", "nosuch.parquet")
    a = _cli(servers[0], monkeypatch, link, "validate")
    b = _cli(servers[0], monkeypatch, missing, "validate")
    assert a[0] == b[0] == 2
    assert a[2].replace("linked", "X") == b[2].replace("nosuch", "X")


def test_a_public_name_hard_linked_to_the_data_is_a_missing_file(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A hard link (st_nlink > 1) in a public folder: the message of a missing public file.

    A hard link resolves to itself, so the realpath check cannot see that its other name is a
    dataset file; every public file with more than one link is refused.
    """
    meta = servers[0] / "meta"
    assert os.path.samefile(meta / "hardlinked.parquet", servers[0] / "data" / "input.parquet")
    assert os.path.realpath(meta / "hardlinked.parquet") == str(meta / "hardlinked.parquet")
    link = spec_text(**METADATA_ATTACKS["domain, a hard link to the data"])
    missing = link.replace("hardlinked.parquet", "nosuch.parquet")
    a = _cli(servers[0], monkeypatch, link, "validate")
    b = _cli(servers[0], monkeypatch, missing, "validate")
    assert a[0] == b[0] == 2
    assert "not in the curator's public folders" in a[2]
    assert a[2].replace("hardlinked", "X") == b[2].replace("nosuch", "X")


# -- finding 2: the partition ban was bypassed by globs ---------------------------------------
GLOBS = ["data/hive/state?04/*.parquet", "data/hive/state*04/*", "data/hive/*04/*",
         "data/hive/state=04", "data/plain/parts/*_04.parquet", "data/plain/parts/x_04.parquet",
         "../with04/data/hive/*04/*", "data/input.parquet", "{abs}/data/hive/state?04/*.parquet",
         "{abs}/data/hive"]


@pytest.mark.parametrize("pattern", GLOBS)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_input_paths_are_refused_from_the_text(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, pattern: str,
        command: str) -> None:
    """Finding 2: every input path is refused, the same way whether state 04 exists or not.

    Both servers get the very same spec text (absolute paths point at the server WITH state
    04); exit code, stdout and stderr are compared byte for byte.
    """
    text = spec_text(input=f'path = "{pattern.format(abs=servers[0].as_posix())}"')
    code, out, err = _both(servers, monkeypatch, text, command)
    assert code == 2 and out == "" and "input.path" in err and "author mode" in err, err
    assert "dataset = " in err  # the fix: name a dataset of the curator configuration


@pytest.mark.parametrize("given", ['table = "lake.cbp"', 'dataset = "../data/hive"',
                                   'dataset = "cbp"\nhive_partitioning = false', ""])
def test_author_input_is_a_declared_dataset(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    code, out, err = _both(servers, monkeypatch, spec_text(input=given), "validate")
    assert code == 2 and out == "" and "input" in err, err


def test_without_the_curator_configuration(servers: tuple[Path, Path],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An author-mode spec without a configuration: exit 2, the message says how to get one."""
    monkeypatch.chdir(servers[0])
    monkeypatch.delenv("TABDP_CURATOR", raising=False)
    (servers[0] / "s.toml").write_text(spec_text())
    for command in ("validate", "plan", "run"):
        err = io.StringIO()
        assert cli.main([command, "s.toml"], stdout=io.StringIO(), stderr=err) == 2
        assert "--curator" in err.getvalue() and "curator" in err.getvalue()


def test_author_release_by_dataset_name(servers: tuple[Path, Path],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid author spec: names only; the outputs go to <root>/<release.name>; no path shown.

    The environment variable TABDP_CURATOR stands in for --curator.
    """
    server = servers[0]
    monkeypatch.chdir(server)
    monkeypatch.setenv("TABDP_CURATOR", str(server / "curator.toml"))
    (server / "s.toml").write_text(spec_text(
        domains='[domains]\nnaics2 = { file = "naics2.csv" }', count_by='"naics2"'))
    for command in ("validate", "plan", "run"):
        out, err = io.StringIO(), io.StringIO()
        assert cli.main([command, "s.toml"], stdout=out, stderr=err) == 0, err.getvalue()
        assert str(server) not in out.getvalue() + err.getvalue(), command
    top = server / "releases" / "boundary"
    assert sorted(p.name for p in top.iterdir()) == ["confidential", "plan", "public"]
    manifest = json.loads((top / "public" / "manifest.json").read_text())
    assert str(server) not in json.dumps(manifest)
    assert manifest["spec"]["content"]["input"]["dataset"] == "cbp"
    # plan --out is refused (the author names no server folder)
    err = io.StringIO()
    assert cli.main(["plan", "s.toml", "--out", "elsewhere"], stdout=io.StringIO(),
                    stderr=err) == 2
    assert "--out" in err.getvalue() and not (server / "elsewhere").exists()


@pytest.mark.parametrize("name", ["..", ".", ".hidden"])
def test_release_name_cannot_leave_the_output_root(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The release name is the output folder under the root: '..' would climb out of it."""
    text = spec_text().replace('name = "boundary"', f'name = "{name}"')
    code, _, err = _both(servers, monkeypatch, text, "run")
    assert code == 2 and "release.name" in err, err
    rel = servers[0] / "releases"
    assert not any(p.exists() for p in (servers[0] / "public", rel / "public", rel / ".hidden"))


def test_output_folders_are_refused_in_author_mode(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    text = spec_text() + '\n[output]\npublic = "/tmp/x/public"\nconfidential = "/tmp/x/c"\n'
    code, _, err = _both(servers, monkeypatch, text, "validate")
    assert code == 2 and "output.public" in err and "output root" in err, err
    ok = spec_text() + '\n[output]\nform = "wide"\n'
    assert _cli(servers[0], monkeypatch, ok, "validate")[0] == 0


def test_missing_public_file_and_column_messages_name_the_file_only(
        servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Public files may be quoted (by their declared name), never their server path."""
    missing = spec_text(hier_file="nosuch.csv")
    code, _, err = _both(servers, monkeypatch, missing, "validate")
    assert code == 2 and "'nosuch.csv' is not in the curator's public folders" in err
    bad_col = spec_text(domains='[domains]\nnaics2 = { file = "naics2.csv", column = "x" }',
                        count_by='"naics2"')
    code, _, err = _both(servers, monkeypatch, bad_col, "validate")
    assert code == 2 and "'naics2.csv'" in err and "'x'" in err, err


def test_curator_mode_keeps_paths(servers: tuple[Path, Path],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Curator mode: today's paths; a declared dataset may be used too (with the config)."""
    text = spec_text(input='path = "data/input.parquet"').replace('mode = "author"',
                                                                  'mode = "curator"')
    text = text.replace('file = "geography.csv"', 'file = "meta/geography.csv"')
    text += '\n[output]\npublic = "o/public"\nconfidential = "o/confidential"\n'
    assert _cli(servers[0], monkeypatch, text, "validate")[0] == 0
    by_name = text.replace('path = "data/input.parquet"', 'dataset = "flat"')
    code, _, err = _cli(servers[0], monkeypatch, by_name, "validate")
    assert code == 0, err


def test_author_only_policy(servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
                            ) -> None:
    """``[policy] author_only``: an author cannot write mode = "curator" to get paths back."""
    text = spec_text(input='path = "data/hive/*04/*"').replace('mode = "author"',
                                                               'mode = "curator"')
    text += '\n[output]\npublic = "o/public"\nconfidential = "o/confidential"\n'
    for server in servers:
        cfg = server / "curator.toml"
        cfg.write_text(cfg.read_text() + "\n[policy]\nauthor_only = true\n")
    try:
        code, out, err = _both(servers, monkeypatch, text, "validate")
        assert code == 2 and "input.mode" in err and "author_only" in err, err
        assert _cli(servers[0], monkeypatch, spec_text(), "validate")[0] == 0
    finally:
        for server in servers:
            cfg = server / "curator.toml"
            cfg.write_text(cfg.read_text().replace("\n[policy]\nauthor_only = true\n", ""))


def test_declared_schema_columns(tmp_path: Path) -> None:
    """A declared schema: the spec may name only its columns (decided from the text)."""
    df = generate_establishments(50, seed=1)
    df.write_parquet(tmp_path / "d.parquet")
    cfg = write_curator(tmp_path, {"d": "d.parquet"}, public=[HIER], schemas={"d": {
        "estab_id": "Int64", "state": "String", "county": "String", "payroll": "Float64"}})
    config = load_curator_config(cfg)
    assert config.datasets["d"].polars_schema()["payroll"] == pl.Float64
    (tmp_path / "s.toml").write_text(spec_text(input='dataset = "d"'))
    spec = load_spec(tmp_path / "s.toml", curator=config)
    assert spec.input.schema["payroll"] == "Float64" and spec.input.dataset == "d"
    (tmp_path / "s.toml").write_text(spec_text(input='dataset = "d"').replace(
        'measures = ["payroll"]', 'measures = ["employment"]').replace(
        "payroll = [0, 1e9]", "employment = [0, 1e9]"))
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "s.toml", curator=config)
    assert info.value.path == "tables[0].measures" and "declared schema" in str(info.value)


# -- the configuration itself ------------------------------------------------------------------
@pytest.mark.parametrize(("data", "path"), [
    ({"datasets": {"d": {"path": "x", "size": 1}}}, "datasets.d.size"),
    ({"datasets": {"d": {"path": "x/*.parquet"}}}, "datasets.d.path"),
    ({"datasets": {"d": {"path": "x", "table": "a.b"}}}, "datasets.d"),
    ({"datasets": {"d": {"path": "x", "schema": {"a": "float"}}}}, "datasets.d.schema.a"),
    ({"datasets": {"d": {"table": "a.b", "hive_partitioning": True}}},
     "datasets.d.hive_partitioning"),
    ({"datasets": {"d": {"path": "data"}}, "public": {"folders": ["data/meta"]}},
     "public.folders[0]"),
    ({"datasets": {"d": {"path": "data"}}, "output": {"root": "data/out"}}, "output.root"),
    ({"defaults": {"budget": {"rho": -1}}}, "defaults.budget.rho"),
    ({"defaults": {"budget": {"rho": {"x": 1.0}}}}, "defaults.budget.rho"),
    ({"defaults": {"budget": {"limit": 1.0}}}, "defaults.budget.limit"),
    # rev66x: a falling curve (or a size twice) was accepted here and refused in every author
    # spec taking the default, at its own key budget.rho.1e7, which the spec does not have
    ({"defaults": {"budget": {"rho": {"1e3": 5.0, "1e7": 1.0}}}}, "defaults.budget.rho.1e7"),
    ({"defaults": {"budget": {"rho": {"1e3": 1.0, "1000": 2.0}}}}, "defaults.budget.rho.1000"),
    ({"defaults": {"level": 2}}, "defaults.level"),
    ({"defaults": {"delta": 0.5}}, "defaults.delta"),  # r39: δ of statements <= 1e-3
    ({"extra": 1}, "extra"),
])
def test_config_errors_name_the_key(data: dict[str, object], path: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_curator_config(data, "/srv")
    assert info.value.path == f"curator config: {path}", str(info.value)
    assert "Hint:" in str(info.value)


def test_config_defaults_apply_to_author_specs(servers: tuple[Path, Path]) -> None:
    server = servers[0]
    base = load_curator_config(server / "curator.toml")
    config = CuratorConfig(path=None, datasets=base.datasets, public_folders=base.public_folders,
                           output_root=base.output_root,
                           defaults={"budget": {"rho": 2.5}, "level": 0.95})
    (server / "d.toml").write_text(spec_text())
    spec = load_spec(server / "d.toml", curator=config)
    assert spec.budget is not None and spec.budget.rho == 2.5 and spec.release.level == 0.95
    (server / "d.toml").write_text(spec_text() + "\n[budget]\nrho = 1.0\n")
    assert load_spec(server / "d.toml", curator=config).budget.rho == 1.0  # type: ignore


# -- finding 5: the Spark CLI prints tabdp's lines only ----------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_spark_cli_prints_only_tabdp_lines(tmp_path: Path) -> None:
    """``tabdp run --engine spark`` prints tabdp's own lines only.

    No JVM start-up / log4j line (time, host, IP) reaches the terminal; they go to spark.log
    in the confidential folder.
    """
    pytest.importorskip("pyspark")
    df = generate_establishments(200, seed=2)
    df.write_parquet(tmp_path / "d.parquet")
    write_curator(tmp_path, {"cbp": "d.parquet"}, public=[HIER])
    (tmp_path / "s.toml").write_text(spec_text())
    env = dict(os.environ, PYTHONPATH=str(Path(tabdp.__file__).resolve().parents[1]))
    env.pop("TABDP_CURATOR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tabdp.cli", "run", "s.toml", "--curator", "curator.toml",
         "--engine", "spark", "--quiet"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Release 'boundary' done." and len(lines) == 3, proc.stdout
    log = tmp_path / "releases" / "boundary" / "confidential" / "spark.log"
    assert log.exists() and log.stat().st_size > 0


def test_declared_schema_types_are_checked_before_data(tmp_path: Path) -> None:
    """Author mode: a text measure in the DECLARED schema is a spec error (exit 2).

    The declared schema is named; the data's own schema is never consulted (it says Float64).
    """
    from tabdp.release.input_schema import check_spec_input_schema

    df = generate_establishments(50, seed=1)
    df.write_parquet(tmp_path / "d.parquet")
    cfg = write_curator(tmp_path, {"d": "d.parquet"}, public=[HIER], schemas={"d": {}})
    declared = ('schema = {{ estab_id = "Int64", state = "String", county = "String", '
                'payroll = "{}" }}')
    base = cfg.read_text()
    (tmp_path / "s.toml").write_text(spec_text(input='dataset = "d"'))
    for dtype, ok in (("Float64", True), ("String", False)):
        cfg.write_text(base.replace('path = "d.parquet"',
                                    'path = "d.parquet"\n' + declared.format(dtype)))
        spec = load_spec(tmp_path / "s.toml", curator=load_curator_config(cfg))
        if ok:
            assert check_spec_input_schema(spec) is True
            continue
        with pytest.raises(SpecError) as info:
            check_spec_input_schema(spec)
        assert info.value.path == "tables[0].measures[0]", info.value.path
        assert "declared dataset schema" in str(info.value)
        assert str(tmp_path) not in str(info.value)


# -- held: an empty dataset folder against one holding one record (the CLI) -----------------
_SPEC = R15_SPEC


def _r15_cli(root: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> tuple[int, str, str]:
    monkeypatch.chdir(root)
    return run_cli(root, command)


def _public(root: Path, name: str) -> dict[str, Any]:
    """The public folder: file names, each table's schema and key columns, summary.json."""
    pub = root / "releases" / name / "public"
    seen: dict[str, Any] = {}
    for f in sorted(pub.rglob("*")):
        rel = f.relative_to(pub).as_posix()
        if f.suffix == ".parquet":
            t = pl.read_parquet(f)
            keys = [c for c, dt in t.schema.items() if dt == pl.String and c != "flag"
                    and not c.endswith("_flag") and c not in NOISY]
            seen[rel] = (t.schema, t.select(keys).rows())
        else:
            seen[rel] = None
    return seen


pa = pytest.importorskip("pyarrow")


pq = pytest.importorskip("pyarrow.parquet")


# origin: review R15
@pytest.mark.parametrize("files", ["none", "zero_rows", "empty_partition_folder"])
def test_r15_empty_dataset_against_one_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              files: str) -> None:
    """Held: a dataset without records against one record.

    D holds no record (an empty folder, a file of 0 rows, an empty ``state=02`` folder); D'
    one record in one file. ``validate`` and ``run``: the same exit code (0), stdout and
    stderr, and the same public files, tables' schemas and keys.
    """
    schema = {"estab_id": "Int64", "state": "String", "v": "Int64"}
    rec = pa.table({"estab_id": pa.array([1000], pa.int64()), "state": ["02"],
                    "v": pa.array([5], pa.int64())})
    views = []
    for name in ("D", "Dp"):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        if name == "Dp":
            pq.write_table(rec, root / "ds" / "x.parquet")
        elif files == "zero_rows":
            pq.write_table(rec.slice(0, 0), root / "ds" / "x.parquet")
        elif files == "empty_partition_folder":
            (root / "ds" / "state=02").mkdir()
        write_curator(root, {"cbp": "ds"}, public=[HIER], schemas={"cbp": schema},
                      dataset_extra={"cbp": 'unit = "estab_id"'})
        (root / "s.toml").write_text(_SPEC, encoding="utf-8")
        views.append(([_r15_cli(root, monkeypatch, c) for c in ("validate", "run")],
                      _public(root, "r15")))
    assert views[0] == views[1]
    assert [v[0] for v in views[0][0]] == [0, 0]


# -- held: a spec using every release feature, on neighbouring servers ----------------------
from _specs import hierarchies, release_spec, rollups, table  # noqa: E402

_FULL = release_spec(
    table("pay", ["county", "naics2"], '{ family = "gaussian", sigma = 1e5 }',
          measures=["payroll"], extra='consistent = true\n'
          'shares = { county_naics2 = 0.8, state_naics2 = 0.2 }\nnonnegative = true\n'
          + rollups(["state", "naics2"], direct=True) + "\n" + rollups([])),
    table("emp", ["state", "naics6"], measures=["employment"], extra=(
        'calibrate = { family = "exp_polylog", targets = { "5" = 0.5, "2.5e5" = 5.0 }, '
        'typical_total = 100.0, fixed = { p = 1 } }\npublication = { round = 1.0 }\n'
        + rollups(["state", "naics2"]))),
    table("n", ["county"], '{ family = "discrete_gaussian", sigma = 2.0 }', kind="count",
          extra="consistent = true\ninteger = true\n" + rollups(["state"], direct=True)),
    name="full", release_extra='title = "<script>alert(1)</script>"', seed=11,
    input_table=author_input("payroll = [0, 1e8], employment = [0, 1e4]",
                             source='dataset = "cbp"', unit=None),
    sections=hierarchies(files={"geo": "geography.csv", "industry": "naics.csv"})
    + '[budget.rho]\n"1" = 0.2\n"1e4" = 2.0\n"1e8" = 5.0\n'
    '[publication]\ncv_flag = 0.3\nsuppress_cv = 2.0\nnegative = "flag"\n',
    output=False)


def _full_extra(base: pl.DataFrame, kind: str) -> pl.DataFrame:
    one = base.filter(pl.col("state") == "02").head(1).with_columns(
        pl.lit(10**6).alias("estab_id"))
    if kind == "huge":  # far above the bounds: clipped, then left out by the budget
        return one.with_columns(pl.lit(1e15).alias("payroll"))
    if kind == "unit_in_every_county":  # one unit, many cells of every table
        counties = base.filter(pl.col("state") == "02")["county"].unique().sort().to_list()
        return pl.concat([one.with_columns(pl.lit(c).alias("county")) for c in counties])
    assert kind == "codes_outside_the_hierarchies"
    return one.with_columns(pl.lit("02999").alias("county"), pl.lit("999999").alias("naics6"))


# origin: review R15
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["huge", "unit_in_every_county",
                                  "codes_outside_the_hierarchies"])
def test_r15_every_feature_on_neighbouring_servers(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   kind: str) -> None:
    """Held: a spec using every release feature, on servers one record apart.

    Hierarchies, direct and derived rollups, consistent tables with shares,
    ``nonnegative`` and ``integer``, a calibrated table rounded for publication, a curve
    budget, ``cv_flag`` / ``suppress_cv`` / negative flags, an HTML-like title. D' holds one
    more establishment (huge; in every county of its state; with codes outside both
    hierarchies). ``validate``, ``plan`` and ``run``: the same exit codes, stdout and stderr;
    the same public files, table schemas and keys. (Flags, suppressed cells, ``sd`` of
    consistent tables and the public summary's shares of flagged cells follow the noisy
    estimates, so they differ: post-processing of the noise.)
    """
    base = generate_establishments(400, seed=3).filter(pl.col("state").is_in(["01", "02"]))
    schema = {c: str(t) for c, t in base.schema.items()}
    views = []
    for name in ("D", "Dp"):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        base.write_parquet(root / "ds" / "a.parquet")
        if name == "Dp":
            _full_extra(base, kind).write_parquet(root / "ds" / "b.parquet")
        write_curator(root, {"cbp": "ds"}, public=[HIER], schemas={"cbp": schema},
                      dataset_extra={"cbp": 'unit = "estab_id"'})
        (root / "s.toml").write_text(_FULL, encoding="utf-8")
        views.append(([_r15_cli(root, monkeypatch, c) for c in ("validate", "plan", "run")],
                      _public(root, "full")))
        html = (root / "releases" / "full" / "public" / "summary.html").read_text("utf-8")
        assert "<script>alert" not in html
    assert views[0] == views[1]
    assert [v[0] for v in views[0][0]] == [0, 0, 0]


# origin: review r74 — the declared schema's dtypes were classes (pl.String), and the key-type
# check asked isinstance(have, String): a key column declared "String" against a numeric
# domain passed `tabdp validate` and stopped every run after reading the data (exit 4, the
# generic failure), a data-free mistake the author could not see. Likewise (r74, noticed) a
# public Parquet domain whose column holds lists: author mode converts the key column to the
# domain's type, so no type check ran. Both are spec errors now (exit 2).
@pytest.mark.parametrize(("domain", "values", "says"), [
    ("state = [1, 2]", None, "numbers and text"),
    ("file", [1, 2], "numbers and text"),
    ("file", [["01"], ["02"]], "not single values"),
], ids=["inline numbers", "file of numbers", "file of lists"])
def test_r74_a_domain_not_of_the_declared_key_type_is_a_spec_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, domain: str, values: Any,
        says: str) -> None:
    """Author mode: a domain of numbers (or of lists) for a ``String`` key, refused before data."""
    df = pl.DataFrame({"id": [1, 2, 3], "state": ["01", "02", "01"], "v": [1.0, 2.0, 3.0]})
    df.write_parquet(tmp_path / "d.parquet")
    meta = tmp_path / "meta"
    meta.mkdir()
    if values is not None:
        pl.DataFrame({"state": values}).write_parquet(meta / "dom.parquet")
    write_curator(tmp_path, {"cbp": "d.parquet"}, public=[meta],
                  schemas={"cbp": {"id": "Int64", "state": "String", "v": "Float64"}})
    line = domain if values is None else 'state = { file = "dom.parquet", column = "state" }'
    spec = R15_SPEC.replace('state = ["01", "02"]', line).replace('name = "r15"',
                                                                   'name = "r74"')
    (tmp_path / "s.toml").write_text(spec, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for command in ("validate", "run"):
        code, out, err = run_cli(tmp_path, command)
        assert code == 2, (command, code, out, err)
        assert "tables[0].by[0]" in err and says in err, err
        assert "data-dependent failure" not in err and str(tmp_path) not in out + err
    assert not (tmp_path / "releases" / "r74").exists()


# origin: review r74 — a release name longer than the file system's name limit passed every
# check made before the data (the output folder's parent existed and was writable), so the
# run read the data and stopped when it made the folder: exit 4, and the curator's details
# written nowhere (no confidential folder). Now refused before anything is read (exit 2).
@pytest.mark.parametrize("root_exists", [False, True])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_r74_a_release_name_too_long_for_the_file_system_is_refused_before_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, root_exists: bool
        ) -> None:
    df = pl.DataFrame({"id": [1, 2, 3], "state": ["01", "02", "01"], "v": [1.0, 2.0, 3.0]})
    df.write_parquet(tmp_path / "d.parquet")
    write_curator(tmp_path, {"cbp": "d.parquet"},
                  schemas={"cbp": {"id": "Int64", "state": "String", "v": "Float64"}})
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    if root_exists:
        (tmp_path / "releases").mkdir()
    name = "r" * (limit + 1)
    (tmp_path / "s.toml").write_text(R15_SPEC.replace('name = "r15"', f'name = "{name}"'),
                                     encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(tmp_path, command)
    assert code == 2, (code, out, err)
    assert "data-dependent failure" not in err and "too long" in err, err
    assert str(tmp_path) not in out + err
    assert not (tmp_path / "releases").exists() or not any((tmp_path / "releases").iterdir())


def test_r74_an_output_folder_whose_staging_name_is_too_long_is_refused(tmp_path: Path
                                                                         ) -> None:
    """Curator mode too: the run's staging folder beside the output is named after it."""
    from tabdp.exceptions import InvalidParameterError
    from tabdp.release._staging import _check_target

    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    _check_target(tmp_path / ("p" * (limit - 40)), False, "public")  # room for the staging
    for bad in (tmp_path / ("p" * (limit - 5)), tmp_path / ("q" * (limit + 1)) / "public"):
        with pytest.raises(InvalidParameterError, match="too long"):
            _check_target(bad, False, "public")


@pytest.mark.parametrize("author", [True, False])
def test_an_internal_errors_traceback_names_no_server_path_in_author_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, author: bool) -> None:
    """Exit 70 (a bug, before any data is read) shows no server path in author mode.

    The message and the traceback were printed raw until stop 60; curator mode keeps them in
    full.
    """
    from tabdp.release import runner

    df = pl.DataFrame({"id": [1, 2, 3], "state": ["01", "02", "01"], "v": [1.0, 2.0, 3.0]})
    df.write_parquet(tmp_path / "d.parquet")
    write_curator(tmp_path, {"cbp": "d.parquet"},
                  schemas={"cbp": {"id": "Int64", "state": "String", "v": "Float64"}})
    text = R15_SPEC if author else (
        R15_SPEC.replace('dataset = "cbp"', 'path = "d.parquet"').replace('mode = "author"', "")
        + '[output]\npublic = "pub"\nconfidential = "conf"\n')
    (tmp_path / "s.toml").write_text(text, encoding="utf-8")
    secret = str((tmp_path / "d.parquet").resolve())

    def broken(*_a: Any, **_k: Any) -> None:
        raise RuntimeError(f"cannot look at {secret}")

    monkeypatch.setattr(runner, "check_input_present", broken)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(tmp_path, "validate")
    assert code == 70, (code, out, err)
    assert "Traceback (most recent call last)" in err and "RuntimeError" in err, err
    if author:
        assert str(tmp_path) not in out + err, err
        assert "<dataset 'cbp'>" in err, err
    else:
        assert secret in err, err
