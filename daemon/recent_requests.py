"""The answers of recent change requests, so that a request sent again is answered, not carried
out twice.

An operator command whose change request (a sweep, a push, a tune session, ...) got no answer
in time asks once more about the same request (the ``again`` query, naming the request's
message id). The daemon answers it from here: the first one's answer, or nothing yet while the
first is under way (its answer then reaches the same client). Entries are keyed by (sender
identity, request id) and bounded in count, age and bytes of answers kept; an entry that
went is forgotten, and a request sent again after that is refused, not carried out.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

# queries that change something whatever their arguments
CHANGES = frozenset({"sweep", "characterize", "tune", "tune_stop", "cancel", "import",
                     "recover"})

MAX_REQUESTS = 1000  # operators send a few a minute; a script's loop a few per second
MAX_AGE_S = 600.0  # the client asks again after its --timeout (default 5 s)
MAX_BYTES = 16 << 20  # answers name jobs, a session or a key: bounded whatever they hold


def is_change(what: str, args: dict[str, Any]) -> bool:
    """Whether query ``what`` with ``args`` changes something (as the client's commands that
    say so when unanswered: recommend only with apply, keys only accept/reject/revoke)."""
    if what in CHANGES:
        return True
    if what == "recommend":
        return bool(args.get("apply"))
    if what == "keys":
        return str(args.get("action") or "list") != "list"
    return False


@dataclass
class Answer:
    """A remembered request: under way (``pending``), then its reply's data or its refusal
    (``error`` = (code, message))."""
    at: float
    pending: bool = True
    data: Any = None
    error: tuple[str, str] | None = None
    size: int = 0


class RecentRequests:
    """Answers by (identity, request id), oldest first; at most ``max_count`` of them, none
    older than ``max_age_s`` (since it was answered), ``max_bytes`` of answers in all."""

    def __init__(self, max_count: int = MAX_REQUESTS, max_age_s: float = MAX_AGE_S,
                 max_bytes: int = MAX_BYTES, clock: Callable[[], float] = time.monotonic):
        self.max_count, self.max_age_s, self.max_bytes = max_count, max_age_s, max_bytes
        self._clock = clock
        self._answers: OrderedDict[tuple[bytes, str], Answer] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._answers)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: tuple[bytes, str]) -> Answer | None:
        """The request's answer (pending while under way); None for one not remembered."""
        self._prune()
        return self._answers.get(key)

    def begin(self, key: tuple[bytes, str]) -> None:
        """Note a request being carried out now."""
        self._drop(key)
        self._answers[key] = Answer(self._clock())
        self._prune()

    def done(self, key: tuple[bytes, str], data: Any = None, size: int = 0,
             error: tuple[str, str] | None = None) -> None:
        """Keep the answer of a request begun: its reply's ``data`` (``size`` bytes encoded)
        or its refusal ``error``. A request forgotten meanwhile stays forgotten."""
        entry = self._answers.get(key)
        if entry is None:
            return
        self._bytes -= entry.size
        entry.pending, entry.data, entry.error = False, data, error
        entry.size = size if error is None else len(error[1])
        entry.at = self._clock()
        self._bytes += entry.size
        self._answers.move_to_end(key)  # aged from its answer: a retry comes after it
        self._prune()

    def _drop(self, key: tuple[bytes, str]) -> None:
        entry = self._answers.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size

    def _prune(self) -> None:
        oldest = self._clock() - self.max_age_s
        while self._answers:
            key, entry = next(iter(self._answers.items()))
            if (len(self._answers) <= self.max_count and self._bytes <= self.max_bytes
                    and entry.at >= oldest):
                return
            self._drop(key)
