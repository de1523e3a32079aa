"""Whether the run is the local loop (``make test-fast``), for tests that scale their work.

``tests/conftest.py`` sets :data:`FAST_LOOP` when the run deselects the slow tests
(``-m "not slow ..."``, as ``make test-fast`` does); CI (``make test``) runs the full counts.
"""

from __future__ import annotations

#: True in the local loop (``-m`` deselecting ``slow``), set by ``tests/conftest.py``.
FAST_LOOP = False


def examples(full: int, fast: int) -> int:
    """A Hypothesis example count: ``fast`` in the local loop, ``full`` in CI (``make test``).

    The local loop draws fewer examples of the same strategies; CI keeps every example.
    """
    return fast if FAST_LOOP else full
