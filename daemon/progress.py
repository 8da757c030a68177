"""What takes the time, said on a terminal: the operator CLI's commands that may run for
minutes (eval, eval-mpet, report) tell a person who waits what they are doing."""

from __future__ import annotations

import sys
from typing import Callable


def terminal_progress(prog: str) -> Callable[[str], None] | None:
    """A function that writes ``prog: what`` on stderr, or None where stderr is not a
    terminal (a pipe or a log: stderr is kept for errors there, and nobody waits)."""
    if not sys.stderr.isatty():
        return None

    def say(what: str) -> None:
        print(f"{prog}: {what}", file=sys.stderr, flush=True)
    return say
