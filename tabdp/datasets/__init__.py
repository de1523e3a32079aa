"""Sample data and example specs shipped with tabdp.

The package carries a small synthetic establishment file shaped like the microdata behind the
Census Bureau's County Business Patterns (100,000 establishments, 10 states; no value comes from
real records), the two public hierarchy files its example release uses, and that example release
spec. ``tabdp demo`` runs the spec on the sample.

In an installed wheel the files sit inside this package (``tabdp/datasets/data/...`` and
``tabdp/datasets/examples/...``, the same relative layout as the repository, so the example spec's
relative paths resolve). In a source checkout they are the repository's own ``data/`` and
``examples/`` files: the wheel is built from exactly those files, so there is one copy of each.

Example:
    >>> from tabdp import datasets
    >>> df = datasets.load_cbp_sample()
    >>> df.height, df.columns[:3]
    (100000, ['estab_id', 'firm_id', 'state'])
    >>> datasets.example_spec_path().name
    'cbp_release.toml'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tabdp.exceptions import DataValidationError

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "data_root",
    "cbp_sample_path",
    "load_cbp_sample",
    "hierarchy_path",
    "load_hierarchy",
    "example_spec_path",
]

_SAMPLE = Path("data") / "cbp_sample.parquet"
_HIERARCHIES = {"geography": Path("data") / "hierarchies" / "geography.csv",
                "naics": Path("data") / "hierarchies" / "naics.csv"}
_EXAMPLES = {"cbp_release": Path("examples") / "cbp_release.toml"}


def data_root() -> Path:
    """The folder holding ``data/`` and ``examples/``: this package's folder, or the checkout.

    Returns:
        ``tabdp/datasets`` in an installed wheel; the repository root in a source checkout or an
        editable install.

    Raises:
        DataValidationError: Neither location holds the sample (a broken installation).

    Example:
        >>> (data_root() / "data" / "cbp_sample.parquet").is_file()
        True
    """
    here = Path(__file__).resolve().parent
    for root in (here, here.parents[1]):
        if (root / _SAMPLE).is_file() and (root / _EXAMPLES["cbp_release"]).is_file():
            return root
    raise DataValidationError(
        f"tabdp's bundled sample data is missing: neither {str(here / _SAMPLE)!r} nor "
        f"{str(here.parents[1] / _SAMPLE)!r} exists.\nHint: reinstall tabdp from a wheel "
        "(pip install --force-reinstall tabdp), or run from a complete source checkout.")


def cbp_sample_path() -> Path:
    """Path of the synthetic County Business Patterns-like sample (Parquet).

    Returns:
        The path of ``cbp_sample.parquet``: 100,000 synthetic establishments, one row each
        (columns described in the repository's ``data/README.md``).

    Example:
        >>> cbp_sample_path().suffix
        '.parquet'
    """
    return data_root() / _SAMPLE


def load_cbp_sample(*, lazy: bool = False) -> pl.DataFrame | pl.LazyFrame:
    """Load the synthetic County Business Patterns-like sample as a Polars frame.

    The file equals ``tabdp.datasets.synth.generate_establishments(100_000, seed=20261121)``; no
    value comes from real records, so it is safe to ship, print and publish.

    Args:
        lazy: Return a ``polars.LazyFrame`` scanning the file instead of reading it.

    Returns:
        A ``polars.DataFrame`` (or ``LazyFrame``) with one row per establishment: ``estab_id``,
        ``firm_id``, ``state``, ``county``, ``naics2``, ``naics6``, ``size_class``,
        ``employment``, ``payroll_q1``, ``payroll``, ``revenue``.

    Example:
        >>> df = load_cbp_sample()
        >>> df.shape
        (100000, 11)
        >>> load_cbp_sample(lazy=True).select("payroll").collect().height
        100000
    """
    import polars as pl

    path = cbp_sample_path()
    return pl.scan_parquet(path) if lazy else pl.read_parquet(path)


def hierarchy_path(name: Literal["geography", "naics"]) -> Path:
    """Path of a public hierarchy file (CSV) used by the example spec.

    Args:
        name: ``"geography"`` (columns ``state, county``) or ``"naics"`` (columns ``naics2,
            naics3, naics4, naics6``).

    Returns:
        The CSV path.

    Raises:
        InvalidParameterError: ``name`` is not one of the two hierarchies.

    Example:
        >>> hierarchy_path("geography").name
        'geography.csv'
    """
    if name not in _HIERARCHIES:
        from tabdp.exceptions import InvalidParameterError

        raise InvalidParameterError(
            f"hierarchy name must be one of {sorted(_HIERARCHIES)}, got {name!r}.\nHint: use "
            "hierarchy_path('geography') or hierarchy_path('naics').")
    return data_root() / _HIERARCHIES[name]


def load_hierarchy(name: Literal["geography", "naics"]) -> pl.DataFrame:
    """Load a public hierarchy as a Polars frame of code strings (leading zeros kept).

    Args:
        name: ``"geography"`` or ``"naics"`` (see
            [`hierarchy_path`][tabdp.datasets.hierarchy_path]).

    Returns:
        One row per finest code, one String column per level, coarsest first.

    Example:
        >>> geo = load_hierarchy("geography")
        >>> geo.columns, geo.row(0)
        (['state', 'county'], ('01', '01001'))
    """
    import polars as pl

    return pl.read_csv(hierarchy_path(name), infer_schema=False)


def example_spec_path(name: Literal["cbp_release"] = "cbp_release") -> Path:
    """Path of a bundled example release spec (TOML).

    Its input and hierarchy paths are relative to the spec's folder and resolve to the bundled
    files, so ``tabdp run`` / ``tabdp plan`` accept it as is; its output folders are relative too,
    which is why ``tabdp demo`` sends the outputs to a folder of its own (``--out``).

    Args:
        name: The example's name; ``"cbp_release"`` (County Business Patterns-like tables by
            county, state and industry) is the only one.

    Returns:
        The spec path.

    Raises:
        InvalidParameterError: No example of that name.

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> spec = load_spec(example_spec_path())
        >>> spec.input.path == cbp_sample_path()
        True
    """
    if name not in _EXAMPLES:
        from tabdp.exceptions import InvalidParameterError

        raise InvalidParameterError(
            f"example spec name must be one of {sorted(_EXAMPLES)}, got {name!r}.\nHint: use "
            "example_spec_path() for the County Business Patterns example.")
    return data_root() / _EXAMPLES[name]
