"""Package data: the bundled sample, hierarchies and example spec, the wheel and ``tabdp demo``.

The wheel is built in-process with hatchling (the project's build backend) from this checkout, so
these tests check what ``pip install`` would install: the packaged files are the repository's
files byte for byte, laid out where :mod:`tabdp.datasets` looks for them, and ``tabdp demo`` runs
from that layout in a folder outside the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import polars as pl
import pytest

import tabdp
from tabdp import datasets
from tabdp.release.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(tabdp.__file__).resolve().parents[1]  # the checkout, or site-packages
# repository file -> path inside the wheel (what pyproject's force-include must say)
PACKAGED = {
    "data/cbp_sample.parquet": "tabdp/datasets/data/cbp_sample.parquet",
    "data/hierarchies/geography.csv": "tabdp/datasets/data/hierarchies/geography.csv",
    "data/hierarchies/naics.csv": "tabdp/datasets/data/hierarchies/naics.csv",
    "examples/cbp_release.toml": "tabdp/datasets/examples/cbp_release.toml",
}


def _env(pythonpath: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(pythonpath)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this checkout (hatchling, as ``pip install .`` would)."""
    from hatchling.builders.wheel import WheelBuilder

    out = tmp_path_factory.mktemp("wheel")
    (path,) = WheelBuilder(str(ROOT)).build(directory=str(out), versions=["standard"])
    return Path(path)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel unpacked into a site folder outside the repository (no repo on the path)."""
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


# -- the API -------------------------------------------------------------------------------------

def test_sample_loads() -> None:
    df = datasets.load_cbp_sample()
    assert isinstance(df, pl.DataFrame)
    assert df.shape == (100_000, 11)
    assert df.columns == ["estab_id", "firm_id", "state", "county", "naics2", "naics6",
                          "size_class", "employment", "payroll_q1", "payroll", "revenue"]
    assert df["estab_id"].to_list()[:3] == [1, 2, 3] and df["estab_id"].n_unique() == 100_000
    assert df.equals(pl.read_parquet(ROOT / "data" / "cbp_sample.parquet"))
    lazy = datasets.load_cbp_sample(lazy=True)
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.select(pl.col("payroll").sum()).collect().item() == df["payroll"].sum()


def test_hierarchies_load_as_code_strings() -> None:
    geo = datasets.load_hierarchy("geography")
    naics = datasets.load_hierarchy("naics")
    assert geo.columns == ["state", "county"] and naics.columns == [
        "naics2", "naics3", "naics4", "naics6"]
    assert geo.row(0) == ("01", "01001")  # leading zeros kept
    assert all(dt == pl.String for dt in [*geo.dtypes, *naics.dtypes])
    assert geo.height == 300 and naics.height == 301
    assert set(geo["county"]) == set(datasets.load_cbp_sample()["county"])
    with pytest.raises(tabdp.InvalidParameterError, match="(?s)'geo'.*hierarchy_path"):
        datasets.hierarchy_path("geo")  # type: ignore[arg-type]


def test_example_spec_resolves_to_the_bundled_files() -> None:
    spec = load_spec(datasets.example_spec_path())
    assert spec.input.path == datasets.cbp_sample_path()
    assert {h.file for h in spec.hierarchies.values()} == {
        datasets.hierarchy_path("geography"), datasets.hierarchy_path("naics")}
    with pytest.raises(tabdp.InvalidParameterError, match="'nope'"):
        datasets.example_spec_path("nope")  # type: ignore[arg-type]


@pytest.mark.skipif(SRC != ROOT, reason="tabdp is installed, not run from this checkout")
def test_checkout_uses_the_repository_files() -> None:
    assert datasets.data_root() == ROOT
    assert datasets.example_spec_path() == ROOT / "examples" / "cbp_release.toml"


# -- the wheel -----------------------------------------------------------------------------------

def test_pyproject_packages_exactly_these_files() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"] == PACKAGED
    # the same relative layout as the repository, so the spec's "../data/..." paths resolve
    for repo, packaged in PACKAGED.items():
        assert packaged == "tabdp/datasets/" + repo


def test_wheel_ships_the_repository_files_unchanged(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for repo, packaged in PACKAGED.items():
            assert z.read(packaged) == (ROOT / repo).read_bytes(), repo
        assert "tabdp/py.typed" in names
        dist = f"tabdp-{tabdp.__version__}.dist-info"
        assert z.read(f"{dist}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        meta = z.read(f"{dist}/METADATA").decode()
    assert wheel.name == f"tabdp-{tabdp.__version__}-py3-none-any.whl"
    assert "License-Expression: Apache-2.0" in meta
    assert "Requires-Python: >=3.11" in meta
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()
    assert f"## [{tabdp.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.slow
def test_demo_runs_from_the_installed_wheel_outside_the_repo(installed: Path,
                                                             tmp_path: Path) -> None:
    """`tabdp demo` (default folder) from the installed layout, in a folder outside the repo."""
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, tabdp.datasets as d, tabdp.cli as c; "
         "print(d.data_root()); sys.exit(c.main(['demo', '--quiet']))"],
        cwd=work, env=_env(installed), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == str(installed / "tabdp" / "datasets")
    demo = work / "tabdp-demo"
    assert str(demo / "public") in proc.stdout and str(demo / "confidential") in proc.stdout
    assert (demo / "public" / "summary.html").is_file()
    assert (demo / "public" / "manifest.json").is_file()
    assert (demo / "confidential" / "per_record_losses.parquet").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["tabdp-demo"]  # nothing else written
    assert not (installed / "tabdp" / "datasets" / "out").exists()  # nothing written into site


@pytest.mark.slow
def test_demo_out_from_a_cwd_outside_the_repo(tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "tabdp.cli", "demo", "--out", "mydemo",
                           "--quiet"], cwd=work, env=_env(SRC), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (work / "mydemo" / "public" / "summary.html").is_file()
    assert "mydemo" in proc.stdout
    assert sorted(p.name for p in work.iterdir()) == ["mydemo"]
