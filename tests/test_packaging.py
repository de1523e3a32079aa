"""Fast start and the generator's safe defaults.

`import tabdp` must not import the heavy dependencies (SciPy's optimizers, Matplotlib, mpmath,
python-flint, pandas, Polars) nor the heavy submodules, yet every public name and submodule stays
reachable as an attribute and the ``.dp`` accessor works whichever of tabdp, pandas and Polars is
imported first. Each check runs in a fresh interpreter, because this test process has imported
everything already.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tabdp

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(tabdp.__file__).resolve().parents[1]  # the checkout, or site-packages
HEAVY = ("scipy", "scipy.optimize", "matplotlib", "mpmath", "flint", "pandas", "polars",
         "narwhals", "pyarrow", "tabdp.mechanisms", "tabdp.noise", "tabdp.frame",
         "tabdp.privacy", "tabdp.release", "tabdp.calibrate")


def _python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(SRC)
    # tabdp's own warnings (the accessor hook's RuntimeWarning, import-system ImportWarnings) are
    # errors; third-party deprecations (old Matplotlib with new pyparsing) are not tabdp's.
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-W",
                           "error::ImportWarning", "-c", code], cwd=cwd or SRC, env=env,
                          capture_output=True, text=True, timeout=120)


def _loaded_after(code: str) -> set[str]:
    proc = _python(f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))")
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_import_tabdp_loads_no_heavy_module() -> None:
    loaded = _loaded_after("import tabdp")
    assert "tabdp" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_cli_help_loads_no_heavy_module() -> None:
    code = ("import contextlib, io, tabdp.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()) as f:\n"
            "    assert c.main(['--help']) == 0\n"
            "assert 'validate' in f.getvalue()")
    loaded = _loaded_after(code)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_public_names_and_submodules_are_reachable_lazily() -> None:
    code = """
import tabdp, types
assert callable(tabdp.calibrate) and tabdp.calibrate.__module__ == "tabdp.calibrate"
for name in tabdp.__all__:
    getattr(tabdp, name)
for sub in ("sensitivity", "release", "report", "plotting", "synth", "datasets", "privacy"):
    assert isinstance(getattr(tabdp, sub), types.ModuleType), sub
assert {"KeySet", "Session", "sensitivity", "calibrate"} <= set(dir(tabdp))
try:
    tabdp.no_such_name
except AttributeError as e:
    assert "no_such_name" in str(e)
else:
    raise AssertionError("no AttributeError")
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow  # a fresh interpreter (1.9 s), in CI
def test_calibrate_stays_the_function_when_its_module_loads_first() -> None:
    # tabdp.release.spec imports the tabdp.calibrate module; the import system then binds the
    # submodule on the package, which must not shadow the public function.
    proc = _python("import tabdp, tabdp.release.spec, tabdp.calibrate as m\n"
                   "from tabdp.calibrate import calibrate\n"
                   "assert tabdp.calibrate is calibrate, tabdp.calibrate\n"
                   "import sys; assert sys.modules['tabdp.calibrate'].calibrate is calibrate")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow  # 11 s of the local loop (2026-12-03): CI only
def test_accessor_works_whatever_the_import_order() -> None:
    body = """
df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
keys = tabdp.KeySet.from_dict(c=["a", "b"])
mech = tabdp.mechanisms.Gaussian(sigma=1.0)
for frame in (df, df.lazy(), df.to_pandas()):
    out = frame.dp.sum("x", by="c", keys=keys, mechanism=mech, session=tabdp.Session(seed=1))
    assert list(out.columns) == ["c", "x", "x_sd", "x_moe", "x_lower", "x_upper"], out.columns
import sys
# the one-shot finder is done with pandas and Polars (it may still wait for PySpark)
assert not any(set(getattr(f, "pending", {})) & {"pandas", "polars"} for f in sys.meta_path
               if getattr(f, "_tabdp_after_import", False))
assert type(df.dp).__name__ == "DPAccessor"
"""
    for head in ("import tabdp\nimport polars as pl\nimport pandas as pd",
                 "import polars as pl\nimport tabdp\nimport pandas as pd",
                 "import pandas as pd, polars as pl\nimport tabdp"):
        proc = _python(head + "\n" + body)
        assert proc.returncode == 0, (head, proc.stderr)


# -- data/generate_cbp.py ------------------------------------------------------------------------

