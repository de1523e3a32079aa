"""Spec validation: checks what it can before any data is read, and closes footguns.

* the spec's columns against the input's schema before any data is read (exit 2, did you mean);
* a data file given as the spec;
* rounding per table (a too-coarse global round refused; R flag; cv of the published value);
* decreasing calibration targets refused in a spec (the Python check is in
  tests/planning/test_calibrate.py);
* the Python API and a spec share their defaults (negatives, rows outside the key set).
"""

from __future__ import annotations

import io
import json
import math
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.exceptions import InvalidParameterError, SpecError
from tabdp.release.input_schema import check_input_schema, read_input_schema
from tabdp.release.spec import ROUND_MOE_SHARE, load_spec

ROOT = Path(tabdp.__file__).resolve().parents[1]


HIER = ROOT / "data" / "hierarchies"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def corrupt_rows(path: Path) -> None:
    """Garble every byte between the magic and the footer: the schema stays readable, no row."""
    raw = bytearray(path.read_bytes())
    (footer_len,) = struct.unpack("<i", raw[-8:-4])
    start, end = 4, len(raw) - 8 - footer_len
    raw[start:end] = bytes((b ^ 0x5A) for b in raw[start:end])
    path.write_bytes(bytes(raw))


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Parquet file with a valid footer (schema) and unreadable row groups."""
    p = tmp_path_factory.mktemp("data") / "corrupt.parquet"
    generate_establishments(500, seed=3).write_parquet(p, compression="uncompressed",
                                                       statistics=False)
    corrupt_rows(p)
    assert list(pl.scan_parquet(p).collect_schema())[:2] == ["estab_id", "firm_id"]
    with pytest.raises(Exception):  # noqa: B017 - any reader error: the rows are unreadable
        pl.read_parquet(p)
    return p


def spec_text(data: Path, out: Path, *, measure: str = "payroll", by: str = "county",
              unit: str = "estab_id", publication: str = "", table_pub: str = "",
              count_pub: str = "", mode: str = "") -> str:
    return f"""
