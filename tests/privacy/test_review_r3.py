"""Review R3 (2026-11-26): attacks on streaming sessions, the streaming runner and policies as
engine expressions.

Each test states a claim and tries to break it. Tests marked ``xfail(strict=True)`` are attacks
that still succeed (the fix is described in the reason); the others are fixed regressions.
"""

from __future__ import annotations

import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import ColumnTypeError

# Two distinct public Int64 keys that are one Float64 (2**53 + 1 rounds to 2**53).
KEYS_53 = tabdp.KeySet.from_dict(k=[2**53, 2**53 + 1])
KEYS_1 = tabdp.KeySet.from_dict(k=[1.0])


def _frame(first_key: float) -> pl.DataFrame:
    return pl.DataFrame({"k": [first_key, 1.0], "x": [1.0, 2.0]})


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("mode", ["curator", "author"])
def test_key_set_colliding_after_conversion_is_refused_without_data(streaming: bool,
                                                                    mode: str) -> None:
    """A key set whose distinct keys collide in the comparison dtype cannot place a row twice.

    Float data against Int64 keys is compared in Float64, where 2**53 and 2**53 + 1 are one
    value: the left join with the key set doubled every row whose key is 2**53. Without the fix
    the in-memory ledger charged such a row once (0.5) while it was counted in two cells (true
    loss 1.0: an under-report, a budget of 0.6 admitted it), and the streaming session counted
    the row twice in its rows read, so the *next* release was refused exactly when some record
    had key 2**53 (a noiseless membership oracle in author mode). The key set alone decides now:
    it is refused, on every dataset, before any data is read.
    """
    for first in (2.0**53, 5.0):  # neighbouring datasets: with and without the probed key
        df = _frame(first)
        kw = {"data": df} if mode == "author" else {}
        s = tabdp.Session(seed=1, streaming=streaming, mode=mode, **kw)
        with pytest.raises(ColumnTypeError, match="two keys") as err:
            df.dp.count(by="k", keys=KEYS_53, mechanism=mech.Gaussian(1.0),
                        session=s)
        assert "9007199254740992" not in str(err.value)
        assert s.records == []
        # the session stays usable, and the next release does not depend on the probed key
        out = df.dp.count(by="k", keys=KEYS_1, mechanism=mech.Gaussian(1.0), session=s)
        assert out.columns[0] == "k" and out.height == 1