def _generate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(SRC)
    return subprocess.run([sys.executable, str(ROOT / "data" / "generate_cbp.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_generator_never_overwrites_by_default(tmp_path: Path) -> None:
    sample = ROOT / "data" / "cbp_sample.parquet"
    before = sample.stat().st_mtime_ns, sample.read_bytes()
    # no --out: refused (the old default was the shipped sample)
    proc = _generate("--rows", "50", cwd=ROOT)
    assert proc.returncode == 2 and "--out" in proc.stderr
    # the shipped sample itself, without --force: refused, untouched
    proc = _generate("--rows", "50", "--out", str(sample), cwd=ROOT)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "--force" in proc.stderr
    assert (sample.stat().st_mtime_ns, sample.read_bytes()) == before
    # any existing file: refused without --force, replaced with it
    out = tmp_path / "x.parquet"
    out.write_bytes(b"keep")
    assert _generate("--rows", "50", "--out", str(out), cwd=tmp_path).returncode == 2
    assert out.read_bytes() == b"keep"
    proc = _generate("--rows", "50", "--seed", "3", "--out", str(out), "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "zstd level default" in proc.stdout and "generating 50 establishments" in proc.stdout
    import polars as pl

    from tabdp.datasets.synth import generate_establishments

    assert pl.read_parquet(out).equals(generate_establishments(50, seed=3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]  # no partial file left


def test_generator_compression_level_is_explicit(tmp_path: Path) -> None:
    out = tmp_path / "y.parquet"
    proc = _generate("--rows", "50", "--out", str(out), "--compression-level", "19", cwd=tmp_path)
    assert proc.returncode == 0 and "zstd level 19" in proc.stdout
    proc = _generate("--rows", "50", "--out", str(tmp_path / "z.parquet"),
                     "--compression-level", "40", cwd=tmp_path)
    assert proc.returncode == 2 and "1-22" in proc.stderr


# -- the README's code, from an installed wheel outside the checkout ------------------------------

def _readme_blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def test_readme_keeps_the_checkout_commands() -> None:
    shell = "\n".join(_readme_blocks("bash"))
    for command in ("make demo", "make test", "make wheel", "tabdp demo"):
        assert re.search(rf"^{command}\b", shell, re.MULTILINE), command
    assert _readme_blocks("python"), "the README has no Python quickstart"
    # the quickstart reads the packaged data, not the checkout's data/ folder
    assert "data/" not in "\n".join(_readme_blocks("python"))


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the checkout, installed (without dependencies) into a folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "--no-build-isolation", "--wheel-dir", str(tmp / "dist"), str(ROOT)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp / "dist").glob("tabdp-*.whl")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-compile", "--target", str(tmp / "site"), str(wheel)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp / "site"


@pytest.mark.slow
def test_readme_python_runs_from_the_installed_wheel(wheel_site: Path, tmp_path: Path) -> None:
    """Each ```python block of the README runs as a script from an installed wheel.

    The scripts run in an empty folder, tabdp imported from the wheel (its dependencies from
    this environment), and must print what the README says they print.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(wheel_site), PYTHONNOUSERSITE="1")
    where = subprocess.run([sys.executable, "-c", "import tabdp; print(tabdp.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(wheel_site), where.stdout
    outputs = []
    for i, code in enumerate(_readme_blocks("python")):
        script = tmp_path / f"readme_{i}.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"README python block {i} failed:\n{code}\n{proc.stderr}"
        outputs.append(proc.stdout)
    out = "\n".join(outputs)
    assert "payroll_moe" in out and "count_moe" in out        # the two tables were printed
    assert re.search(r"payroll \$250,000: rho <= 0\.50 ", out), out
    assert re.search(r"payroll \$20,000,000,000: rho <= 50\.00 ", out), out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"readme_{i}.py"
                                                           for i in range(len(outputs))]


@pytest.mark.slow
def test_wheel_metadata_has_the_project_urls(wheel_site: Path) -> None:
    (meta,) = wheel_site.glob("tabdp-*.dist-info/METADATA")
    urls = dict(line.removeprefix("Project-URL: ").split(", ", 1)
                for line in meta.read_text(encoding="utf-8").splitlines()
                if line.startswith("Project-URL: "))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Changelog", "Issues"}, urls
    assert all(u.startswith("https://") for u in urls.values())
    assert urls["Changelog"].startswith(urls["Source"]) and urls["Issues"].startswith(
        urls["Source"])
