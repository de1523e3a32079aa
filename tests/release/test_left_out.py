"""Units left out by the budget (issue 28, finding 1).

The individual filter leaves units out of a table; the curator sees how many and how much of each
measure (confidential.json, the confidential HTML report, the terminal of a curator run),
``budget.max_left_out`` fails a curator run, and everyone can foresee from the public curves
which record sizes are left out (plan, validate, the public summary). Author mode and the public
folder show none of the counts.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.frame._engine import MAX_ABS
from tabdp.privacy.budget import Budget
from tabdp.release.runner import left_out_sizes
from tabdp.release.spec import load_spec

ROOT = Path(tabdp.__file__).resolve().parents[1]
HIER = ROOT / "data" / "hierarchies"
SIGMA = 1e6          # Gaussian: rho(D) = D^2 / (2 sigma^2); with rho <= 1: D <= sigma * sqrt(2)
ESTIMATE_DERIVED = ("estimate", "lower", "upper", "cv", "flag")
OUTPUT = '[output]\npublic = "out/public"\nconfidential = "out/confidential"\n'

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import write_curator  # noqa: E402
from _specs import hierarchies, release_spec, table, write_release  # noqa: E402


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def spec_text(*, mode: str = "curator", budget: str = "rho = 1.0", seed: int | None = 5,
              extra_tables: str = "") -> str:
    rules = ('nulls = "drop"\nnegatives = "zero"\nnonfinite = "drop"\nunit_nulls = "drop"\n'
             'bounds = { payroll = [0, 1e10] }\n') if mode == "author" else ""
    return f"""
[release]
name = "left_out"
delta = 1e-9
[input]
{'dataset = "d"' if mode == "author" else 'path = "d.parquet"'}
unit = "estab_id"
mode = "{mode}"
{rules}
[hierarchies.geo]
file = "{'geography.csv' if mode == "author" else (HIER / 'geography.csv').as_posix()}"
levels = ["state", "county"]
[budget]
{budget}
{'' if seed is None else f'[randomness]{chr(10)}seed = {seed}'}
{'' if mode == "author" else OUTPUT}
[plan]
record_sizes = [1, 1e3, 1e6, 1e7]
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["state"]
mechanism = {{ family = "gaussian", sigma = {SIGMA} }}
grid = 1.0
[[tables.rollups]]
by = []
{extra_tables}
"""


def setup(folder: Path, frame: pl.DataFrame, **kw: object) -> Path:
    """The spec (and, in author mode, the curator configuration ``curator.toml``)."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(folder / "d.parquet")
    path = folder / "s.toml"
    path.write_text(spec_text(**kw), encoding="utf-8")  # type: ignore[arg-type]
    if kw.get("mode") == "author":  # outputs at <root>/<release name>: see outputs()
        write_curator(folder, {"d": "d.parquet"}, public=[HIER], root="releases")
    return path


def outputs(folder: Path, mode: str) -> Path:
    """The folder holding ``public`` and ``confidential`` of a spec made by :func:`setup`."""
    return folder / ("releases/left_out" if mode == "author" else "out")


def curator_args(spec: Path) -> list[str]:
    """``--curator`` for a spec made by :func:`setup` in author mode (nothing otherwise)."""
    cfg = spec.parent / "curator.toml"
    return ["--curator", str(cfg)] if cfg.exists() else []


@pytest.fixture(scope="module")
def base() -> pl.DataFrame:
    return generate_establishments(2000, seed=41)


def expected(frame: pl.DataFrame, limit: float = 1.0) -> tuple[int, float]:
    """Brute force: establishments whose Gaussian loss passes the budget, and their share.

    One row per establishment in this data: its contribution is its payroll.
    """
    x = frame["payroll"].to_numpy()
    out = x**2 / (2 * SIGMA**2) > limit
    return int(out.sum()), float(x[out].sum() / x.sum())


# -- the curator's outputs -------------------------------------------------------------------

