"""What a killed agent's run left running: the workload's own children.

The workload's child dies with the agent (child.py: parent-death signal), but its children do
not (a shell script's commands, the benchmark a pyperf wrapper started): the kernel sends that
signal to the child alone. Every run carries a token of its own in its environment, which its
descendants inherit, and the token of the run under way is kept in the state directory until
the run is reaped. An agent starting on that directory kills every process still carrying the
token. A token, not a pid or process group: those are reused by unrelated processes once the
leftovers end. A process that cleared its environment escapes this.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal

from .private import open_private

log = logging.getLogger("opptune.agent.leftover")

FILENAME = "run-under-way"   # in state_dir: the token of the run under way
ENV = "OPPTUNE_RUN_TOKEN"    # the variable each run's processes carry
ROUNDS = 5                   # scans while the leftovers may still be forking


def new_token() -> str:
    return secrets.token_hex(16)


class UnderWay:
    """The token of the run under way, kept in ``state_dir`` (None: not kept)."""

    def __init__(self, state_dir: str | None):
        self.path = os.path.join(state_dir, FILENAME) if state_dir else None

    def begin(self, token: str) -> None:
        """Kept before the run starts (no fsync: a power cut leaves no process behind). A
        record that cannot be written (disk full) costs only this clean-up, never the run."""
        if self.path is not None:
            try:
                with open_private(self.path) as fh:
                    fh.write(token)
            except OSError as exc:
                log.warning("cannot keep the run under way in %s: %s", self.path, exc)

    def end(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def carriers(token: str, proc: str = "/proc") -> list[int]:
    """The pids whose environment holds ``ENV=token``."""
    needle = f"{ENV}={token}".encode() + b"\0"
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, name, "environ"), "rb") as fh:
                if needle in fh.read() + b"\0":
                    found.append(int(name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


def kill_leftovers(state_dir: str) -> list[int]:
    """SIGKILL every process of the run a previous agent left under way; returns their pids
    (empty when it ended cleanly). The record is removed."""
    path = os.path.join(state_dir, FILENAME)
    try:
        with open(path) as fh:
            token = fh.read().strip()
    except FileNotFoundError:
        return []
    killed: list[int] = []
    for _ in range(ROUNDS if token else 0):
        pids = [p for p in carriers(token) if p not in killed]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    os.unlink(path)
    return killed
