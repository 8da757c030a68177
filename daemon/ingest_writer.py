"""The ingest writer: commits the loop's validated batches of results on a thread of its own.

The service loop receives, decodes and validates; the writer inserts and commits on a database
connection of its own. The database's work runs with the GIL released, so the loop takes in the
next batch meanwhile (on a second core where there is one). A batch comes back from
:meth:`IngestWriter.done` once committed, or with the error that failed it: the loop acks only
what came back committed (acked means stored); nothing of a failed batch is acked, and the
agents send it again.

Without a connection of its own (a store that a second connection cannot share, such as an
in-memory SQLite database, or before :meth:`IngestWriter.start`) a batch is committed by the
caller's thread during :meth:`IngestWriter.submit`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from typing import Callable

from .store import ResultIn, Store

log = logging.getLogger("opptune.daemon.ingest")


class Batch:
    """One batch of validated results and what the loop does once it is committed: the ids to
    ack per agent (identity) and the jobs it touched. ``error``: why its commit failed
    (None: committed)."""

    __slots__ = ("results", "acks", "touched", "now", "error")

    def __init__(self, results: list[ResultIn], acks: dict[bytes, list[str]],
                 touched: dict[str, tuple[int, str]], now: float):
        self.results = results
        self.acks = acks
        self.touched = touched
        self.now = now
        self.error: Exception | None = None


class IngestWriter:
    """Commits batches in the order submitted, ``depth`` at most submitted and not committed
    (the one being committed included); past it ``submit`` waits: the loop stops reading and
    the agents' windows fill."""

    def __init__(self, store: Store, open_store: Callable[[], Store | None], depth: int = 2):
        """``store``: the loop's store (inline commits); ``open_store``: opens the writer's
        own connection to the same database, or returns None where there cannot be one."""
        self.store = store
        self._open_store = open_store
        self.depth = depth
        self._cond = threading.Condition()
        self._queue: deque[Batch] = deque()
        self._done: deque[Batch] = deque()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._own: Store | None = None
        self._wake: int | None = None  # eventfd: readable once a batch is done

    def start(self) -> "IngestWriter":
        """Open the writer's connection and start its thread; inline commits where no second
        connection can be opened (said in the log)."""
        try:
            self._own = self._open_store()
        except Exception as exc:
            log.warning("ingest writer: cannot open a second connection (%s); results are "
                        "committed by the loop", exc)
            self._own = None
        if self._own is not None:
            self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="opptune-ingest-writer",
                                            daemon=True)
            self._thread.start()
        return self

    def fileno(self) -> int | None:
        """A file descriptor that turns readable when a batch is done (for the loop's poll);
        None while batches are committed inline."""
        return self._wake

    def submit(self, batch: Batch) -> None:
        if self._thread is None:
            self._commit(self.store, batch)
            self._done.append(batch)
            return
        with self._cond:
            self._cond.wait_for(lambda: len(self._queue) < self.depth or self._stopping)
            self._queue.append(batch)
            self._cond.notify_all()

    def done(self) -> list[Batch]:
        """The batches finished since the last call, in the order submitted."""
        if self._wake is not None:
            try:  # reset before draining: a batch done after this wakes the next poll
                os.eventfd_read(self._wake)
            except BlockingIOError:
                pass
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def stop(self, timeout_s: float = 30.0) -> None:
        """Commit what is queued, then stop the thread and close its connection (the caller
        then takes the last batches from :meth:`done`)."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread.join(timeout_s)
        if thread.is_alive():
            log.error("ingest writer: still committing after %.0f s; not waiting", timeout_s)
            return
        self._thread = None
        if self._wake is not None:
            os.close(self._wake)
            self._wake = None
        own, self._own = self._own, None
        if own is not None:
            try:
                own.close()
            except Exception as exc:  # closing must never fail a shutdown
                log.warning("ingest writer: closing its connection: %s", exc)

    def _run(self) -> None:
        store = self._own
        assert store is not None
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue:
                    return  # stopping, and everything queued is committed
                batch = self._queue[0]
            self._commit(store, batch)
            with self._cond:
                self._queue.popleft()
                self._done.append(batch)
                self._cond.notify_all()
            os.eventfd_write(self._wake, 1)

    @staticmethod
    def _commit(store: Store, batch: Batch) -> None:
        # Tried twice: a connection the server dropped while the writer waited fails only the
        # first statement after (psycopg learns of the drop by using it; the store then
        # reconnects), and a batch is stored idempotently, so a second try cannot store
        # anything twice, even after a commit whose outcome the failure hid.
        for _ in range(2):
            try:
                store.insert_results(batch.results, batch.now)
                batch.error = None
                return
            except Exception as exc:  # reported with the batch: none of it is acked
                batch.error = exc


__all__ = ["Batch", "IngestWriter"]

