"""MkDocs hook: fills the generated reference pages (see ``docs/_gen/refgen.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tabdp_docs_refgen", _HERE / "refgen.py")
assert _spec is not None and _spec.loader is not None
refgen = importlib.util.module_from_spec(_spec)
sys.modules["tabdp_docs_refgen"] = refgen
_spec.loader.exec_module(refgen)

_MARKERS = {
    "<!-- tabdp:spec-reference -->": refgen.spec_reference,
    "<!-- tabdp:cli-reference -->": refgen.cli_reference,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each generator marker in a page by the generated Markdown."""
    for marker, generate in _MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
