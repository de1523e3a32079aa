"""Fixtures of the release suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from tabdp.datasets.synth import generate_establishments


@pytest.fixture(scope="module")
def staging_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 synthetic establishments (seed 4) in a Parquet file (the staging suites' data)."""
    path = tmp_path_factory.mktemp("data") / "d.parquet"
    generate_establishments(600, seed=4).write_parquet(path)
    return path