[release]
name = "t28"
[input]
path = "{data.as_posix()}"
unit = "{unit}"
{mode}
[hierarchies.geo]
file = "{HIER.as_posix()}/geography.csv"
levels = ["state", "county"]
[output]
public = "{out.as_posix()}/public"
confidential = "{out.as_posix()}/confidential"
{publication}
[[tables]]
name = "pay"
measures = ["{measure}"]
by = ["{by}"]
mechanism = {{ family = "gaussian", sigma = 1e6 }}
{table_pub}
[[tables]]
name = "n"
kind = "count"
by = ["state"]
{count_pub}
"""


def write(tmp: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp / name
    p.write_text(text)
    return p


# -- the input's schema, before any data is read -----------------------------------------------
@pytest.mark.parametrize(("kw", "path", "needle"), [
    ({"measure": "payrol"}, "tables[0].measures[0]", "Did you mean 'payroll'?"),
    ({"by": "countyy"}, "tables[0].by[0]", None),
    ({"unit": "estab_idd"}, "input.unit", "Did you mean 'estab_id'?"),
    ({"measure": "naics6"}, "tables[0].measures[0]", "has type String"),
])
def test_schema_errors_exit_2_before_any_data(tmp_path: Path, corrupt: Path, kw: dict[str, str],
                                              path: str, needle: str | None) -> None:
    if kw.get("by") == "countyy":  # a key column missing from the input needs a domain
        text = spec_text(corrupt, tmp_path / "out", **kw).replace(
            "[output]", '[domains]\ncountyy = ["01001"]\n[output]')
    else:
        text = spec_text(corrupt, tmp_path / "out", **kw)
    spec = write(tmp_path, text)
    for command in (["validate"], ["run", "--quiet"]):
        code, _, err = run(*command, str(spec))
        assert code == 2, err
        assert f"spec/usage error: {path}:" in err
        assert "no data was read" in err
        if needle:
            assert needle in err
        assert "data-dependent" not in err
    assert not (tmp_path / "out").exists()  # nothing written, not even failure.json


# origin: issue 28
def test_correct_spec_on_unreadable_rows(tmp_path: Path, corrupt: Path) -> None:
    """The same file passes validate (schema only) and fails the run once rows are read."""
    spec = write(tmp_path, spec_text(corrupt, tmp_path / "out"))
    code, out, err = run("validate", str(spec))
    assert code == 0 and "valid" in out, err
    code, _, err = run("run", "--quiet", str(spec))
    assert code == 4 and "data-dependent failure" in err
    assert not (tmp_path / "out" / "public").exists()


# origin: issue 28
def test_key_type_mismatch(tmp_path: Path) -> None:
    data = tmp_path / "d.parquet"
    generate_establishments(200, seed=1).with_columns(
        pl.col("county").cast(pl.Int64)).write_parquet(data)
    spec = write(tmp_path, spec_text(data, tmp_path / "out"))
    code, _, err = run("validate", str(spec))
    assert code == 2
    assert "tables[0].by[0]: key column 'county' (table 'pay') is Int64 in the input" in err
    assert "level 'county' of hierarchy 'geo'" in err and "String" in err


# origin: issue 28
def test_author_mode_checks_only_a_declared_schema(tmp_path: Path, corrupt: Path) -> None:
    """Author mode: no check against the data's own schema; the curator's declared one is."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _curator import write_curator

    from tabdp.release.curator_config import load_curator_config
    from tabdp.release.input_schema import check_spec_input_schema

    text = spec_text(corrupt, tmp_path / "out", measure="payrol", mode='mode = "author"\n'
                     'nulls = "zero"\nnegatives = "zero"\nnonfinite = "zero"\n'
                     'unit_nulls = "drop"\nbounds = { payrol = [0, 1e10] }')
    text = (text.replace(f'path = "{corrupt.as_posix()}"', 'dataset = "d"')
            .replace(f'file = "{HIER.as_posix()}/geography.csv"', 'file = "geography.csv"'))
    text = text[:text.index("[output]")] + text[text.index("[[tables]]"):]
    spec_file = write(tmp_path, text, "a.toml")
    cfg = write_curator(tmp_path, {"d": corrupt}, public=[HIER], schemas={"d": {}})
    code, out, err = run("validate", "--curator", str(cfg), str(spec_file))
    assert code == 2 and out == "", err  # no declared schema: refused before any read
    assert "no declared schema" in err and "[datasets.d] schema" in err, err
    assert str(tmp_path) not in err
    cfg = write_curator(tmp_path, {"d": corrupt}, public=[HIER], schemas={"d": {
        "estab_id": "Int64", "state": "String", "county": "String", "payrol": "Float64"}})
    code, _, err = run("validate", "--curator", str(cfg), str(spec_file))
    assert code == 0, err  # the declared schema, never the data's own ('payroll')
    spec = load_spec(spec_file, curator=load_curator_config(cfg))
    assert check_spec_input_schema(spec) is True
    declared = {"estab_id": pl.Int64, "state": pl.String, "county": pl.String,
                "payroll": pl.Float64}
    with pytest.raises(SpecError, match="not a column of the declared dataset schema") as e:
        check_input_schema(spec, declared, source="the declared dataset schema")
    assert e.value.path == "tables[0].measures[0]" and "Did you mean 'payroll'?" in str(e.value)


# origin: issue 28
def test_read_input_schema_is_metadata_only(corrupt: Path, tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, spec_text(corrupt, tmp_path / "out")))
    schema = read_input_schema(spec)
    assert schema["payroll"] == pl.Float64 and schema["county"] == pl.String


# -- a data file given as the spec -------------------------------------------------------------
def test_validate_a_parquet_file(tmp_path: Path, corrupt: Path) -> None:
    code, _, err = run("validate", str(corrupt))
    assert code == 2
    assert "is a Parquet data file, not a release spec" in err
    assert "UTF-8" not in err
    binary = tmp_path / "blob.toml"
    binary.write_bytes(b"\x00\x01\x02abc")
    code, _, err = run("validate", str(binary))
    assert code == 2 and "is a binary file, not a release spec" in err
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n")
    code, _, err = run("plan", str(csv))
    assert code == 2 and "is a data file (.csv), not a release spec" in err


