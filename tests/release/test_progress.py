"""The progress bar of ``tabdp run`` follows the expected work, not the step count.

``run_release`` reports ``(step, steps, what)`` with every table's pass over the input in step 1;
the bar (``tabdp.cli._WorkShare``) weighs each pass by its share of the work, so the bar moves
through the reading and aggregation of the tables instead of sitting at step 1 of n.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from _specs import hierarchies, release_spec, table

from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.release.runner import run_release
from tabdp.release.spec import load_spec

SPEC = release_spec(
    table("pay", ["county", "naics2"], '{ family = "gaussian", sigma = 1e5 }',
          measures=["payroll"],
          extra='[[tables.rollups]]\nby = ["state", "naics2"]\n[[tables.rollups]]\nby = []'),
    table("estabs", ["state", "naics6"], '{ family = "gaussian", sigma = 2.0 }', kind="count",
          extra='[[tables.rollups]]\nby = ["naics2"]\ndirect = true'),
    name="progress", seed=3, sections=hierarchies())


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("progress")
    generate_establishments(2000, seed=5).write_parquet(folder / "d.parquet")
    path = folder / "release.toml"
    path.write_text(SPEC, encoding="utf-8")
    return path


def _calls(spec_path: Path) -> list[tuple[int, int, str]]:
    calls: list[tuple[int, int, str]] = []
    run_release(load_spec(spec_path), overwrite=True, test_seed=True,
                progress=lambda i, n, what: calls.append((i, n, what)))
    return calls


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-6 s)
def test_share_is_monotone_and_weighted_by_passes_over_the_input(spec_path: Path) -> None:
    calls = _calls(spec_path)
    n = calls[0][1]
    assert n == 5 and calls[0][:2] == (1, 5) and calls[0][2].startswith("releasing 3 tables")
    share = cli._WorkShare()
    shares = [share(*c) for c in calls]
    assert shares == sorted(shares) and shares[0] == 0.0 and shares[-1] < 1.0
    w = cli._WorkShare
    total = 3 * w.RELEASE + 3 * w.ROLLUP + w.PUBLIC + w.PER_RECORD
    # each table's reading starts where the previous table's pass ended: equal shares
    reading = [s for (i, _, what), s in zip(calls, shares, strict=True)
               if i == 1 and what.endswith(("reading and aggregating the input",
                                            "reading and aggregating the input (streaming)"))]
    assert reading == pytest.approx([0.0, 1 / total, 2 / total])
    noise = [s for (i, _, what), s in zip(calls, shares, strict=True)
             if i == 1 and ": drawing noise" in what]
    assert noise == pytest.approx([(j + w.READ) / total for j in range(3)])
    # after step 1 the bar stands at the passes' share (63% here), not at 1/5 of the steps
    first_rollup = next(s for (i, _, _), s in zip(calls, shares, strict=True) if i == 2)
    assert first_rollup == pytest.approx(3 / total) and first_rollup > 0.6
    last = [s for (i, _, what), s in zip(calls, shares, strict=True)
            if what.endswith("confidential/per_record_losses.parquet")]
    assert last == pytest.approx([(3 * w.RELEASE + 3 * w.ROLLUP + w.PUBLIC) / total])


def test_unknown_messages_fall_back_to_equal_steps() -> None:
    share = cli._WorkShare()
    assert [share(i, 4, f"step {i}") for i in (1, 2, 2, 3, 4)] == [0.0, 0.25, 0.25, 0.5, 0.75]
    share = cli._WorkShare()     # never backwards, whatever the messages
    assert share(3, 4, "x") == 0.5 and share(1, 4, "releasing 2 tables") == 0.5


@pytest.mark.slow  # a whole CLI run (2.7 s), in CI
def test_cli_bar_lines_show_the_weighted_share(spec_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", str(spec_path), "--overwrite", "--test-seed"], stdout=out,
                    stderr=err)
    assert code == 0, err.getvalue()
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("[")]
    pct = [int(m.group(1)) for ln in lines if (m := re.match(r"\[[#.]{24}\] +(\d+)% ", ln))]
    assert len(pct) == len(lines) > 5 and pct == sorted(pct)
    assert any(p >= 60 for p, ln in zip(pct, lines, strict=True) if " 2/5 rolling" in ln)