def test_curator_outputs_count_left_out_units(tmp_path: Path, base: pl.DataFrame) -> None:
    spec = setup(tmp_path, base)
    code, out, err = run("run", "--test-seed", str(spec), "--quiet")
    assert code == 0, err
    n, share = expected(base)
    assert n > 0
    conf = json.loads((tmp_path / "out" / "confidential" / "confidential.json").read_text())
    lo = conf["releases"]["pay"]["left_out_by_budget"]
    assert lo["units"] == n and lo["rows"] == n
    assert lo["measures"]["payroll"]["share"] == pytest.approx(share, rel=1e-12)
    assert lo["measures"]["payroll"]["total"] == pytest.approx(base["payroll"].sum(), rel=1e-12)
    # the terminal of a curator run
    assert f"pay: {n:,} units ({n:,} rows" in err and f"payroll {100 * share:.2f}%" in err
    assert ("miss their contributions (a bias, downward for counts and for sums of "
            "non-negative values)") in err
    # the confidential HTML report
    html = (tmp_path / "out" / "confidential" / "confidential_report.html").read_text()
    assert "Left out by the budget" in html and f"{share:.1%}" in html
    # the public folder: no count, only the public statement (sizes from the curves)
    for p in (tmp_path / "out" / "public").iterdir():
        text = p.read_bytes().decode("utf-8", errors="replace")
        assert "left_out_by_budget" not in text and f"{n:,} units" not in text, p.name
    summary = json.loads((tmp_path / "out" / "public" / "summary.json").read_text())
    assert "contributions are missing from the published values" in summary["left_out_in_words"][0]
    assert "sd and moe do not include" in summary["left_out_in_words"][0]
    assert "Units left out by the budget" in (tmp_path / "out" / "public" /
                                              "summary.html").read_text()


def test_budget_001_repro(tmp_path: Path, base: pl.DataFrame) -> None:
    """A tiny budget leaves most establishments out: the curator is told, exit 0."""
    spec = setup(tmp_path, base, budget="rho = 0.01")
    code, _, err = run("run", "--test-seed", str(spec), "--quiet")
    assert code == 0, err
    n, share = expected(base, 0.01)
    conf = json.loads((tmp_path / "out" / "confidential" / "confidential.json").read_text())
    lo = conf["releases"]["pay"]["left_out_by_budget"]
    assert lo["units"] == n and lo["measures"]["payroll"]["share"] == pytest.approx(share)
    assert share > 0.5 and f"payroll {100 * share:.2f}%" in err


