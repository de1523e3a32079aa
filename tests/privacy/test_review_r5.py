"""Review R5 (2026-11-26): attacks on the Spark row-mode replay ledger (``SparkReplayLedger``).

Each test states a claim and tries to break it. The fixed regressions fail without their fix.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

import tabdp
from tabdp import mechanisms as mech

KEY_AB = tabdp.KeySet.from_dict(c=["a", "b"])


# -- row fingerprints: a decimal column rescaled between releases ------------------------------
@pytest.mark.spark
def test_a_rescaled_decimal_column_is_refused(spark: Any) -> None:
    """A decimal measure whose scale changed (the same unscaled digits) is another column.

    Spark's ``xxhash64`` hashes a decimal by its unscaled digits only, so ``100`` as
    ``decimal(10,0)`` and ``1.00`` as ``decimal(10,2)`` had the same row fingerprint: a
    session whose input was rewritten in other units (cents to dollars) was accepted, and the
    replay charged the earlier release at the new, 100 times smaller, values (its losses
    under-reported to the budget filter and the per-record report). The fingerprint now
    includes the decimal's scale: the release is refused before anything is drawn, and so is
    the report over the rewritten input.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rows = [("a" if i % 2 else "b", Decimal(100 * (i + 1))) for i in range(24)]
    schema = T.StructType([T.StructField("c", T.StringType()),
                           T.StructField("x", T.DecimalType(10, 0))])
    sdf = spark.createDataFrame(rows, schema)
    rescaled = sdf.select("c", (F.col("x") / 100).cast(T.DecimalType(10, 2)).alias("x"))
    assert rescaled.collect()[0]["x"] == Decimal("1.00")
    s = tabdp.Session(seed=3, budget=1.0)
    sdf.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    state = s.rng._gen.bit_generator.state  # type: ignore[union-attr]
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        rescaled.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    assert s.rng._gen.bit_generator.state == state  # type: ignore[union-attr]
    assert len(s.records) == 1
    # the report of a session whose last input is the original frame is produced; the
    # replay over the rewritten input is refused
    assert s.report().per_record.count() == 24
    s.ledger.release()
    s.ledger.source = rescaled
    with pytest.raises(tabdp.InvalidParameterError, match="report was not produced"):
        _ = s.report().per_record


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "streaming"])
def test_a_rescaled_decimal_column_is_refused_on_polars(lazy: bool) -> None:
    """The same collision in the Polars engine's fingerprint, refused on both ledgers.

    A Decimal's physical value is its unscaled integer: the streaming session replayed the
    first release at the rescaled values.
    """
    import polars as pl

    a = pl.DataFrame({"c": ["a" if i % 2 else "b" for i in range(24)],
                      "x": pl.Series([Decimal(100 * (i + 1)) for i in range(24)],
                                     dtype=pl.Decimal(10, 0))})
    b = a.with_columns(pl.col("x").cast(pl.Float64).truediv(100).cast(pl.Decimal(10, 2)))
    assert b["x"][0] == Decimal("1.00")

    def frame(d: pl.DataFrame) -> Any:
        return d.lazy() if lazy else d

    s = tabdp.Session(seed=3, budget=1.0)
    frame(a).dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        frame(b).dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2000.0), session=s)
    assert len(s.records) == 1
    # the same frame is still accepted
    frame(a).dp.count(by="c", keys=KEY_AB, session=s)
    assert len(s.records) == 2


def test_a_datetime_key_in_another_time_unit_is_refused() -> None:
    """A Datetime key rewritten with the same integers in another time unit is a changed column.

    The rows move to other instants (here out of the key set's cells), so a streaming replay
    would charge the first release nothing; the fingerprint hashed only the physical integer.
    """
    import datetime as dt

    import polars as pl

    t0 = dt.datetime(2024, 1, 1)
    keys = tabdp.KeySet.from_dict(t=pl.Series([t0], dtype=pl.Datetime("ms")))
    a = pl.DataFrame({"t": pl.Series([t0] * 20, dtype=pl.Datetime("ms"))})
    b = a.with_columns(pl.col("t").cast(pl.Int64).cast(pl.Datetime("us")))
    assert b["t"][0] != t0
    s = tabdp.Session(seed=3, budget=1.0)
    lazy_a: Any = a.lazy()
    lazy_b: Any = b.lazy()
    lazy_a.dp.count(by="t", keys=keys, session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="not the rows"):
        lazy_b.dp.count(by="t", keys=keys, session=s)


@pytest.mark.spark
def test_spark_fingerprints_tell_types_with_the_same_integers_apart(spark: Any) -> None:
    """Types Spark's ``xxhash64`` hashes alike get other row fingerprints.

    ``xxhash64`` hashes an ``int`` and a ``date``, a ``timestamp`` and a ``timestamp_ntz`` by
    the same integer; the row fingerprint hashes their type too (and a decimal's scale).
    """
    from pyspark.sql import functions as F

    from tabdp.frame._spark import _fingerprint

    base = spark.range(1).select(F.lit(19000).cast("int").alias("i"),
                                 F.lit(1_700_000_000_000_000).cast("long").alias("l"),
                                 F.lit(100).cast("decimal(10,0)").alias("d0"))
    sdf = base.select("*", F.expr("date_from_unix_date(i)").alias("date"),
                      F.expr("timestamp_micros(l)").alias("ts"),
                      F.expr("cast(timestamp_micros(l) as timestamp_ntz)").alias("ntz"),
                      F.expr("cast(d0 / 100 as decimal(10,2))").alias("d2"))
    assert sdf.select(F.xxhash64("i").alias("a"), F.xxhash64("date").alias("b")).first() \
        .asDict() == sdf.select(F.xxhash64("i").alias("a"), F.xxhash64("i").alias("b")) \
        .first().asDict()  # Spark's own hash: alike
    types = {f.name: f.dataType for f in sdf.schema.fields}
    row = sdf.select(*[_fingerprint(F.lit(0), c, types[c]).alias(c) for c in types]).first()
    assert row["i"] != row["date"]
    assert row["ts"] != row["ntz"]
    assert row["d0"] != row["d2"]
