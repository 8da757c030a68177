"""Slow query answers off the service loop: a ``recommend`` fits its models (0.2-0.8 s), which
on the loop would hold up every agent's acks. The loop reads what the answer needs from the
store, hands a :class:`Deferred` to the worker thread, goes on ingesting, and sends the reply
when :meth:`QueryWorker.done` gives it back. The worker touches neither socket nor store.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("opptune.daemon.queries")


@dataclass
class Deferred:
    """An answer in two steps: ``compute()`` on the worker (pure computation), then
    ``finish(value)`` on the loop (store, registry and link allowed), giving the reply's data.
    Either may raise HandlerError, which the loop sends as the error reply."""
    compute: Callable[[], Any]
    finish: Callable[[Any], dict[str, Any]]


@dataclass
class Finished:
    identity: bytes
    ref: str
    deferred: Deferred
    key: Any = None  # a change request's key in the daemon's RecentRequests, else None
    value: Any = None
    error: BaseException | None = None


class QueryWorker:
    def __init__(self) -> None:
        self._todo: queue.Queue[Finished | None] = queue.Queue()
        self._done: queue.Queue[Finished] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="opptune-queries", daemon=True)
        self._thread.start()

    def submit(self, identity: bytes, ref: str, deferred: Deferred, key: Any = None) -> None:
        self._todo.put(Finished(identity, ref, deferred, key))

    def done(self) -> list[Finished]:
        """The answers computed since the last call (never waits)."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def _work(self) -> None:
        while (job := self._todo.get()) is not None:
            try:
                job.value = job.deferred.compute()
            except Exception as exc:  # handed back to the loop, which answers with it
                job.error = exc
            self._done.put(job)

    def stop(self) -> None:
        self._todo.put(None)
        self._thread.join(10)