def _public(folder: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in sorted((folder / "public").iterdir()):
        if p.suffix == ".parquet":
            t = pl.read_parquet(p)
            out[p.name] = t.select([c for c in t.columns if c not in ESTIMATE_DERIVED])
        elif p.name == "summary.json":
            obj = json.loads(p.read_text())
            obj.pop("published_usability")
            obj.pop("publishable_in_words")
            out[p.name] = obj
        elif p.name == "summary.html":
            out[p.name] = re.sub(r'<div id="publishable">.*?</div>', "", p.read_text(),
                                 flags=re.S)
        else:
            out[p.name] = p.read_bytes()
    return out


@pytest.mark.parametrize("mode", ["author", "curator"])
def test_neighbours_left_out_unit_changes_nothing_public(
        tmp_path: Path, base: pl.DataFrame, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One more establishment, large enough to be left out, changes nothing public.

    The public folder is the same apart from the noise; in author mode stdout, stderr and the
    exit code are the same too.
    """
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")
    huge = base.head(1).with_columns(pl.lit(10**9, dtype=pl.Int64).alias("estab_id"),
                                     pl.lit(5e8).alias("payroll"))
    res = {}
    for k, frame in {"base": base, "plus": pl.concat([base, huge])}.items():
        spec = setup(tmp_path / k, frame, mode=mode, seed=None)
        code, out, err = run("run", *curator_args(spec), str(spec), "--quiet")
        res[k] = (code, out.replace(str(tmp_path / k), "<w>"),
                  err.replace(str(tmp_path / k), "<w>"), outputs(tmp_path / k, mode))
    (c0, o0, e0, f0), (c1, o1, e1, f1) = res["base"], res["plus"]
    assert c0 == c1 == 0, (e0, e1)
    if mode == "author":
        assert (o0, e0) == (o1, e1) and "left out" not in e0 + o0
    else:
        assert "left out by the budget" in e0 and e0 != e1
    pa, pb = _public(f0), _public(f1)
    assert pa.keys() == pb.keys()
    for name in pa:
        a, b = pa[name], pb[name]
        assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b, name  # type: ignore
    lo = json.loads((f1 / "confidential" / "confidential.json").read_text())
    assert lo["releases"]["pay"]["left_out_by_budget"]["units"] == \
        json.loads((f0 / "confidential" / "confidential.json").read_text())[
            "releases"]["pay"]["left_out_by_budget"]["units"] + 1


# -- budget.max_left_out ---------------------------------------------------------------------

def test_max_left_out_fails_the_run(tmp_path: Path, base: pl.DataFrame) -> None:
    _, share = expected(base)
    spec = setup(tmp_path, base, budget=f"rho = 1.0\nmax_left_out = {share / 2}")
    code, out, err = run("run", "--test-seed", str(spec), "--quiet")
    assert code == 4 and "data-dependent failure" in err
    assert not any(ch.isdigit() for ch in err.replace(str(tmp_path), ""))
    assert not (tmp_path / "out" / "public").exists()
    assert [p.name for p in (tmp_path / "out" / "confidential").iterdir()] == ["failure.json"]
    failure = json.loads((tmp_path / "out" / "confidential" / "failure.json").read_text())
    assert failure["error"] == "LeftOutError"
    assert failure["confidential"]["tables_over_limit"]["pay"] == pytest.approx(share)
    # at or above the share: the run goes through
    spec = setup(tmp_path / "ok", base, budget=f"rho = 1.0\nmax_left_out = {share * 1.01}")
    assert run("run", "--test-seed", str(spec), "--quiet")[0] == 0


def test_max_left_out_is_checked_in_the_spec(tmp_path: Path, base: pl.DataFrame) -> None:
    spec = setup(tmp_path, base, budget="rho = 1.0\nmax_left_out = 1.5")
    code, _, err = run("validate", str(spec))
    assert code == 2 and "budget.max_left_out" in err and "1.5" in err
    spec = setup(tmp_path / "a", base, mode="author", budget="rho = 1.0\nmax_left_out = 0.1")
    code, _, err = run("validate", *curator_args(spec), str(spec))
    assert code == 2 and "budget.max_left_out" in err and "author" in err
    spec = setup(tmp_path / "b", base, budget="rho = 1.0\nmax_left_out = 0.1")
    assert load_spec(spec).budget.max_left_out == 0.1  # type: ignore[union-attr]


# -- foreseeable from the public curves ------------------------------------------------------

def test_plan_states_left_out_sizes_from_the_policy(tmp_path: Path, base: pl.DataFrame) -> None:
    spec_path = setup(tmp_path, base)
    rows = left_out_sizes(load_spec(spec_path))
    (row,) = [r for r in rows if r["table"] == "pay"]
    # Gaussian: rho(D) = D^2 / (2 sigma^2) passes rho = 1 above sigma * sqrt(2)
    assert row["left_out_from"] == pytest.approx(SIGMA * np.sqrt(2.0), rel=1e-12)
    assert row["all_above"] and row["plan_sizes_left_out"] == [1e7]
    for cmd in ("validate", "plan"):
        code, out, _ = run(cmd, str(spec_path))
        assert code == 0
        assert "a estab_id" not in out and "an estab_id contributing more than about 1.41e+06" \
            " of payroll" in out, cmd
        assert "WARNING: budget: plausible estab_id sizes (1e+07" in out, cmd


def test_left_out_sizes_follow_earlier_tables(tmp_path: Path, base: pl.DataFrame) -> None:
    """Under a curve budget, a second table of the same measure is charged after the first.

    Its threshold solves rho1(s) + rho2(s) = limit(s) where the first admitted the unit.
    """
    curve = {1e3: 0.5, 1e9: 50.0}
    extra = f"""[[tables]]
name = "pay2"
measures = ["payroll"]
by = ["county"]
mechanism = {{ family = "gaussian", sigma = {2 * SIGMA} }}
grid = 1.0
"""
    spec = load_spec(setup(tmp_path, base, budget='rho = { "1e3" = 0.5, "1e9" = 50.0 }',
                           extra_tables=extra))
    got = {r["table"]: r["left_out_from"] for r in left_out_sizes(spec)}
    b = Budget(curve)

    def rho(s: float, sigma: float) -> float:
        return s * s / (2 * sigma * sigma)

    def first_out(f: object) -> float:
        lo, hi = 1.0, 1e13
        for _ in range(200):
            mid = (lo * hi) ** 0.5
            lo, hi = (lo, mid) if f(mid) else (mid, hi)  # type: ignore[operator]
        return hi

    t1 = first_out(lambda s: rho(s, SIGMA) > float(b.limit(s)))
    t2 = first_out(lambda s: (rho(s, SIGMA) if s < t1 else 0.0) + rho(s, 2 * SIGMA)
                   > float(b.limit(s)))
    assert got["pay"] == pytest.approx(t1, rel=1e-9)
    assert got["pay2"] == pytest.approx(t2, rel=1e-9)
    assert got["pay2"] < got["pay"]  # the first table's spending leaves it out earlier


def test_no_budget_no_statement(tmp_path: Path, base: pl.DataFrame) -> None:
    spec = setup(tmp_path, base)
    text = spec.read_text().replace("[budget]\nrho = 1.0\n", "")
    spec.write_text(text)
    assert left_out_sizes(load_spec(spec)) == []
    code, out, _ = run("validate", str(spec))
    assert code == 0 and "left out" not in out


# -- the engines agree with brute force --------------------------------------------------------

@pytest.mark.parametrize("kw", [{"unit": "u"}, {}, {"streaming": True}])
def test_engine_left_out_counts_brute_force(kw: dict[str, object]) -> None:
    rng = np.random.default_rng(3)
    n = 600
    df = pl.DataFrame({"c": rng.choice(["a", "b", "c"], n), "u": rng.integers(0, 150, n),
                       "x": np.exp(rng.normal(8, 2, n))})
    k = tabdp.KeySet.from_dict(c=["a", "b", "c"])
    s = tabdp.Session(seed=1, budget=1.0, **kw)  # type: ignore[arg-type]
    sigma = 3e4
    df.dp.sum("x", by="c", keys=k, mechanism=tabdp.mechanisms.Gaussian(sigma), session=s)
    q = s.report().confidential_summary()["queries"][0]
    if "unit" in kw:
        per = df.group_by("u", "c").agg(pl.col("x").sum(), pl.len().alias("rows"))
        loss = per.group_by("u").agg((pl.col("x") ** 2 / (2 * sigma**2)).sum().alias("rho"),
                                     pl.col("x").sum(), pl.col("rows").sum())
    else:
        loss = df.with_columns((pl.col("x") ** 2 / (2 * sigma**2)).alias("rho"),
                               pl.lit(1).alias("rows"))
    out = loss.filter(pl.col("rho") > 1.0)
    assert q["units_left_out_by_budget"] == out.height > 0
    assert q["rows_left_out_by_budget"] == out["rows"].sum()
    x = q["left_out_by_budget"]["x"]
    assert x["share"] == pytest.approx(out["x"].sum() / df["x"].sum(), rel=1e-9)
    assert x["total"] == pytest.approx(df["x"].sum(), rel=1e-12)


# -- guarantees stated truly (finding 2) -------------------------------------------------------

def _multi_cell_spec(folder: Path, max_cells: str) -> Path:
    states = ["01", "02", "04"]
    rows = [{"estab_id": 1, "state": s, "payroll": 1e5, "employment": 5} for s in states]
    rows += [{"estab_id": 2 + i, "state": states[i % 3], "payroll": 1e4 * (i + 1),
              "employment": 1 + i} for i in range(6)]
    spec = release_spec(
        table("pay", ["state"], '{ family = "gaussian", sigma = 1e5 }',
              measures=["payroll", "employment"]),
        name="multi", release_extra="delta = 1e-9",
        input_extra="\n".join(filter(None, ['unit = "estab_id"', max_cells])),
        domains={"state": states}, seed=3, sections="[plan]\nrecord_sizes = [5, 1e5]")
    return write_release(folder, pl.DataFrame(rows), spec)


@pytest.mark.parametrize("max_cells", ["", "max_cells = 3"])
def test_guarantee_text_against_multi_cell_units(tmp_path: Path, max_cells: str) -> None:
    """A unit in 3 cells: the statement is per cell without max_cells, and holds with it."""
    from tabdp.release.runner import plan_summary

    spec_path = _multi_cell_spec(tmp_path, max_cells)
    summary = plan_summary(load_spec(spec_path))
    words = summary["tables"][0]["guarantee_in_words"]
    # one statement per measure, never payroll and employment added at one number
    pay = [w for w in words if "size 100,000" in w and "payroll cells" in w]
    assert len(pay) == 1 and not any("employment cells" in w and "100,000" in w and "rho = 1 "
                                      in w for w in words)
    assert all("payroll" not in w or "employment" not in w for w in words)
    stated = float(re.search(r"rho = ([0-9.]+)", pay[0]).group(1))  # type: ignore[union-attr]
    code, _, err = run("run", "--test-seed", str(spec_path), "--quiet")
    assert code == 0, err
    per = pl.read_parquet(tmp_path / "out" / "confidential" / "per_record_losses.parquet")
    # brute force: unit 1 has 1e5 of payroll (and 5 employees) in each of 3 cells
    rho_cell = 1e5**2 / (2 * 1e10)
    rho_emp = 5**2 / (2 * 1e10)
    got = per.filter(pl.col("estab_id") == 1)["rho"].item()
    assert got == pytest.approx(3 * (rho_cell + rho_emp), rel=1e-9)
    if max_cells:
        assert stated == pytest.approx(3 * rho_cell, rel=1e-2) and "up to 3 cells" in pay[0]
        assert got <= stated * 1.01 + 3 * rho_emp
    else:
        # the single-cell figure is exceeded by a unit in 3 cells: so it is stated per cell
        assert stated == pytest.approx(rho_cell, rel=1e-2) and got > stated
        assert "per cell (input.max_cells is not set" in pay[0]
    release = summary["guarantee_in_words"]
    assert any(w.startswith("payroll (pay)") for w in release)
    assert any(w.startswith("employment (pay)") for w in release)
    assert release[-1].startswith("In these sentences losses in different currencies are "
                                  "never added at one number")
    assert "pessimistic total" in release[-1] and "conservative" in release[-1]


# -- guarantees in words: stated bounds are never rounded below a unit's real loss (R10) -------

@pytest.mark.slow  # 13 s of the local loop (2026-12-03): CI only
def test_guarantee_words_bound_the_loss_of_a_unit_of_that_type(tmp_path: Path) -> None:
    """A unit exactly of a stated record type loses at most what the public sentence says.

    Payroll (a table and its direct state rollup), employment and a count, all at ρ = 0.5,
    0.5, 0.5 and 0.125 at the first calibration targets: the whole-release sentence's bound is
    1.625, which ``:.3g`` showed as 1.62, below the real loss of such a unit (R10 review).
    """
    frame = generate_establishments(300, seed=5).with_columns(pl.col("estab_id").cast(pl.Int64))
    one = frame.head(1).with_columns(
        pl.lit(10**9, dtype=pl.Int64).alias("estab_id"), pl.lit(250000.0).alias("payroll"),
        pl.lit(5, dtype=pl.Int64).alias("employment"))
    pl.concat([frame, one]).write_parquet(tmp_path / "d.parquet")
    polylog = "family = \"exp_polylog\", fixed = { p = 1 }"
    (tmp_path / "s.toml").write_text(release_spec(
        table("pay", ["county"], measures=["payroll"],
              extra=f'calibrate = {{ {polylog}, targets = {{ "2.5e5" = 0.5, "2e10" = 50.0 }}, '
                    'typical_total = 1e7 }\n[[tables.rollups]]\nby = ["state"]\ndirect = true'),
        table("emp", ["county"], measures=["employment"],
              extra=f'calibrate = {{ {polylog}, targets = {{ "5" = 0.5, "2.5e5" = 50.0 }}, '
                    'typical_total = 100.0 }'),
        table("n", ["county"], '{ family = "discrete_gaussian", sigma = 2.0 }', kind="count"),
        name="words", release_extra="delta = 1e-9", input_extra='unit = "estab_id"',
        seed=3, sections=hierarchies("geo")), encoding="utf-8")
    code, _, err = run("run", "--test-seed", "--quiet", str(tmp_path / "s.toml"))
    assert code == 0, err
    words = json.loads((tmp_path / "out" / "public" / "summary.json").read_text())[
        "guarantee_in_words"]
    (line,) = [w for w in words if w.startswith("a unit with payroll 250,000 and "
                                                 "employment 5")]
    stated = float(re.search(r"at most rho = ([0-9.e+-]+)", line).group(1))  # type: ignore
    eps = float(re.search(r"epsilon = ([0-9.e+-]+) at delta", line).group(1))  # type: ignore
    per = pl.read_parquet(tmp_path / "out" / "confidential" / "per_record_losses.parquet")
    got = per.filter(pl.col("estab_id") == 10**9).row(0, named=True)
    assert got["rho"] == pytest.approx(1.625, rel=1e-12)
    assert got["rho"] <= stated and stated == 1.63
    assert got["epsilon_delta"] <= eps
    assert "to a cell of each of these tables" in words[0]  # pay and its direct rollup
    assert any("to a cell of this table" in w for w in words)
    assert "to a cell of each loses" not in " ".join(words)


def test_author_mode_categorical_file_column_reads_as_declared_text(tmp_path: Path,
                                                                    base: pl.DataFrame) -> None:
    """A text key stored as Categorical (as some writers do) reads as the declared String.

    Before (R10 review), the scan against the declared schema failed (exit 4) on such a file
    and succeeded on its neighbour stored as String.
    """
    res = []
    for k, frame in {"text": base, "cat": base.with_columns(
            pl.col("state").cast(pl.Categorical))}.items():
        spec = setup(tmp_path / k, frame, mode="author", seed=None)
        write_curator(spec.parent, {"d": "d.parquet"}, public=[HIER], root="releases",
                      schemas={"d": {"estab_id": "Int64", "state": "String",
                                     "payroll": "Float64"}})
        code, out, err = run("run", *curator_args(spec), str(spec), "--quiet")
        res.append((code, out, err))
    assert res[0] == res[1] and res[0][0] == 0, res


def test_left_out_sizes_beyond_1e13_are_stated(tmp_path: Path, base: pl.DataFrame) -> None:
    """Review r36 F2: a threshold above 1e13 is stated, with the range searched.

    Sizes were searched only up to 1e13, so a table whose budget leaves out only larger units
    stated nothing (``left_out_from: null``, no words). The statement names the threshold above
    1e13 and the range searched (with a unit: the engine's 128-bit sums), from the spec alone:
    the same whether or not the data holds a record that large (the curator alone is told one
    was left out).
    """
    sigma = 1e13  # Gaussian alone under rho = 1: left out above sigma * sqrt(2) = 1.41e13
    huge = base.head(1).with_columns(pl.lit(10**9, dtype=pl.Int64).alias("estab_id"),
                                     pl.lit(1e15).alias("payroll"))
    stated = {}
    for k, frame in {"base": base, "plus": pl.concat([base, huge])}.items():
        spec = setup(tmp_path / k, frame)
        spec.write_text(spec.read_text().replace(f"sigma = {SIGMA}", f"sigma = {sigma:g}"))
        (row,) = [r for r in left_out_sizes(load_spec(spec)) if r["table"] == "pay"]
        assert row["left_out_from"] == pytest.approx(sigma * np.sqrt(2.0), rel=1e-12)
        assert row["all_above"] and row["searched_up_to"] == 2.0**127
        code, out, err = run("run", "--test-seed", str(spec), "--quiet")
        assert code == 0, err
        summary = json.loads((tmp_path / k / "out" / "public" / "summary.json").read_text())
        stated[k] = (summary["left_out_sizes"], summary["left_out_in_words"])
        assert "a unit contributing more than about 1.41e+13 of payroll" in " ".join(
            summary["left_out_in_words"])
        conf = json.loads((tmp_path / k / "out" / "confidential" / "confidential.json")
                          .read_text())
        assert conf["releases"]["pay"]["left_out_by_budget"]["units"] == (k == "plus")
    assert stated["base"] == stated["plus"]


def test_left_out_search_range_follows_declared_bounds(tmp_path: Path,
                                                       base: pl.DataFrame) -> None:
    """Row mode: sizes are searched up to the declared bound, else the engine's 2**64 clamp.

    A table that leaves nothing out says so, with the range searched.
    """
    spec = setup(tmp_path, base)
    text = spec.read_text().replace('unit = "estab_id"\n', "").replace(
        f"sigma = {SIGMA}", "sigma = 1e13")
    spec.write_text(text)
    (row,) = left_out_sizes(load_spec(spec))
    assert row["searched_up_to"] == 2.0**64 == MAX_ABS and row["all_above"]
    spec.write_text(text.replace('mode = "curator"\n',
                                 'mode = "curator"\nbounds = { payroll = [-1, 1e12] }\n'))
    (row,) = left_out_sizes(load_spec(spec))
    assert row["left_out_from"] is None and row["searched_up_to"] == 1e12
    code, out, _ = run("validate", str(spec))
    assert code == 0
    assert "pay: no record contributing up to 1e+12 of payroll to a cell (the most it can " \
        "contribute) is left out of this table by the budget (as planned:" in out.replace(
            "\n", " ")
    # review r37: a bound below the engine's smallest contribution is searched up to itself
    spec.write_text(text.replace('mode = "curator"\n',
                                 'mode = "curator"\nbounds = { payroll = [0, 1e-9] }\n'))
    (row,) = left_out_sizes(load_spec(spec))
    assert row["searched_from"] <= row["searched_up_to"] == 1e-9
    assert row["left_out_from"] is None


def test_left_out_words_name_the_ranges_left_out(tmp_path: Path, base: pl.DataFrame) -> None:
    """Review r36 F3: sizes left out, then kept, then left out again are stated as ranges.

    The words said "more than about X ... (and at some larger sizes) is left out" while sizes
    above X were kept. An exp_polylog loss (growing like log D) against a curve rising from 0.5
    at 1 to 100 at 1e3: left out from about 0.3 to about 1.4, kept, left out above about 7e10.
    """
    spec = setup(tmp_path, base, budget='rho = { "1" = 0.5, "1e3" = 100.0 }')
    spec.write_text(spec.read_text().replace(
        f'{{ family = "gaussian", sigma = {SIGMA} }}',
        '{ family = "exp_polylog", sigma = 1.0, a = 1.0, d = 4.0, p = 1.0 }').replace(
        "grid = 1.0\n", "grid = 0.1\n"))  # a grid at most a tenth of the noise's sd
    (row,) = [r for r in left_out_sizes(load_spec(spec)) if r["table"] == "pay"]
    b = Budget({1.0: 0.5, 1e3: 100.0})
    mech = load_spec(spec).tables[0].mechanism
    assert not row["all_above"] and len(row["left_out_at"]) == 2
    (a0, b0), (a1, b1) = row["left_out_at"]
    assert b1 == row["searched_up_to"] == 2.0**127 and row["left_out_from"] == a0
    for lo_s, hi_s in ((a0, b0), (a1, b1)):  # the ends: left out inside, kept just outside
        for x in (lo_s, hi_s):
            assert mech.rho(x) > b.limit(x)
        assert mech.rho(lo_s * (1 - 1e-9)) <= b.limit(lo_s * (1 - 1e-9))
    assert mech.rho(b0 * (1 + 1e-9)) <= b.limit(b0 * (1 + 1e-9))
    assert 0.2 < a0 < 0.5 and 1.0 < b0 < 2.0 and 1e10 < a1 < 1e11
    code, out, _ = run("validate", str(spec))
    assert code == 0 and "at some larger sizes" not in out
    want = (f"pay: an estab_id contributing about {a0:.3g} to {b0:.3g} or more than about "
            f"{a1:.3g} of payroll to a cell is left out of this table by the budget (its values "
            "are missing from the published totals); other sizes are kept (as planned: "
            "contributing to one cell of each table releasing it")
    assert want in out.replace("\n", " "), out


def test_left_out_bias_words_hold_for_signed_measures() -> None:
    """Review r72: a left-out unit removes its contributions, whatever their sign.

    With ``input.negatives = "allow"`` (signed measures, accepted with a budget) a left-out
    unit with a negative contribution biases its cells upward, so the public "Left-out units
    bias totals downward" was false there; the words now say the contributions are missing and
    the direction for counts and non-negative values.
    """
    from tabdp.release.runner import LEFT_OUT_BIAS_TEXT, LIFETIME_LEFT_OUT_BIAS_TEXT

    for text in (LEFT_OUT_BIAS_TEXT, LIFETIME_LEFT_OUT_BIAS_TEXT):
        assert "bias totals downward" not in text
        assert "contributions are missing from the published values" in text
        assert "downward for counts and for sums of non-negative values" in text
        assert "sd and moe do not include that bias" in text


def test_a_signed_measures_negative_share_counts_by_its_size() -> None:
    """A left-out part larger than a signed measure's net total is a share above 1 (r77).

    The share of a measure with negative values is net over net: here 2000 / -500 = -4, which
    the largest share, and so `budget.max_left_out`, ignored while it took the maximum.
    """
    from tabdp.release._outputs import left_out_by_table

    s = tabdp.Session(seed=1, budget=1000.0)
    df = pl.DataFrame({"c": ["a", "a", "a"], "x": [2000.0, -1500.0, -1000.0]})
    df.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a"]), negatives="allow",
              mechanism=tabdp.mechanisms.Gaussian(40.0), session=s, name="x")
    got = left_out_by_table(s)["x"]
    assert got["units"] == 1 and got["measures"]["x"]["share"] == -4.0
    assert got["max_share"] == 4.0


def test_a_part_left_out_of_a_zero_net_total_is_an_infinite_share() -> None:
    """A signed measure whose released net total is 0 (review r80).

    2000 was left out of cells whose contributions add up to 0: the share was reported as
    0.0, so `budget.max_left_out` passed whatever was left out; it is now infinite.
    """
    import math

    from tabdp.release._outputs import left_out_by_table

    s = tabdp.Session(seed=1, budget=1000.0)
    df = pl.DataFrame({"c": ["a"] * 12, "x": [2000.0, -1000.0, -1000.0] + [0.0] * 9})
    df.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a"]), negatives="allow",
              mechanism=tabdp.mechanisms.Gaussian(40.0), session=s, name="x")
    got = left_out_by_table(s)["x"]
    assert got["units"] == 1 and got["measures"]["x"]["total"] == 0.0
    assert math.isinf(got["measures"]["x"]["share"]) and math.isinf(got["max_share"])


# -- medians and quantiles: the same counters as a sum's (stop 61, q87) ------------------------

def _median_workload(frame: object, session: tabdp.Session) -> None:
    """A sum that spends the large values' budget, then a median that leaves them out."""
    k = tabdp.KeySet.from_dict(c=["a", "b"])
    frame.dp.sum("x", by="c", keys=k, mechanism=tabdp.mechanisms.Gaussian(5.0),  # type: ignore
                 session=session, name="s")
    frame.dp.median("x", by="c", keys=k, bounds=(0.0, 10.0), epsilon=0.3,  # type: ignore
                    session=session, name="m")


def _median_data() -> pl.DataFrame:
    rng = np.random.default_rng(11)
    n = 400
    # "z" is outside the key set: its rows are in no released cell
    return pl.DataFrame({"c": rng.choice(["a", "b", "z"], n, p=[0.5, 0.4, 0.1]),
                         "u": rng.integers(0, 80, n), "x": rng.uniform(0.0, 10.0, n)})


@pytest.mark.parametrize("kw, form", [({"unit": "u"}, "polars"), ({"unit": "u"}, "pandas"),
                                      ({}, "polars"), ({}, "pandas"),
                                      ({"streaming": True}, "polars")],
                         ids=["unit-polars", "unit-pandas", "row-polars", "row-pandas",
                              "row-streaming"])
def test_median_left_out_rows_trip_max_left_out(kw: dict[str, object], form: str) -> None:
    """A median's rows left out by the budget are counted as a sum's, and trip max_left_out.

    Before, a median recorded no ``rows_left_out_by_budget`` and its
    ``rows_in_released_cells`` counted the values after the filter, so `left_out_by_table`
    found no share and ``max_left_out`` never refused, whatever the filter left out.
    Brute force: a unit with a row in a released cell is left out of the median exactly when
    it has no positive median loss in the per-record report (which lists no unit whose every
    loss is 0).
    """
    from types import SimpleNamespace as NS

    from tabdp.release._outputs import LeftOutError, check_left_out, left_out_by_table

    df = _median_data()
    s = tabdp.Session(seed=1, budget=1.0, **kw)  # type: ignore[arg-type]
    _median_workload(df.to_pandas() if form == "pandas" else df, s)
    q = s.report().confidential_summary()["queries"][1]
    pr = s.report().per_record
    pr = pl.from_pandas(pr) if not isinstance(pr, pl.DataFrame) else pr
    inside = df.filter(pl.col("c") != "z")
    if "unit" in kw:
        kept = pr.filter(pl.col("rho_m") > 0.0)["u"]
        left = inside.filter(~pl.col("u").is_in(kept.implode()))
        n_units = left["u"].n_unique()
    else:
        kept = pr.filter(pl.col("rho_m") > 0.0)["row"]
        left = df.with_row_index("row").filter(pl.col("c") != "z",
                                               ~pl.col("row").is_in(kept.implode()))
        n_units = left.height
    rows_left = left.height
    assert 0 < rows_left < inside.height / 2
    # the same counters as the sum's of the same rows (before the filter)
    assert q["rows_in_released_cells"] == inside.height == \
        s.report().confidential_summary()["queries"][0]["rows_in_released_cells"]
    assert q["units_left_out_by_budget"] == n_units
    assert q["rows_left_out_by_budget"] == rows_left
    lo = left_out_by_table(s)["m"]
    share = rows_left / inside.height
    assert lo["rows"] == rows_left and lo["rows_share"] == lo["max_share"] == share
    # budget.max_left_out (and ledger.max_left_out) refuse a curator run above the share
    spec = NS(budget=NS(max_left_out=share / 2), ledger=None, input=NS(mode="curator"))
    with pytest.raises(LeftOutError) as err:
        check_left_out(spec, {"m": lo})
    assert err.value.confidential["tables_over_limit"] == {"m": share}
    spec = NS(budget=None, ledger=NS(max_left_out=share / 2), input=NS(mode="curator"))
    with pytest.raises(LeftOutError):
        check_left_out(spec, {"m": lo})
    check_left_out(NS(budget=NS(max_left_out=share * 1.01), ledger=None,
                      input=NS(mode="curator")), {"m": lo})
    # author mode: nothing depends on it (a spec setting it is refused when validated)
    check_left_out(NS(budget=NS(max_left_out=share / 2), ledger=None,
                      input=NS(mode="author")), {"m": lo})
