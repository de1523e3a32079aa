"""The lazily loaded packages keep their submodules reachable as attributes (stop 68).

`tabdp.mechanisms`, `tabdp.noise` and `tabdp.noise.rounding` load their names on first use
(PEP 562) so that a Spark worker unpickling one mechanism imports little. Before, importing a
package imported every submodule, so ``tabdp.mechanisms.smooth.choose_gamma`` (documented in
docs/medians.md and docs/api/mechanisms.md) worked after a bare ``import tabdp``; the lazy
packages must keep that: a submodule is imported when it is first read as an attribute.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PACKAGES = ("tabdp.mechanisms", "tabdp.noise", "tabdp.noise.rounding", "tabdp.privacy")


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("path", [
    "tabdp.mechanisms.smooth.choose_gamma", "tabdp.mechanisms.additive.Gaussian",
    "tabdp.mechanisms.transformation.LogTransform", "tabdp.noise.gaussian.Gaussian",
    "tabdp.noise.rounding.rounder_for", "tabdp.noise.rounding.taylor.GaussianTaylorBounds",
    # tabdp.privacy loads its names lazily since stop 67: its submodules were unreachable as
    # attributes after `import tabdp` until stop 68
    "tabdp.privacy.lifetime.Ledger", "tabdp.privacy.ledger.UnitLosses",
])
def test_a_documented_submodule_path_works_after_import_tabdp(path: str) -> None:
    got = _fresh(f"import tabdp\nprint({path}.__name__)")
    assert got.returncode == 0, got.stderr[-400:]
    assert got.stdout.strip() == path.rsplit(".", 1)[-1]


def test_every_submodule_is_an_attribute_of_its_lazy_package() -> None:
    code = (
        "import importlib, pkgutil\n"
        f"for name in {_PACKAGES!r}:\n"
        "    pkg = importlib.import_module(name)\n"
        "    for m in pkgutil.iter_modules(pkg.__path__):\n"
        "        assert getattr(pkg, m.name).__name__ == f'{name}.{m.name}', (name, m.name)\n"
        "import tabdp.mechanisms as M\n"
        "try:\n"
        "    M.no_such_name\n"
        "except AttributeError as err:\n"
        "    print(err)\n")
    got = _fresh(code)
    assert got.returncode == 0, got.stderr[-400:]
    assert got.stdout.strip() == "module 'tabdp.mechanisms' has no attribute 'no_such_name'"
