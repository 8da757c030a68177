"""The rich Console every operator command prints through."""

from __future__ import annotations

import os

from rich.console import Console

# Where output goes to a pipe, a file or a CI log there is no screen to fit: a line as wide as
# its table keeps each cell on one line for grep and for a person reading the log, where
# rich's default (80 columns, or the width of a terminal on stdin) folds cells mid-word.
UNBOUNDED_WIDTH = 100_000


def make_console(stderr: bool = False) -> Console:
    """A Console on stdout (or stderr): a terminal's own width on a terminal, COLUMNS where
    the user set it, else wide enough that no table cell or line is folded."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return Console(stderr=stderr, width=UNBOUNDED_WIDTH)