# -- rounding ----------------------------------------------------------------------------------
def test_global_round_refused_for_counts(tmp_path: Path, corrupt: Path) -> None:
    text = spec_text(corrupt, tmp_path / "out", publication="[publication]\nround = 1000.0")
    code, _, err = run("validate", str(write(tmp_path, text)))
    assert code == 2
    assert "publication.round: the global rounding unit 1000 also applies to tables[1]" in err
    assert "tables[1].publication = { round = false }" in err
    # the sum table (sd 1e6: moe 1.6e6) takes the global unit; the count sets its own
    text = spec_text(corrupt, tmp_path / "out", publication="[publication]\nround = 1000.0",
                     count_pub="publication = { round = false }")
    code, _, err = run("validate", str(write(tmp_path, text)))
    assert code == 0, err
    spec = load_spec(tmp_path / "s.toml")
    assert spec.tables[0].publication.round == 1000.0 and spec.tables[1].publication.round is None
    # round = 1 changes no integer count: allowed globally
    text = spec_text(corrupt, tmp_path / "out", publication="[publication]\nround = 1.0")
    assert run("validate", str(write(tmp_path, text)))[0] == 0


# origin: issue 28
def test_global_round_refused_for_a_sum_it_would_swamp(tmp_path: Path, corrupt: Path) -> None:
    text = spec_text(corrupt, tmp_path / "out", publication="[publication]\nround = 1e6",
                     count_pub="publication = { round = false }")
    code, _, err = run("validate", str(write(tmp_path, text)))
    assert code == 2 and "tables[0] ('pay', measure 'payroll')" in err
    assert f"more than {ROUND_MOE_SHARE:g} x the planned margin of error" in err


# origin: issue 28
def test_per_table_round_applied_with_consistent_columns(tmp_path: Path) -> None:
    data = tmp_path / "d.parquet"
    generate_establishments(2000, seed=5).write_parquet(data)
    # a per-table round on a count is the author's choice: applied, flagged R where coarse
    text = spec_text(data, tmp_path / "out", count_pub="publication = { round = 100.0 }",
                     table_pub="publication = { round = 1000.0 }")
    spec = write(tmp_path, text.replace('name = "t28"', 'name = "t28"\nlevel = 0.9'))
    code, _, err = run("run", "--quiet", str(spec))
    assert code == 0, err
    n = pl.read_parquet(tmp_path / "out" / "public" / "n.parquet")
    est = n["estimate"].to_numpy()
    assert np.all(est % 100 == 0)
    assert np.all(n["lower"].to_numpy() % 100 == 0) and np.all(n["upper"].to_numpy() % 100 == 0)
    # cv of the published value, sd / moe unrounded (the discrete Gaussian's)
    sd = n["sd"].to_numpy()
    assert np.allclose(sd, 2.0, rtol=0.01)
    ok = est != 0
    assert np.allclose(n["cv"].to_numpy()[ok], sd[ok] / np.abs(est[ok]))
    assert all(c is None or math.isinf(c) for c in n.filter(pl.col("estimate") == 0)["cv"])
    moved = n["flag"].str.contains("R")
    assert moved.sum() > 0  # state counts of ~200 are not multiples of 100: rounded, coarse
    pay = pl.read_parquet(tmp_path / "out" / "public" / "pay.parquet")
    assert np.all(pay["estimate"].to_numpy() % 1000 == 0)
    assert not pay["flag"].str.contains("R").any()  # 1000 << 0.1 x moe (1.6e6)


# origin: issue 28
def test_decreasing_targets_refused_spec(tmp_path: Path, corrupt: Path) -> None:
    text = spec_text(corrupt, tmp_path / "out").replace(
        'mechanism = { family = "gaussian", sigma = 1e6 }',
        'calibrate = { family = "log", targets = { "1e3" = 0.5, "1e7" = 0.2 }, '
        "typical_total = 1e6 }")
    code, _, err = run("validate", str(write(tmp_path, text)))
    assert code == 2
    assert "tables[0].calibrate.targets.1e7: the target at size '1e7' (rho = 0.2) is below" in err
    assert "a larger record would be allowed less loss" in err


def test_missing_mechanism_hint_suggests_a_usable_configuration(tmp_path: Path,
                                                                 corrupt: Path) -> None:
    """The hint's configurations validate and are usable (r39: sigma = 0.3 flags every cell)."""
    import re

    text = spec_text(corrupt, tmp_path / "out")
    code, _, err = run("validate", str(write(tmp_path, text.replace(
        'mechanism = { family = "gaussian", sigma = 1e6 }', ""))))
    assert code == 2 and "a sum table needs a mechanism or a calibrate table" in err
    assert 'sigma = 0.3' not in err
    hint = re.search(r"add (calibrate = \{.*?\} \}) \(", err.replace("\n", " "))
    assert hint is not None, err
    code, out, err = run("validate", str(write(tmp_path, text.replace(
        'mechanism = { family = "gaussian", sigma = 1e6 }', hint.group(1)), "h.toml")))
    assert code == 0, err
    assert "WARNING: tables[0]" not in out + err
    # the example of a mechanism (not a table) is usable too
    code, _, err = run("validate", str(write(tmp_path, text.replace(
        'mechanism = { family = "gaussian", sigma = 1e6 }', 'mechanism = "log"'), "m.toml")))
    example = re.search(r"e\.g\. (mechanism = \{.*?\})", err).group(1)
    assert "sigma = 0.3" not in example
    code, out, err = run("validate", str(write(tmp_path, text.replace(
        'mechanism = { family = "gaussian", sigma = 1e6 }', example), "e.toml")))
    assert code == 0, err
    assert "WARNING: tables[0]" not in out + err


