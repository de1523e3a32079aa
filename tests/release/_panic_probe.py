"""Test helper (tests/release/test_author_attacks.py): native output during an author run.

Run as a script: ``python _panic_probe.py <cli args>``. It makes the data phase of the run
write ``SECRET-VALUE-123`` to file descriptor 2 directly, as a Rust panic of Polars does, then
runs the CLI.
"""

from __future__ import annotations

import os
import sys

from tabdp import cli
from tabdp.release import runner

_real = runner._run_with_data


def _noisy(*args: object, **kwargs: object) -> object:
    os.write(2, b"thread '<unnamed>' panicked at SECRET-VALUE-123\n")
    return _real(*args, **kwargs)  # type: ignore[arg-type]


if __name__ == "__main__":  # not on import (pytest's --doctest-modules imports every module)
    runner._run_with_data = _noisy  # type: ignore[assignment]
    sys.exit(cli.main(sys.argv[1:]))
