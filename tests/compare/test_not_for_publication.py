"""A comparison's DP side is marked not for publication from the start (stop 63).

``tabdp compare`` ran the DP release (``run_release``) and only afterwards wrote
``NOT_FOR_PUBLICATION.txt`` into ``dp_release/`` and ``dp_release/tables/``; the DP side's own
manifest and summary said ``"not_for_publication": false`` (unless seeded). A crash between the
release and the markers left a folder that looked like a publishable release, and even when
marked, its manifest and summary contradicted the marker. The release now marks its outputs
itself (``run_release``'s internal ``_not_for_publication``), in the staging it writes them in.

No Tau-Argus is needed: every test stops the comparison right after its DP side (the
traditional side is never reached), on a small unseeded spec (secure randomness: a seeded run
is marked anyway).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from _specs import release_spec, table, write_release

import tabdp.compare.core as core
import tabdp.release.runner as runner
from tabdp.exceptions import InvalidParameterError
from tabdp.release import DataDependentFailure
from tabdp.release.spec import load_spec

SPEC = release_spec(
    table("t", ["c"], '{ family = "gaussian", sigma = 5.0 }', measures=["x"]),
    table("n", ["c"], '{ family = "gaussian", sigma = 2.0 }', kind="count"),
    name="nfp", input_extra='unit = "u"', domains={"c": ["a", "b"]})


class _Stop(Exception):
    """Raised by a test to stop the comparison at a chosen point."""


@pytest.fixture
def spec_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    rng = np.random.default_rng(0)
    n = 60
    spec = write_release(tmp_path, pl.DataFrame({
        "u": np.arange(n, dtype=np.int64), "c": rng.choice(["a", "b"], n),
        "x": np.round(rng.uniform(0, 50, n), 2)}), SPEC)
    # the DP side needs no Tau-Argus; nothing here reaches the traditional side
    monkeypatch.setattr(core, "require_pytauargus", lambda: None)
    return spec


def _manifests(folder: Path) -> dict[Path, dict[str, Any]]:
    return {p: json.loads(p.read_text("utf-8")) for p in folder.rglob("manifest.json")}


def test_dp_side_manifest_and_summary_say_not_for_publication(
        spec_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(_spec: Any) -> Any:  # the traditional side's first step: stop there
        raise _Stop

    monkeypatch.setattr(core, "_read_input", stop)
    cmp = spec_path.parent / "cmp"
    with pytest.raises(_Stop):
        core.compare(load_spec(spec_path), out=cmp)
    tables = cmp / "dp_release" / "tables"
    for name in ("manifest.json", "summary.json"):
        doc = json.loads((tables / name).read_text("utf-8"))
        assert doc["not_for_publication"] is True, name
        reasons = doc["not_for_publication_reasons"]
        assert [r["reason"] for r in reasons] == ["comparison_copy"], name
        assert "DP side of `tabdp compare`" in reasons[0]["text"]
    summary = json.loads((tables / "summary.json").read_text("utf-8"))
    assert "NOT_FOR_PUBLICATION.txt" in summary["files"]
    page = (tables / "summary.html").read_text("utf-8")
    assert "NOT FOR PUBLICATION: comparison copy." in page
    assert "it may be published with the tables" not in page
    assert "seeded randomness" not in page  # an unseeded run: only the comparison's reason
    for marker in (cmp / "dp_release" / "NOT_FOR_PUBLICATION.txt",
                   tables / "NOT_FOR_PUBLICATION.txt"):
        text = marker.read_text("utf-8")
        assert text.startswith("NOT FOR PUBLICATION") and "tabdp compare" in text


@pytest.mark.parametrize("where", ["after_release", "marker_write"])
def test_a_failure_after_the_release_leaves_nothing_that_looks_publishable(
        spec_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A crash just after the DP side's outputs are written, or while a marker is written."""
    if where == "after_release":
        real = runner.run_release

        def crash(*a: Any, **k: Any) -> Any:
            real(*a, **k)
            raise _Stop

        monkeypatch.setattr(runner, "run_release", crash)
    else:
        real_write = Path.write_text
        cmp_dp = spec_path.parent / "cmp" / "dp_release"

        def write(self: Path, *a: Any, **k: Any) -> int:
            # the marker of the tables (the release's, or compare's after it); dp_release/'s
            # own is allowed
            if self.name == "NOT_FOR_PUBLICATION.txt" and self.parent != cmp_dp:
                raise _Stop
            return real_write(self, *a, **k)

        monkeypatch.setattr(Path, "write_text", write)
    cmp = spec_path.parent / "cmp"
    with pytest.raises((_Stop, DataDependentFailure)):
        core.compare(load_spec(spec_path), out=cmp)
    for path, manifest in _manifests(cmp).items():
        assert manifest["not_for_publication"] is True, path
        assert (path.parent / "NOT_FOR_PUBLICATION.txt").exists(), path
    for path in cmp.rglob("summary.json"):
        assert json.loads(path.read_text("utf-8"))["not_for_publication"] is True, path
    if where == "after_release":  # the release completed: its folder is there, marked
        assert (cmp / "dp_release" / "tables" / "manifest.json").exists()
    assert (cmp / "dp_release" / "NOT_FOR_PUBLICATION.txt").exists()


def test_a_read_only_ledger_run_must_be_marked(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    with pytest.raises(InvalidParameterError, match="_not_for_publication"):
        runner.run_release(spec, _ledger_read_only=True)
    assert not (spec_path.parent / "out").exists()