@pytest.mark.parametrize("delta", ["0.99", "0.5", "0.0011"])
def test_large_release_delta_refused_before_data(tmp_path: Path, corrupt: Path,
                                                 delta: str) -> None:
    """δ of the (ε, δ) statements above 1e-3 is refused from the spec alone (r39)."""
    text = spec_text(corrupt, tmp_path / "out").replace('name = "t28"',
                                                         f'name = "t28"\ndelta = {delta}')
    code, _, err = run("validate", str(write(tmp_path, text)))
    assert code == 2, err
    assert f"release.delta: delta = {float(delta):g} is above 0.001" in err
    assert "need δ in (0, 0.001]" in err and "Hint:" in err and "delta = 1e-9" in err
    ok = spec_text(corrupt, tmp_path / "out").replace('name = "t28"', 'name = "t28"\ndelta = 1e-3')
    assert run("validate", str(write(tmp_path, ok, "ok.toml")))[0] == 0


def test_large_report_delta_warns_in_python() -> None:
    """The Python API keeps accepting δ in (0, 1) for a Report, with a PrivacyWarning (r39)."""
    from tabdp.exceptions import PrivacyWarning

    with pytest.warns(PrivacyWarning, match=r"delta = 0.5 is above 0.001"):
        rep = tabdp.Session().report(delta=0.5)
    assert rep.delta == 0.5
    tabdp.Session().report(delta=1e-3)  # no warning (warnings are errors in the suite)


# -- one set of defaults -----------------------------------------------------------------------
@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_python_and_spec_share_the_negatives_default(tmp_path: Path) -> None:
    from tabdp import _defaults
    from tabdp.exceptions import DataValidationError
    from tabdp.frame._engine import NEGATIVE_POLICIES
    from tabdp.frame.keys import KeySet
    from tabdp.mechanisms import Gaussian
    from tabdp.privacy.session import Session
    from tabdp.release.spec import InputSpec
    from tabdp.release.spec.schema import _NEGATIVES

    assert _defaults.NEGATIVES == "error" and InputSpec(path=None, source="x").negatives == "error"
    assert NEGATIVE_POLICIES == _NEGATIVES == _defaults.NEGATIVE_RULES
    df = pl.DataFrame({"g": ["a", "a", "a"], "x": [5.0, -1.0, 3.0]})
    keys = KeySet.from_dict(g=["a"])
    # Python, curator mode, an additive mechanism: "error" refuses them, as a spec does
    with pytest.raises(DataValidationError, match="negative values and negatives='error'"):
        df.dp.sum("x", by="g", keys=keys, mechanism=Gaussian(1.0), negatives="error")
    # ... and so does the default, whatever the mechanism (one reason, the count confidential)
    for m in (Gaussian(1.0), tabdp.mechanisms.LogTransform(sigma=0.25, offset=1000.0)):
        with pytest.raises(DataValidationError, match="negatives='error' \\(the default") as info:
            df.dp.sum("x", by="g", keys=keys, mechanism=m)
        assert info.value.confidential == {"negative_values:x": 1}
        assert "1 " not in str(info.value)
    out = df.dp.sum("x", by="g", keys=keys, mechanism=Gaussian(1e-3), negatives="allow")
    assert abs(float(out["x"][0]) - 7.0) < 0.1
    # None no longer picks a rule per mechanism
    with pytest.raises(InvalidParameterError, match="(?s)got None.*negatives='allow'"):
        df.dp.sum("x", by="g", keys=keys, mechanism=Gaussian(1.0),
                  negatives=None)  # type: ignore[arg-type]
    # author mode: "error" must not be the rule in either
    with pytest.raises(InvalidParameterError, match="negatives='error' \\(the default\\)"):
        df.dp.sum("x", by="g", keys=keys, mechanism=Gaussian(1.0), negatives="error",
                  session=Session(mode="author", data=df), nulls="zero")
    # ... nor the default in an author session's sum: refused from the arguments, nothing read
    # or recorded, the same on data without any negative value
    for data_ in (df, df.with_columns(pl.col("x").abs())):
        cur = tabdp.Curator(seed=1)
        cur.add("d", data_, schema={"g": "String", "x": "Float64"})
        author = cur.author_session("d")
        with pytest.raises(InvalidParameterError, match="declare negatives= in the call") as ie:
            author.sum("x", by="g", keys=keys, mechanism=Gaussian(1.0), nulls="zero")
        assert "negatives='allow'" in str(ie.value)
        assert author.summary()["queries"] == []
        out = author.sum("x", by="g", keys=keys, mechanism=Gaussian(1e-3), nulls="zero",
                         negatives="allow")
        assert abs(float(out["x"][0]) - float(data_["x"].sum())) < 0.1
    # the spec, on the same data: exit 4 (negative values) by default, 0 with "allow"
    data = tmp_path / "d.parquet"
    df.with_columns(pl.lit(1).alias("id")).write_parquet(data)
    base = f"""
[release]
name = "neg"
[input]
path = "{data.as_posix()}"
{{neg}}
[domains]
g = ["a"]
[output]
public = "{(tmp_path / 'out').as_posix()}/public"
confidential = "{(tmp_path / 'out').as_posix()}/confidential"
[[tables]]
name = "t"
measures = ["x"]
by = ["g"]
mechanism = {{{{ family = "gaussian", sigma = 1.0 }}}}
"""
    code, _, err = run("run", "--quiet", str(write(tmp_path, base.format(neg=""))))
    assert code == 4, err
    code, _, err = run("run", "--quiet", "--overwrite",
                       str(write(tmp_path, base.format(neg='negatives = "allow"'))))
    assert code == 0, err


