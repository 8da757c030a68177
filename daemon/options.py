"""Checks of command-line options that several ``opptune`` commands share (the commands' own
modules and ``cli`` import it; it imports none of them)."""

from __future__ import annotations

import argparse
import sys


def below_least(cmd: str, args: argparse.Namespace, least: dict[str, int]) -> bool:
    """Whether an option of ``least`` (its dest -> its least value) was given below it; the
    first such is said in one line naming the option typed (the daemon checks them too, for
    other clients, but names its own keys)."""
    for key, low in least.items():
        v = getattr(args, key)
        if isinstance(v, int) and v < low:
            print(f"opptune {cmd}: --{key.replace('_', '-')} must be >= {low}, not {v}",
                  file=sys.stderr)
            return True
    return False
