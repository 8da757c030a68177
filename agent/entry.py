"""The ``opptune-agent`` console script (and ``python -m opptune.agent``).

It takes SIGINT, SIGTERM and SIGHUP before the agent's modules load. Python's own SIGINT
handler raised KeyboardInterrupt wherever the agent then was (a traceback, the start's
changes to the board left as they were), SIGTERM's default killed it outright until the agent
installed its handler once started, and SIGHUP (a closed terminal or ssh session) killed it
at any time, the board's knobs as a sweep had left them. A stop asked for while the agent
loads or starts is noted here and acted on where the agent can stop cleanly (agent/cli.py).
A SIGHUP that nohup ignores stays ignored. This module imports nothing of the agent before
that.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable


class StopRequest:
    """The stop that SIGINT, SIGTERM or SIGHUP asks for: ``event`` set at the first one, then
    each callback of :meth:`then` (the running agent's: abort the run, wake the link) called."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._then: list[Callable[[int], None]] = []
        self.installed = False

    def install(self) -> None:
        """Take SIGINT and SIGTERM (once; an ignored SIGINT too, as the running agent did),
        and SIGHUP (a closed terminal or ssh session) unless ignored (nohup)."""
        if not self.installed:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, self._on_signal)
            if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
                signal.signal(signal.SIGHUP, self._on_signal)
            self.installed = True

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()
        for call in list(self._then):
            call(signum)

    def then(self, call: Callable[[int], None]) -> None:
        """Call ``call(signum)`` at each signal from now on."""
        self._then.append(call)

    def is_set(self) -> bool:
        return self.event.is_set()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "stop"


def main(argv: list[str] | None = None) -> int:
    stop = StopRequest()
    stop.install()
    from .cli import main as agent_main  # a signal meanwhile is noted, acted on once loaded
    return agent_main(argv, stop)


if __name__ == "__main__":
    sys.exit(main())
