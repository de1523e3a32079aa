"""Time zones of key sets and timestamp columns: refused when only one side has a zone."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import tabdp
from tabdp.exceptions import ColumnTypeError
from tabdp.mechanisms import Gaussian

MIDNIGHT = dt.datetime(2024, 1, 1)


def _zoned(zone: str) -> pl.DataFrame:
    """One row at local midnight of ``zone`` (a wall time in that zone)."""
    return pl.DataFrame({"t": [MIDNIGHT], "x": [100.0]}).with_columns(
        pl.col("t").dt.replace_time_zone(zone))


# -- 1. a key set without a time zone against timestamps of a zone ---------------------------
# Before: the key set's naive datetimes (or dates) were taken as UTC wall times, so against
# New York timestamps every row fell outside the key set (silently: the cells were published
# empty) and the key labels came back shifted (2023-12-31 19:00 EST for the key 2024-01-01).
@pytest.mark.parametrize("keys", [[MIDNIGHT], [MIDNIGHT.date()]], ids=["datetime", "date"])
@pytest.mark.parametrize("frame", ["polars", "lazy", "pandas"])
def test_naive_keys_against_zoned_timestamps_are_refused(keys: list, frame: str) -> None:
    df: object = _zoned("America/New_York")
    if frame == "lazy":
        df = pl.LazyFrame(df)
    elif frame == "pandas":
        df = df.to_pandas()  # type: ignore[attr-defined]
    with pytest.raises(ColumnTypeError, match="time zone"):
        tabdp.dp(df).sum("x", by="t", keys=tabdp.KeySet.from_dict(t=keys),
                         mechanism=Gaussian(1.0), session=tabdp.Session(seed=1))


def test_zoned_keys_against_naive_timestamps_are_refused() -> None:
    df = pl.DataFrame({"t": [MIDNIGHT], "x": [1.0]})
    zoned = pl.Series([MIDNIGHT]).dt.replace_time_zone("Asia/Tokyo")
    with pytest.raises(ColumnTypeError, match="time zone"):
        df.dp.count(by="t", keys=tabdp.KeySet.from_dict(t=zoned), session=tabdp.Session(seed=1))


def test_keys_and_timestamps_of_one_zone_or_utc_still_match() -> None:
    """Zoned on both sides (instants), and UTC against no zone (the UTC convention), match."""
    ny = _zoned("America/New_York")
    keys = tabdp.KeySet.from_dict(t=ny["t"].dt.convert_time_zone("Europe/Paris"))
    out = ny.dp.sum("x", by="t", keys=keys, mechanism=Gaussian(0.01), session=tabdp.Session(seed=1))
    assert out["x"][0] == pytest.approx(100.0, abs=0.2)
    assert out["t"].to_list() == ny["t"].to_list()
    utc = _zoned("UTC")
    out = utc.dp.sum("x", by="t", keys=tabdp.KeySet.from_dict(t=[MIDNIGHT]),
                     mechanism=Gaussian(0.01), session=tabdp.Session(seed=1))
    assert out["x"][0] == pytest.approx(100.0, abs=0.2)


@pytest.mark.parametrize("zone", ["Etc/UTC", "+00:00", "Etc/GMT", "Zulu"])
def test_utc_under_another_name_matches_naive_keys_as_utc_does(zone: str) -> None:
    # review r88: only the name "UTC" kept the UTC convention; its aliases were refused,
    # though their wall time is UTC's
    df = _zoned(zone)
    out = df.dp.sum("x", by="t", keys=tabdp.KeySet.from_dict(t=[MIDNIGHT]),
                    mechanism=Gaussian(0.01), session=tabdp.Session(seed=1))
    assert abs(out["x"][0] - 100.0) < 1.0