# origin: issue 28
def test_python_and_spec_drop_rows_outside_the_key_set_alike(tmp_path: Path) -> None:
    """Out-of-domain keys (tabdp._defaults.OUT_OF_DOMAIN_KEYS): dropped, counted confidentially."""
    from tabdp import _defaults
    from tabdp.mechanisms import Gaussian
    from tabdp.privacy.session import Session

    assert _defaults.OUT_OF_DOMAIN_KEYS == "drop"
    # one row (g = "z") outside the public key set {a, b}, with a value that would show
    df = pl.DataFrame({"id": [1, 2, 3], "g": ["a", "a", "z"], "x": [1.0, 2.0, 1e6]})
    keys = tabdp.KeySet.from_dict(g=["a", "b"])
    s = Session(seed=1)
    py = df.dp.sum("x", by="g", keys=keys, mechanism=Gaussian(1e-3), session=s)
    assert py["g"].to_list() == ["a", "b"]
    assert py["x"].to_list() == pytest.approx([3.0, 0.0], abs=0.05)
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1
    # the spec on the same data: the same cells and estimates, the row counted confidentially
    data = tmp_path / "d.parquet"
    df.write_parquet(data)
    out = tmp_path / "out"
    text = f"""
[release]
name = "ood"
[input]
path = "{data.as_posix()}"
unit = "id"
[domains]
g = ["a", "b"]
[randomness]
seed = 1
[output]
public = "{out.as_posix()}/public"
confidential = "{out.as_posix()}/confidential"
form = "wide"
[[tables]]
name = "t"
measures = ["x"]
by = ["g"]
mechanism = {{ family = "gaussian", sigma = 1e-3 }}
"""
    code, _, err = run("run", "--quiet", "--test-seed", str(write(tmp_path, text)))
    assert code == 0, err
    table = pl.read_parquet(out / "public" / "t.parquet").sort("g")
    assert table["g"].to_list() == ["a", "b"]
    assert table["x"].to_list() == pytest.approx([3.0, 0.0], abs=0.05)
    conf = json.loads((out / "confidential" / "confidential.json").read_text())
    assert conf["releases"]["t"]["rows_outside_keys"] == 1
    public = "".join(p.read_text(errors="ignore") for p in (out / "public").iterdir()
                     if p.suffix in (".json", ".html"))
    assert "rows_outside_keys" not in public and '"z"' not in public
