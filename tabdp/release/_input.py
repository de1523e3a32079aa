"""Reading a release spec's Parquet input lazily (shared by the runner and the schema checks).

Both `tabdp.release.runner` (the run) and `tabdp.release.input_schema` (``validate``'s
metadata-only schema check) scan the input the same way; the scan lives here so that neither
imports the other.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import polars as pl

from tabdp.exceptions import DataValidationError
from tabdp.release.curator_config import SCHEMA_DTYPES
from tabdp.release.spec import ReleaseSpec

__all__ = ["scan_input"]


def scan_input(spec: ReleaseSpec) -> tuple[pl.LazyFrame, dict[str, str]]:
    """Scan a spec's Parquet input lazily (metadata only) and return it with its schema.

    A folder is scanned as a dataset (hive partition folders become columns, typed like their
    key domains, else text). In author mode every file is read against the curator's declared
    schema and partition values are converted leniently (a value that does not convert becomes
    null), so that nothing about the files' contents decides whether the scan succeeds.

    Args:
        spec: A release spec whose input is Parquet (``input.path``).

    Returns:
        The lazy frame and its schema as ``{column: dtype name}``.

    Raises:
        DataValidationError: The input is not readable Parquet.

    Example:
        >>> from tabdp.datasets import example_spec_path
        >>> from tabdp.release.spec import load_spec
        >>> lf, schema = scan_input(load_spec(example_spec_path()))
        >>> schema["county"]
        'String'
    """
    src = spec.input.path
    assert src is not None  # input.table: refused under the Polars engine before any read
    kwargs: dict[str, Any] = {}
    source: Any = spec.input.source
    hive = spec.input.hive_partitioning
    if src.is_dir():
        # A folder: scan it as a dataset, so hive partition folders (state=01/...) become
        # columns, typed like their key domains (else text): codes such as "01" stay codes.
        source = src
        parts = _hive_columns(src)
        if parts and hive is not False:
            kwargs["hive_partitioning"] = True
            kwargs["hive_schema"] = {c: (spec.domains[c].dtype if c in spec.domains
                                         else pl.String) for c in parts}
        elif hive is not None:
            kwargs["hive_partitioning"] = hive
    elif hive is not None:
        kwargs["hive_partitioning"] = hive
    declared = spec.input.schema if spec.input.mode == "author" else {}
    hive_types: dict[str, Any] = {}
    if "hive_schema" in kwargs and spec.input.mode == "author":
        # author mode: partition values are read as text, then converted leniently to the
        # declared type (else the domain's): a folder name that does not parse as the
        # author's domain type (``size_class=5-9`` against an integer domain) becomes null
        # instead of failing the run, which would tell the author that some record holds
        # such a value (issue 27 review).
        hive_types = {c: SCHEMA_DTYPES[declared[c]] if c in declared else t
                      for c, t in kwargs["hive_schema"].items()}
        kwargs["hive_schema"] = dict.fromkeys(hive_types, pl.String)
    if declared:
        # author mode: every file is read against the declared schema, not the first file's:
        # files written one by one (pandas, one per partition) have dtypes that follow their
        # contents (an integer column with one missing value is stored as float), and a scan
        # of files whose dtypes differ fails, which would tell the author that some record
        # is missing a value (issue 27 review). Numeric widenings are allowed; columns no
        # declaration names are not read.
        kwargs["schema"] = {c: SCHEMA_DTYPES[t] for c, t in declared.items()
                            if c not in hive_types}
        cast_args: dict[str, Any] = {"integer_cast": ["upcast", "allow-float"],
                                     "float_cast": ["upcast", "downcast"]}
        if "categorical_to_string" in inspect.signature(pl.ScanCastOptions).parameters:
            # a Categorical file column read as the declared String (newer Polars; the floor,
            # 1.32, lacks the option: such a file then stops the run, see
            # docs/reference/curator.md)
            cast_args["categorical_to_string"] = "allow"
        kwargs["cast_options"] = pl.ScanCastOptions(**cast_args)
        kwargs["missing_columns"] = "insert"
        kwargs["extra_columns"] = "ignore"
    try:
        lf = pl.scan_parquet(source, **kwargs)
        schema = lf.collect_schema()
        if declared or hive_types:
            # author mode: the declared types, never the files' (a value that does not
            # convert becomes null and meets the declared null rule)
            targets = {**hive_types, **{c: SCHEMA_DTYPES[t] for c, t in declared.items()}}
            casts = [pl.col(c).cast(t, strict=False) for c, t in targets.items()
                     if c in schema and schema[c] != t]
            lf = lf.with_columns(casts) if casts else lf
            schema = lf.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as err:
        raise DataValidationError(
            f"cannot read the input {spec.input.source!r} as Parquet: {err}.\n"
            "Hint: input.path must be a Parquet file, a folder of Parquet files or a "
            "hive-partitioned dataset.") from err
    return lf, {k: str(v) for k, v in schema.items()}


def _hive_columns(folder: Path) -> list[str]:
    """Names of the hive partition levels (``name=value`` folders) above the first data file."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        if any(f.endswith(".parquet") for f in files):
            rel = Path(root).relative_to(folder)
            return [p.split("=", 1)[0] for p in rel.parts if "=" in p]
    return []
