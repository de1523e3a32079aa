"""Griffe extension: read the house style's ``Example:`` docstring section as ``Examples:``.

tabdp's docstrings head their doctests ``Example:`` (Google style allows both); griffe only
recognizes ``Examples:`` as the examples section and would render the doctest as prose.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` section headers to ``Examples:`` when an object is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the docstring of every loaded object."""
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
