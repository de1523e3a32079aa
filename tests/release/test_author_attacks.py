"""Issue 27 attack review (R9): author-mode runs whose outcome depended on one record.

Each test runs the same author-mode spec on two neighbouring servers (one record apart) and
requires the same exit code and the same bytes on stdout and stderr
(docs/privacy-semantics.md, "The author/curator boundary").
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.datasets.synth import generate_establishments

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import write_curator  # noqa: E402

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"

SPEC = """
[release]
name = "attack"
[input]
dataset = "cbp"
unit = "estab_id"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
{bounds}
[domains]
{domain}
[[tables]]
name = "t"
{table}
by = ["{by}"]
mechanism = {{ family = "gaussian", sigma = 1e5 }}
"""


def _spec(domain: str, table: str, by: str) -> str:
    bounds = "bounds = { payroll = [0, 1e7] }" if "payroll" in table else ""
    return SPEC.format(domain=domain, table=table, by=by, bounds=bounds)


def _base() -> pl.DataFrame:
    return generate_establishments(200, seed=3).filter(pl.col("state").is_in(["01", "02"]))


def _cli(server: Path, monkeypatch: pytest.MonkeyPatch, text: str, *args: str
         ) -> tuple[int, str, str]:
    monkeypatch.chdir(server)
    (server / "s.toml").write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*args, "s.toml", "--curator", "curator.toml", "--overwrite"],
                    stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _both(servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, text: str
          ) -> tuple[int, str, str]:
    a = _cli(servers[0], monkeypatch, text, "run")
    b = _cli(servers[1], monkeypatch, text, "run")
    assert a == b, (a, b)
    for server in servers:
        assert str(server) not in a[1] + a[2]
    return a


def test_hive_value_that_does_not_parse_as_the_domain_type(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition folder ``size_class=5-9`` against the author's integer domain.

    The folder names were parsed as the domain's type: the run failed (exit 4) exactly when
    some record was in a partition whose name is not an integer, and succeeded (exit 0) on
    the neighbour without it. They are now read as text and converted leniently.
    """
    d0 = _base().with_columns(pl.lit("0").alias("size_class"))
    extra = d0.head(1).with_columns(pl.lit("5-9").alias("size_class"),
                                    (pl.col("estab_id") + 10**6).alias("estab_id"))
    servers = []
    for name, df in (("with", pl.concat([d0, extra])), ("without", d0)):
        root = tmp_path / name
        root.mkdir()
        df.write_parquet(root / "ds", partition_by="size_class")
        write_curator(root, {"cbp": "ds"}, public=[HIER])
        servers.append(root)
    text = _spec(domain="size_class = [0, 1, 5]", table='kind = "count"',
                       by="size_class")
    code, out, _ = _both((servers[0], servers[1]), monkeypatch, text)
    assert code == 0 and "Release 'attack' done." in out
    table = pl.read_parquet(servers[0] / "releases" / "attack" / "public" / "t.parquet")
    assert table["size_class"].to_list() == [0, 1, 5]


def test_files_whose_dtypes_follow_their_contents(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset folder of files written one by one by pandas, with a declared schema.

    pandas stores an integer column with one missing value as float: the scan of files whose
    dtypes differ failed (exit 4) exactly when some record had no payroll. Every file is now
    read against the declared schema.
    """
    pytest.importorskip("pandas")
    df = _base().with_columns(pl.col("payroll").round(0).cast(pl.Int64))
    servers = []
    for name, with_null in (("with", True), ("without", False)):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        for (state,), part in df.partition_by("state", as_dict=True).items():
            if with_null and state == "02":
                extra = part.head(1).with_columns(pl.lit(None, pl.Int64).alias("payroll"),
                                                  pl.lit(10**7, pl.Int64).alias("estab_id"))
                part = pl.concat([part, extra])
            part.to_pandas().to_parquet(root / "ds" / f"s{state}.parquet")
        cfg = write_curator(root, {"cbp": "ds"}, public=[HIER])
        cfg.write_text(cfg.read_text().replace(
            'path = "ds"', 'path = "ds"\nschema = { estab_id = "Int64", state = "String", '
                           'payroll = "Float64" }'))
        servers.append(root)
    assert pl.read_parquet(servers[0] / "ds" / "s02.parquet").schema["payroll"] == pl.Float64
    assert pl.read_parquet(servers[0] / "ds" / "s01.parquet").schema["payroll"] == pl.Int64
    text = _spec(domain='state = ["01", "02"]', table='measures = ["payroll"]',
                       by="state")
    code, out, _ = _both((servers[0], servers[1]), monkeypatch, text)
    assert code == 0 and "Release 'attack' done." in out


def test_the_generic_failure_names_no_server_path(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The data-dependent failure's message quoted failure.json's absolute server path."""
    (tmp_path / "ds.parquet").write_bytes(b"PAR1 not parquet PAR1")
    write_curator(tmp_path, {"cbp": "ds.parquet"}, public=[HIER])
    text = _spec(domain='state = ["01", "02"]', table='kind = "count"', by="state")
    code, out, err = _cli(tmp_path, monkeypatch, text, "run")
    assert code == 4 and out == "" and "data-dependent failure" in err, err
    assert str(tmp_path) not in err
    assert "'<curator output root>/attack/confidential/failure.json'" in err, err


@pytest.mark.parametrize("mode", ["author", "curator"])
def test_native_stderr_goes_to_the_confidential_folder(tmp_path: Path, mode: str) -> None:
    """Native writes to fd 2 during an author-mode run reach the confidential log only.

    A Rust panic of Polars prints its message there, outside Python. Curator mode keeps
    the terminal (the curator may see the data).
    """
    import os
    import subprocess

    _base().write_parquet(tmp_path / "ds.parquet")
    write_curator(tmp_path, {"cbp": "ds.parquet"}, public=[HIER])
    text = _spec(domain='state = ["01", "02"]', table='kind = "count"', by="state")
    if mode == "curator":
        text = text.replace('mode = "author"', 'mode = "curator"').replace(
            'dataset = "cbp"', 'path = "ds.parquet"') + (
            '\n[output]\npublic = "o/public"\nconfidential = "o/confidential"\n')
    (tmp_path / "s.toml").write_text(text)
    env = dict(os.environ, PYTHONPATH=str(Path(tabdp.__file__).resolve().parents[1]))
    env.pop("TABDP_CURATOR", None)
    probe = Path(__file__).with_name("_panic_probe.py")
    proc = subprocess.run([sys.executable, str(probe), "run", "s.toml", "--curator",
                           "curator.toml"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    if mode == "curator":
        assert "SECRET-VALUE-123" in proc.stderr
        return
    assert "SECRET-VALUE-123" not in proc.stderr + proc.stdout
    assert "writing outputs" in proc.stderr  # tabdp's own lines still reach the terminal
    log = tmp_path / "releases" / "attack" / "confidential" / "stderr.log"
    assert "SECRET-VALUE-123" in log.read_text()
