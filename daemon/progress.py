"""What takes the time, said on a terminal: the operator CLI's commands that may run for
minutes (eval, eval-mpet, report) tell a person who waits what they are doing."""

from __future__ import annotations

import sys
import time
from typing import Callable


def terminal_progress(prog: str) -> Callable[[str], None] | None:
    """A function that writes ``prog: what`` on stderr, or None where stderr is not a
    terminal (a pipe or a log: stderr is kept for errors there, and nobody waits)."""
    if not sys.stderr.isatty():
        return None

    def say(what: str) -> None:
        print(f"{prog}: {what}", file=sys.stderr, flush=True)
    return say


def terminal_counter(prog: str, every_s: float = 0.5) -> Callable[[str, int, int], None] | None:
    """``count(what, i, n)``: ``prog: what i/n`` rewritten in place on stderr, at most every
    ``every_s`` and at i = n (then the line is ended), or None where stderr is not a
    terminal; a count that takes minutes shows it is moving."""
    if not sys.stderr.isatty():
        return None
    last = [0.0]

    def count(what: str, i: int, n: int) -> None:
        now = time.monotonic()
        if i < n and now - last[0] < every_s:
            return
        last[0] = now
        print(f"\r{prog}: {what} {i}/{n}", end="\n" if i >= n else "", file=sys.stderr,
              flush=True)
    return count
