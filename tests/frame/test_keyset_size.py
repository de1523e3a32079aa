"""A cross product too large to index is refused (numpy's int64 product wrapped silently)."""

from __future__ import annotations

import pytest

import tabdp
from tabdp.exceptions import InvalidParameterError


@pytest.mark.parametrize("columns", [63, 64, 65])
def test_a_cross_product_past_int64_is_refused_not_emptied(columns):
    # 2**64 cells: numpy's product was 0, an empty key set whose domains still spanned 2**64
    # cells (row cell indices wrapped around Int64); 2**63: a ValueError from numpy
    domains = {f"c{i}": ["a", "b"] for i in range(columns)}
    with pytest.raises(InvalidParameterError, match="too large"):
        tabdp.KeySet.from_dict(**domains)


def test_a_key_set_below_the_limit_keeps_its_size():
    ks = tabdp.KeySet.from_dict(a=["x", "y", "z"], b=["1", "2"])
    assert len(ks) == 6 and [len(d) for d in ks.domains] == [3, 2]
