"""The public page's figures are cached on disk (tabdp.plotting.public_figure_svg)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tabdp import plotting
from tabdp.plotting import loss_curves_svg, moe_curves_svg, public_figure_svg

ROWS = [{"delta": 1.0, "rho": 0.01}, {"delta": 100.0, "rho": 0.2}, {"delta": 1e4, "rho": 0.9}]
MOE = [{"total": t, "sd": 3.0, "moe": 5.0} for t in (10.0, 100.0, 1e3)]


def _counting(fn: Any, calls: list[int]) -> Any:
    def render(*args: Any, **kwargs: Any) -> str:
        calls.append(1)
        return str(fn(*args, **kwargs))

    render.__name__ = render.__qualname__ = fn.__name__
    render.__module__ = fn.__module__
    return render


@pytest.mark.parametrize("fn, args, kwargs", [
    (loss_curves_svg, ({"t": ROWS},), {"title": "Loss", "units": {"t": "payroll"}}),
    (moe_curves_svg, ({"t: x": MOE},), {"title": "Error", "cv_line": 0.3}),
])
def test_a_cached_figure_is_the_drawn_one_and_is_drawn_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fn: Any, args: Any, kwargs: Any
) -> None:
    monkeypatch.setenv("TABDP_CACHE_DIR", str(tmp_path))
    calls: list[int] = []
    render = _counting(fn, calls)
    first = public_figure_svg(render, *args, **kwargs)
    second = public_figure_svg(render, *args, **kwargs)
    assert first == second == fn(*args, **kwargs)
    assert len(calls) == 1  # the second came from the disk
    # other inputs (a title) are another figure
    other = public_figure_svg(render, *args, **{**kwargs, "title": "Other"})
    assert len(calls) == 2 and other != first
    assert len(list(tmp_path.rglob("figures/*.json"))) == 2


def test_a_changed_or_truncated_file_is_drawn_again(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TABDP_CACHE_DIR", str(tmp_path))
    calls: list[int] = []
    render = _counting(loss_curves_svg, calls)
    good = public_figure_svg(render, {"t": ROWS}, title="Loss")
    (path,) = tmp_path.rglob("figures/*.json")
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "svg": entry["svg"].replace("Loss", "Lies")}))
    assert public_figure_svg(render, {"t": ROWS}, title="Loss") == good
    path.write_text(path.read_text()[:100])
    assert public_figure_svg(render, {"t": ROWS}, title="Loss") == good
    assert len(calls) == 3
    assert json.loads(path.read_text())["svg"] == good  # replaced by the drawn figure


def test_an_rc_change_is_a_miss_and_off_writes_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    monkeypatch.setenv("TABDP_CACHE_DIR", str(tmp_path))
    calls: list[int] = []
    render = _counting(loss_curves_svg, calls)
    public_figure_svg(render, {"t": ROWS}, title="Loss")
    with matplotlib.rc_context({"lines.linewidth": 3.0}):
        public_figure_svg(render, {"t": ROWS}, title="Loss")
    assert len(calls) == 2
    off = tmp_path / "off"
    monkeypatch.setenv("TABDP_CACHE_DIR", "off")
    assert public_figure_svg(render, {"t": ROWS}, title="Loss") == loss_curves_svg(
        {"t": ROWS}, title="Loss")
    assert len(calls) == 3 and not off.exists()
    assert plotting.public_figure_svg is public_figure_svg


def test_changed_drawing_code_is_drawn_again_under_the_same_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key hashes the drawing modules' source: an edit without a version bump misses."""
    from tabdp import _figcache

    monkeypatch.setenv("TABDP_CACHE_DIR", str(tmp_path / "cache"))
    pkg = tmp_path / "src"
    pkg.mkdir()
    module = pkg / "figcode_probe.py"
    module.write_text("STYLE = 1\n")
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setattr(_figcache, "_FIGURE_CODE", ("figcode_probe",))
    _figcache._figure_code.cache_clear()
    calls: list[int] = []
    render = _counting(loss_curves_svg, calls)
    public_figure_svg(render, {"t": ROWS}, title="Loss")
    public_figure_svg(render, {"t": ROWS}, title="Loss")
    assert len(calls) == 1
    module.write_text("STYLE = 2\n")  # the drawing code changed, tabdp's version did not
    _figcache._figure_code.cache_clear()  # (read once per process)
    public_figure_svg(render, {"t": ROWS}, title="Loss")
    assert len(calls) == 2
    monkeypatch.undo()
    _figcache._figure_code.cache_clear()
    # the real key covers the modules that draw: every one of them is found and read
    assert all(_source_found(m) for m in _figcache._FIGURE_CODE)


def _source_found(module: str) -> bool:
    import importlib.util

    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin is not None and Path(spec.origin).is_file()
