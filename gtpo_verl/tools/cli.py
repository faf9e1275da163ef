"""What every command-line tool of the package does with a user's mistake: one line, then an exit status.

``ArgumentParser`` reports a bad flag as ``<prog>: <message> (<prog> --help lists the flags)`` and exits 2,
without argparse's usage block; ``fail`` does the same for a bad input the tool finds itself (a
missing or corrupt file). Status 2 is a usage error; 1 is left to "the check ran and failed".
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

USAGE_ERROR = 2


def fail(prog: str, message: str, status: int = USAGE_ERROR) -> NoReturn:
    """Print ``<prog>: <message>`` as one line on stderr and exit with ``status``."""
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(status)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2)."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, f"{message} ({self.prog} --help lists the flags)")


def positive_int(text: str) -> int:
    """An ``int`` flag that must be ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An ``int`` flag that must be ≥ 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 0")
    return value
