"""What one run is (``RunSpec``) and the two plug points that act around it.

* a **knob** has ``apply(spec) -> dict`` (record fields it set, e.g. ``freq_mhz`` and
  ``freq_observed_mhz``; raise to refuse the point) and ``restore()``; knobs are applied once per
  point, before its warmups, in list order, and restored when the agent has no work left
  (``Runner.rest``) and when it stops. A knob may have ``rest(specs)``: the board at rest under
  the standing configurations ``specs`` (oldest first), set without passing through the
  original.
* a **meter** has ``start(spec)`` (just before the child starts) and ``stop(record, ctx)`` (just
  after it was reaped; ``ctx`` holds ``pid``, ``rusage``, ``wall_s``, ``json``). A meter fills
  record fields or calls ``shared.records.mark_invalid``. A meter that raises marks its own
  fields invalid; the run still counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..shared.records import RunRecord


@dataclass
class RunSpec:
    """One point of a sweep (or a pushed config)."""
    workload: str
    size: str
    cpus: list[int]
    threads: int
    freq_khz: int | None = None
    variant: str = ""

    @classmethod
    def of_config(cls, body: dict[str, Any]) -> RunSpec:
        """The run a pushed config's body describes (one applied now, or kept in force)."""
        return cls(body["workload"], body["size"], list(body["cpus"]), body["threads"],
                   body.get("freq_khz"), variant=str(body.get("variant", "")))


class Knob(Protocol):
    name: str

    def apply(self, spec: RunSpec) -> dict[str, Any]: ...

    def restore(self) -> None: ...


class Meter(Protocol):
    name: str

    def start(self, spec: RunSpec) -> None: ...

    def stop(self, record: RunRecord, ctx: dict[str, Any]) -> None: ...
