"""A release says "grid coarsened" from the rollup's own computation, never from warnings.

The public ``moe_method`` text of a rollup (summary.json) gains "the FFT grid had to be
coarsened" when the numerical law of sums needs a lattice step above 0.2 of the noise's core
spread. It was decided from any RuntimeWarning that a ``warnings.catch_warnings(record=True)``
recorded around the rollup: that record is process-wide, so a warning raised by another thread
at that moment changed a public file, and a memo hit (no recomputation, no warning) lost the
statement on a second release in the same process. It is now returned by ``_rollup``.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from _specs import hierarchies, release_spec, table, write_release

from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.mechanisms import ExpPolyLog
from tabdp.release import rollup, sum_error_law

ROLLUP = sys.modules["tabdp.release.rollup"]  # the module (tabdp.release.rollup is rollup())
COARSENED = "the FFT grid had to be coarsened"
MECH = '{ family = "exp_polylog", sigma = 1.0, a = 1.0, d = 4.0, p = 1.0 }'


@pytest.fixture
def fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty memo of margins (other tests' entries would serve these counts)."""
    monkeypatch.setattr(ROLLUP, "_MEMO", type(ROLLUP._MEMO)())


def _release(folder: Path) -> Path:
    spec = release_spec(
        hierarchies(),
        table("pay", ["county"], MECH, measures=["payroll"],
              extra='grid = 0.1\n[[tables.rollups]]\nby = ["state"]'),
        seed=3)
    return write_release(folder, generate_establishments(300, seed=4), spec)


def run_quiet(spec: Path) -> None:
    """``tabdp run --test-seed --quiet --overwrite spec``; asserts it exits 0."""
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", "--test-seed", "--quiet", "--overwrite", str(spec)], stdout=out,
                    stderr=err)
    assert code == 0, err.getvalue()


def _methods(spec: Path) -> dict[str, str]:
    summary = json.loads((spec.parent / "out" / "public" / "summary.json").read_text())
    (t,) = [t for t in summary["tables"] if t["name"] == "pay"]
    (r,) = t["rollups"]
    return dict(r["moe_method"])


def _warning_from_another_thread(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``orig``, after another thread has issued a RuntimeWarning (while the rollup runs)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        def other() -> None:
            warnings.warn("another thread's numerical notice", RuntimeWarning, stacklevel=1)

        th = threading.Thread(target=other)
        th.start()
        th.join()
        return orig(*args, **kwargs)

    return wrapped


def test_another_threads_runtime_warning_does_not_change_the_public_method(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_memo: None) -> None:
    spec = _release(tmp_path / "quiet")
    run_quiet(spec)
    quiet = _methods(spec)
    assert quiet["payroll"].startswith("numerical") and COARSENED not in quiet["payroll"]
    # the same release while another thread warns during the rollup (after the memo is filled
    # and before: both paths)
    for memo in ("filled", "empty"):
        if memo == "empty":
            monkeypatch.setattr(ROLLUP, "_MEMO", type(ROLLUP._MEMO)())
        monkeypatch.setattr(ROLLUP, "_exact_sums", _warning_from_another_thread(
            ROLLUP._exact_sums))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            run_quiet(spec)
        assert _methods(spec) == quiet, memo
        monkeypatch.undo()


def test_a_truly_coarsened_grid_is_stated_in_every_release_of_the_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_memo: None) -> None:
    # an FFT cap this small forces a coarse lattice at the example's cell counts
    monkeypatch.setattr(ROLLUP, "_N_CAP", 256)
    spec = _release(tmp_path / "coarse")
    for run in (1, 2):  # the second release's margins come from the memo: still stated
        run_quiet(spec)
        methods = _methods(spec)
        assert methods["payroll"].startswith("numerical"), run
        assert methods["payroll"].endswith(COARSENED + ", so the stated accuracy is not "
                                           "guaranteed"), run


def test_rollup_and_sum_error_law_still_warn_of_a_coarsened_grid(
        monkeypatch: pytest.MonkeyPatch, fresh_memo: None) -> None:
    monkeypatch.setattr(ROLLUP, "_N_CAP", 256)
    mech = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
    sd = float(mech.noise.std())
    t = pl.DataFrame({"c": [str(i) for i in range(40)], "x": np.ones(40),
                      "x_sd": np.full(40, sd)})
    for _ in range(2):  # computed, then served by the memo: the same warning
        with pytest.warns(RuntimeWarning, match="lattice step"):
            out, _ = rollup(t, by=["c"], measures=["x"], target_by=[], maps={},
                            mechanisms={"x": mech})
        with pytest.warns(RuntimeWarning, match="lattice step"):
            sum_error_law(mech, [40])
    assert out["cells"].to_list() == [40]
    frame, methods, coarse = ROLLUP._rollup(t, by=["c"], measures=["x"], target_by=[],
                                            maps={}, mechanisms={"x": mech})
    assert coarse == frozenset({"x"}) and frame.equals(out)


def test_rollup_without_coarsening_returns_no_measure(fresh_memo: None) -> None:
    mech = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
    sd = float(mech.noise.std())
    t = pl.DataFrame({"c": [str(i) for i in range(40)], "x": np.ones(40),
                      "x_sd": np.full(40, sd)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, _, coarse = ROLLUP._rollup(t, by=["c"], measures=["x"], target_by=[], maps={},
                                      mechanisms={"x": mech}, warn=True)
    assert coarse == frozenset()
