"""Deprecated location of the backend decision: see `tabdp.frame.backends` (kept as an alias)."""

from __future__ import annotations

from tabdp.frame.backends import is_spark_frame

__all__ = ["is_spark_frame"]
