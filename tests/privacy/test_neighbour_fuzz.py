"""A seeded neighbour fuzzer over the entry points (docs/privacy-semantics.md, threat model).

Each case: a random small dataset (50–300 records; row mode, one id per row, or firms of
several rows; integer or text unit ids), a random single-unit edit (add, remove or change one
unit) with an adversarial value (NaN, ±inf, −0.0, Int64 bounds, huge and subnormal floats,
negatives, nulls, empty / whitespace / NFD / case-twin / outside keys, duplicate ids, a unit
of many rows, a unit whose values overflow a sum, text ids that are twins of another's), and
one to three random releases (sums, counts, medians, quantiles; wide and long; budgets that
leave units out). Both neighbours run with the same seeds; everything that does not move with
the seed (exception type, message and chain, warnings, columns, dtypes, row counts, keys,
the public summary, exit codes, stdout, stderr, public file names, modes and contents) must
be the same (`_neighbour_fuzz.differences`). The fast budget runs in a few seconds; the
sweep is marked ``slow``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _neighbour_fuzz as fuzz  # noqa: E402

#: Fixed seeds of the fast budget (a case per seed; the entry point is drawn from the seed).
FAST_API = range(0, 16)
FAST_ENTRIES = fuzz.API_ENTRIES + fuzz.CURATOR_ENTRIES


@pytest.mark.parametrize("seed", FAST_API)
def test_author_api_neighbours_alike(seed: int, tmp_path: Path) -> None:
    """Python API in author mode: neighbours look the same but for the noise.

    Curator sessions of Polars, lazy, pandas and a Parquet path; bare author sessions; Polars
    streaming; and curator mode (tables and public summary only).
    """
    finding = fuzz.api_case(seed, tmp_path)
    assert finding is None, str(finding)


@pytest.mark.parametrize("entry", fuzz.CURATOR_ENTRIES)
def test_curator_mode_public_outputs_alike(entry: str, tmp_path: Path) -> None:
    """Curator mode: the tables and public summary of two successful neighbours."""
    for seed in (3,):
        finding = fuzz.api_case(seed, tmp_path, entry)
        assert finding is None, str(finding)


def test_cli_author_mode_neighbours_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tabdp validate`` and ``tabdp run`` in author mode on two neighbouring servers.

    Exit codes, stdout, stderr, warnings and the public folder (names, modes, contents).
    """
    monkeypatch.chdir(tmp_path)
    del fuzz.CLI_CODES[:]
    finding = fuzz.cli_case(7, tmp_path)
    assert finding is None, str(finding)
    assert all(codes == (0, 0) for codes in fuzz.CLI_CODES), fuzz.CLI_CODES


def test_the_comparison_sees_what_an_author_sees() -> None:
    """The comparison is not vacuous.

    A message, a dtype or a warning one record changes is reported; a field the seed moves is
    not (only its presence).
    """
    same = {"error": "E: x", "t0.dtypes": ["Int64"], "warnings": []}
    assert fuzz.differences([same, same], [same, same]) == []
    for key, other in (("error", "E: y"), ("t0.dtypes", ["Float64"]), ("warnings", ["W: 3"])):
        changed = dict(same, **{key: other})
        assert [d.split(":")[0] for d in fuzz.differences([same, same], [changed, changed])] \
            == [key]
    noisy = [dict(same, **{"t0.col.x": ["1.0"]}), dict(same, **{"t0.col.x": ["2.0"]})]
    assert fuzz.differences(noisy, [dict(same, **{"t0.col.x": ["5.0"]})] * 2) == []
    # a column derived from the estimate (the moe) is compared for its nulls only
    assert fuzz.differences([dict(same, **{"t0.col.x_moe": ["1.0"]})] * 2,
                            [dict(same, **{"t0.col.x_moe": ["3.0"]})] * 2) == []
    assert fuzz.differences([dict(same, **{"t0.col.x_moe": ["1.0"]})] * 2,
                            [dict(same, **{"t0.col.x_moe": ["None"]})] * 2) != []


def test_the_cases_mostly_release(tmp_path: Path) -> None:
    """The generated cases exercise releases, not only refusals.

    A fuzzer whose every case is refused from its arguments would compare nothing.
    """
    released = 0
    for seed in range(6):
        pair = fuzz.make_pair(seed)
        rng = fuzz.np.random.default_rng([seed, 1])
        plan = fuzz.releases(rng)
        out = fuzz.observe(fuzz.api_run("polars:curator", pair.base, pair.layout, plan, 11,
                                        None, tmp_path))
        released += "error" not in out
    assert released >= 5


@pytest.mark.slow
@pytest.mark.parametrize("block", range(4))
def test_author_api_sweep(block: int, tmp_path: Path) -> None:
    """The larger sweep: 4 × 60 API cases (every entry point, drawn from the seed)."""
    found = [f for seed in range(1000 + 60 * block, 1060 + 60 * block)
             if (f := fuzz.api_case(seed, tmp_path)) is not None]
    assert not found, "\n".join(map(str, found))


@pytest.mark.slow
@pytest.mark.parametrize("entry", fuzz.CURATOR_ENTRIES)
def test_curator_mode_sweep(entry: str, tmp_path: Path) -> None:
    """The larger curator-mode sweep: 30 cases per entry point."""
    found = [f for seed in range(2000, 2030) if (f := fuzz.api_case(seed, tmp_path, entry))]
    assert not found, "\n".join(map(str, found))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["author", "curator"])
def test_cli_sweep(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tabdp run`` over 12 cases per mode (rollups, publication rules, forms, budgets)."""
    monkeypatch.chdir(tmp_path)
    found = [f for seed in range(3000, 3012) if (f := fuzz.cli_case(seed, tmp_path, mode))]
    assert not found, "\n".join(map(str, found))
