"""Test helper: a curator configuration for author-mode specs (docs/reference/curator.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def write_curator(folder: Path, datasets: Mapping[str, Path | str], *,
                  public: Sequence[Path] = (), root: Path | str = "releases",
                  extra: str = "", name: str = "curator.toml",
                  seeded: bool = True,
                  dataset_extra: Mapping[str, str] | None = None) -> Path:
    """Write ``folder/curator.toml``: datasets (name -> path), public folders, output root.

    Relative paths are relative to ``folder``. ``seeded``: ``[testing] seeded_author_runs``
    (author-mode test specs set seeds to compare neighbouring runs). ``dataset_extra``: more
    lines of a dataset's table (e.g. ``'unit = "firm"'``, ``'ledger = "..."'``), by name.
    Returns the file's path.
    """
    lines = []
    for ds, path in datasets.items():
        lines += [f"[datasets.{ds}]", f"path = {Path(path).as_posix()!r}".replace("'", '"'),
                  (dataset_extra or {}).get(ds, ""), ""]
    folders = ", ".join(f'"{Path(p).as_posix()}"' for p in public)
    lines += ["[public]", f"folders = [{folders}]", "", "[output]",
              f'root = "{Path(root).as_posix()}"', "", extra]
    if seeded:
        lines += ["", "[testing]", "seeded_author_runs = true", ""]
    file = folder / name
    file.write_text("\n".join(lines), encoding="utf-8")
    return file
