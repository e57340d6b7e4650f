"""``python -m unilab ARGS``: the ``unilab`` binary with ARGS, its exit code passed through."""

from __future__ import annotations

import os
import sys

from ._binary import binary_path


def main() -> None:
    binary = binary_path()
    # Replace this interpreter: signals, the terminal and the exit code are the binary's own.
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
