"""Refusals counted by code and logged at a bounded rate.

A peer that sends thousands of bad frames must not write thousands of log lines: each peer gets
at most one line per ``interval_s``, which says how many of its refusals went unlogged since the
previous one, and all peers together at most ``max_lines`` lines per interval. ``line`` words
the log line (peer, text, code, the unlogged count's note) for other floods: errors an agent
reports, frames an agent refuses from its daemon."""

from __future__ import annotations

import logging
import time
from typing import Callable


class RefusalLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, max_lines: int = 50,
                 max_peers: int = 10_000, clock: Callable[[], float] = time.monotonic,
                 line: str = "refused a message from %r: %s (%s)%s",
                 more: str = "more refusals from this peer"):
        self.log = logger
        self.interval_s = interval_s
        self.max_lines = max_lines
        self.max_peers = max_peers  # bounds memory when every frame names a new peer
        self.clock = clock
        self.line, self.more = line, more
        self.total = 0
        self.by_code: dict[str, int] = {}
        self._peers: dict[bytes | str, list[float | int]] = {}  # peer -> [last line at, unlogged]
        self._window = (0.0, 0)  # (start, lines logged in it) for the global cap
        self.unlogged = 0

    def refused(self, peer: bytes | str, code: str, text: str) -> None:
        """Count one refusal; log it unless this peer (or everyone) logged recently."""
        self.total += 1
        self.by_code[code] = self.by_code.get(code, 0) + 1
        now = self.clock()
        entry = self._peers.get(peer)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            self.unlogged += 1
            return
        start, lines = self._window
        if now - start >= self.interval_s:
            start, lines = now, 0
        if lines >= self.max_lines:
            self._window = (start, lines)
            self.unlogged += 1
            if entry is not None:
                entry[1] += 1
            return
        self._window = (start, lines + 1)
        missed = int(entry[1]) if entry is not None else 0
        if entry is None and len(self._peers) >= self.max_peers:
            self._peers.clear()
        self._peers[peer] = [now, 0]
        more = f" ({missed} {self.more} since its last line)" if missed else ""
        self.log.warning(self.line, peer, text, code, more)
