"""Publication rules: cv, flags C/N/S/X, clamping, suppression, public rounding, schema."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tabdp.release.publish import FLAG_CODES, empty_public_table, publish
from tabdp.release.spec import Publication

WIDE = pl.DataFrame({
    "c": ["a", "b", "c", "d", "e"],
    "x": [100.0, 10.0, -4.0, 0.0, 2.0],
    "x_sd": [5.0, 5.0, 5.0, 5.0, math.inf],
    "x_moe": [8.0, 8.0, 8.0, 8.0, 30.0],
})


def flags(rules: Publication, **kw) -> list[str]:
    return publish(WIDE, keys=["c"], measures=["x"], rules=rules, **kw)["flag"].to_list()


def test_schema_and_cv() -> None:
    out = publish(WIDE, keys=["c"], measures=["x"], rules=Publication(cv_flag=0.3))
    # lower/upper added on purpose (issue 16); without m_lower/m_upper: estimate -+ moe
    assert out.columns == ["c", "measure", "estimate", "sd", "moe", "lower", "upper", "cv",
                           "flag"]
    assert out.schema == {"c": pl.String, "measure": pl.String, "estimate": pl.Float64,
                          "sd": pl.Float64, "moe": pl.Float64, "lower": pl.Float64,
                          "upper": pl.Float64, "cv": pl.Float64, "flag": pl.String}
    assert out["lower"].to_list() == [92.0, 2.0, -12.0, -8.0, -28.0]
    assert out["upper"].to_list() == [108.0, 18.0, 4.0, 8.0, 32.0]
    cv = out["cv"].to_list()
    assert cv[:3] == [0.05, 0.5, 1.25]
    assert cv[3] == math.inf                 # estimate 0, sd > 0
    assert cv[4] is None                     # infinite sd: cv undefined
    assert out["flag"].to_list() == ["", "C", "CN", "C", "X"]
    assert set("".join(out["flag"].to_list())) <= set(FLAG_CODES)


def test_thresholds_and_off() -> None:
    assert flags(Publication(cv_flag=None)) == ["", "", "N", "", "X"]
    assert flags(Publication(cv_flag=1.0)) == ["", "", "CN", "C", "X"]


def test_suppression_withholds_values() -> None:
    out = publish(WIDE, keys=["c"], measures=["x"],
                  rules=Publication(cv_flag=0.3, suppress_cv=1.0))
    # changed on purpose (review r36 F8b): a withheld cell is flagged S alone (was CNS, CS)
    assert out["flag"].to_list() == ["", "C", "S", "S", "X"]
    for col in ("estimate", "sd", "moe", "lower", "upper", "cv"):
        assert out[col][2] is None and out[col][3] is None
    assert out["estimate"][0] == 100.0


@pytest.mark.parametrize("negative", ["flag", "clamp"])
@pytest.mark.parametrize("cv_flag", [0.3, 2.0, None])
def test_a_withheld_cell_reveals_nothing_of_its_value(negative: str, cv_flag: float | None
                                                      ) -> None:
    # review r36 F8b: N told the sign of a withheld estimate, and C (with cv_flag above
    # suppress_cv) told that its cv passed cv_flag too; withheld cells of +4 and -4, of 0.5
    # and -3 (cv 1.25, 10 and 1.67 all >= suppress_cv) must look the same
    w = pl.DataFrame({"c": ["p", "n", "s", "t"], "x": [4.0, -4.0, 0.5, -3.0],
                      "x_sd": [5.0] * 4, "x_moe": [8.0] * 4})
    out = publish(w, keys=["c"], measures=["x"],
                  rules=Publication(cv_flag=cv_flag, suppress_cv=1.0, negative=negative))
    assert out["flag"].to_list() == ["S"] * 4
    assert out.drop("c").unique().height == 1


def test_clamp_publishes_zero_and_flags() -> None:
    out = publish(WIDE, keys=["c"], measures=["x"],
                  rules=Publication(cv_flag=0.3, negative="clamp"))
    assert out["estimate"].to_list()[:4] == [100.0, 10.0, 0.0, 0.0]
    assert out["flag"].to_list()[2] == "CN"
    assert out["cv"][2] == math.inf
    # interval ends raised to 0 where negative (the truth is >= 0: coverage kept)
    assert out["lower"].to_list() == [92.0, 2.0, 0.0, 0.0, 0.0]
    assert out["upper"].to_list() == [108.0, 18.0, 4.0, 8.0, 32.0]


def test_exact_interval_passed_through_and_rounded_outward() -> None:
    """m_lower/m_upper (asymmetric, from a transformation mechanism) are published as given.

    A rounding unit moves lower down and upper up, so the interval only grows.
    """
    w = pl.DataFrame({"c": ["a", "b"], "x": [1234.0, 55.0], "x_sd": [100.0, 30.0],
                      "x_moe": [150.0, 40.0], "x_lower": [1100.0, 21.0],
                      "x_upper": [1400.0, 101.0]})
    out = publish(w, keys=["c"], measures=["x"], rules=Publication(cv_flag=0.3))
    assert out["lower"].to_list() == [1100.0, 21.0]
    assert out["upper"].to_list() == [1400.0, 101.0]
    out = publish(w, keys=["c"], measures=["x"], rules=Publication(cv_flag=0.3, round=10.0))
    assert out["estimate"].to_list() == [1230.0, 60.0]
    assert out["lower"].to_list() == [1100.0, 20.0]
    assert out["upper"].to_list() == [1400.0, 110.0]


def test_public_rounding_after_flags() -> None:
    w = WIDE.with_columns(pl.Series("x", [1234.0, 10.4, -0.4, 0.0, 2.0]))
    out = publish(w, keys=["c"], measures=["x"], rules=Publication(cv_flag=0.3, round=10.0))
    est = out["estimate"].to_numpy()
    assert est.tolist() == [1230.0, 10.0, 0.0, 0.0, 0.0]
    assert not np.signbit(est).any()          # no "-0.0" in the published values
    # changed on purpose (issue 28): C where the released or the published estimate's cv
    # reaches the threshold (10.4: cv 0.48 -> C; -0.4 -> N and, published as 0, C); R where
    # the unit (10) moved the estimate and is more than 0.1 x moe (8.0)
    assert out["flag"].to_list() == ["R", "CR", "CNR", "C", "XR"]
    # cv is the published estimate's: 5 / 1230, 5 / 10, inf for a published 0
    assert out["cv"].to_list()[:3] == [5.0 / 1230.0, 0.5, math.inf]
    per = publish(w.with_columns(y=w["x"], y_sd=w["x_sd"], y_moe=w["x_moe"]), keys=["c"],
                  measures=["x", "y"], rules=Publication(round={"y": 100.0}))
    assert per.filter(pl.col("measure") == "x")["estimate"][0] == 1234.0
    assert per.filter(pl.col("measure") == "y")["estimate"][0] == 1200.0


def test_grid_rerounding_and_long_order() -> None:
    w = pl.DataFrame({"c": ["a"], "x": [0.1 + 0.2], "x_sd": [1.0], "x_moe": [1.6],
                      "y": [3.0], "y_sd": [1.0], "y_moe": [1.6]})
    out = publish(w, keys=["c"], measures=["y", "x"], rules=Publication(), grid={"x": 0.1})
    assert out["measure"].to_list() == ["y", "x"]
    # the grid's own representation of its multiples, fl(k * step), as the releases use
    assert out["estimate"][1] == 3 * 0.1


def test_national_and_empty() -> None:
    nat = publish(pl.DataFrame({"x": [5.0], "x_sd": [1.0], "x_moe": [1.6]}), keys=[],
                  measures=["x"], rules=Publication())
    assert nat.columns == ["measure", "estimate", "sd", "moe", "lower", "upper", "cv", "flag"]
    assert nat.height == 1
    empty = publish(WIDE.head(0), keys=["c"], measures=["x"], rules=Publication())
    assert empty.height == 0
    assert empty.schema == empty_public_table({"c": pl.String}).schema


# origin: issue 28
def test_publish_rounding_rule() -> None:
    w = pl.DataFrame({"c": ["a", "b", "c", "d"], "x": [110.0, 1234.0, 600.0, 9.6],
                      "x_sd": [2.0, 500.0, 2.0, 3.0], "x_moe": [3.3, 822.0, 3.3, 4.9]})
    out = publish(w, keys=["c"], measures=["x"], rules=Publication(cv_flag=0.3, round=1000.0))
    assert out["estimate"].to_list() == [0.0, 1000.0, 1000.0, 0.0]
    assert out["lower"].to_list() == [0.0, 0.0, 0.0, 0.0]
    assert out["upper"].to_list() == [1000.0, 3000.0, 1000.0, 1000.0]
    assert out["sd"].to_list() == [2.0, 500.0, 2.0, 3.0]         # never rounded
    assert out["cv"].to_list() == [math.inf, 0.5, 0.002, math.inf]  # of the published value
    # C: the published 0 (or the released value) is unreliable; R: the unit moved the estimate
    # and is > 0.1 x moe (1000 > 82.2 for b as well)
    assert out["flag"].to_list() == ["CR", "CR", "R", "CR"]
    assert set("".join(out["flag"].to_list())) <= set(FLAG_CODES)
    # rounding never removes a C flag: 9.6 has cv 0.3125 >= 0.3, its rounded 10 only 0.3
    out = publish(w.slice(3), keys=["c"], measures=["x"],
                  rules=Publication(cv_flag=0.3, round=1.0))
    assert out["estimate"][0] == 10.0 and out["cv"][0] == pytest.approx(0.3)
    assert out["flag"][0] == "CR"  # the unit 1 is > 0.1 x 4.9 and moved 9.6: R too
    # a unit <= 0.1 x moe: no R
    out = publish(w.slice(1, 1), keys=["c"], measures=["x"],
                  rules=Publication(cv_flag=0.3, round=10.0))
    assert out["estimate"][0] == 1230.0 and out["flag"][0] == "C"


def test_usability_states_the_withheld_share_and_leaves_withheld_cells_out_of_n() -> None:
    # review r36 F8a/b: the words never stated the withheld share, and withheld cells counted
    # as negative (and flagged) from their hidden estimates
    from tabdp.planning import published_usability
    from tabdp.release.runner import publishable_in_words

    w = pl.DataFrame({"c": list("abcdef"), "x": [100.0, 10.0, -4.0, 0.5, -20.0, 0.0],
                      "x_sd": [5.0] * 6, "x_moe": [8.0] * 6})
    out = publish(w, keys=["c"], measures=["x"],
                  rules=Publication(cv_flag=0.3, suppress_cv=1.0))
    u = published_usability(out)["x"]
    assert u["withheld_share"] == pytest.approx(3 / 6)      # -4, 0.5 and 0 are withheld
    assert u["flagged_share"] == pytest.approx(1 / 6)       # 10 only (cv 0.5)
    assert u["negative_share"] == pytest.approx(1 / 6)      # -20 only (cv 0.25: published)
    assert u["publishable_share"] == pytest.approx(2 / 6)
    # a table written before withheld cells lost C and N is counted the same way
    old = pl.DataFrame({"measure": ["x"] * 4, "flag": ["", "CNS", "CS", "CN"]})
    uo = published_usability(old)["x"]
    assert (uo["flagged_share"], uo["withheld_share"], uo["negative_share"]) == (0.25, 0.5, 0.25)
    words = publishable_in_words({"t": {"x": u}})[0]
    assert "50% withheld (S)" in words and "17% negative (N)" in words


# origin: review r37 (a release's Int64 estimate clamped by the accessor was published with
# no L flag: the release workflow recomputes the flags from the estimate column)
def test_a_release_of_an_integer_measure_flags_estimates_clamped_at_the_int64_limit(
        tmp_path) -> None:  # noqa: ANN001
    import io
    import json

    from _specs import one_table_spec

    from tabdp import cli
    from tabdp.frame._output import _INT64_MAX
    pl.DataFrame({"c": ["a", "b"] * 10, "x": list(range(20))}).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.toml").write_text(one_table_spec(
        '{ family = "gaussian", sigma = 1e20 }', name="bigint", seed=7, table_extra="grid = 1.0"))
    code = cli.main(["run", str(tmp_path / "s.toml"), "--test-seed"], stdout=io.StringIO(),
                    stderr=io.StringIO())
    assert code == 0
    t = pl.read_parquet(tmp_path / "out" / "public" / "t.parquet")
    at = t["estimate"].cast(pl.Float64).abs() >= _INT64_MAX
    assert at.any()  # sigma 1e20: the noise passes the Int64 range at this seed
    for lim, flag in zip(at.to_list(), t["flag"].to_list(), strict=True):
        assert ("L" in flag) == lim
    summary = json.loads((tmp_path / "out" / "public" / "summary.json").read_text())
    assert "L" in summary["flag_codes"]


def test_estimate_doc_grid_claim_is_for_continuous_noise() -> None:
    """Review r72: the estimate doc's grid claim excepts discrete noise on its default grid.

    A count table's grid is 1 with sd 2, so "a table's grid is at most a tenth of its noise's
    sd" was false there; its values are exact integers (no rounding), and the doc says so.
    """
    from tabdp.release.publish import COLUMN_DOCS

    assert ("discrete noise on its default grid of 1 gives exact integers, not rounded"
            in COLUMN_DOCS["estimate"])


def test_estimate_and_moe_docs_say_what_a_consistent_table_publishes() -> None:
    """Review r84: the column docs described only a directly released cell.

    A consistent table's estimate is the GLS combination rounded without bias (a finest
    cell moves by up to one step, not half), and its moe, for non-Gaussian noise, is not the
    central interval of the error as the moe doc said of every additive mechanism: it was z x
    sd (Laplace's finest cells covered about 0.94 at a stated 0.95), and is now certified to
    cover at least the level in every cell.
    """
    from tabdp.release.publish import COLUMN_DOCS

    assert "generalized least squares" in COLUMN_DOCS["estimate"]
    assert "in a consistent table" in COLUMN_DOCS["moe"]
    assert "certified to cover at least the level in every cell" in COLUMN_DOCS["moe"]
