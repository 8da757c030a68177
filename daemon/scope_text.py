"""The one-line refusals of an ``--agent`` or ``--workload`` that names nothing the daemon
has, shared by ``opptune report`` and ``opptune export`` so both answer alike (exit 2)."""

from __future__ import annotations

from collections.abc import Iterable


def some(names: Iterable[str], most: int = 8) -> str:
    """``a, b, c`` or ``a, b, ... (N in all)``: a list a line can hold."""
    names = list(names)
    if not names:
        return "none"
    more = len(names) - most
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if more > 0 else "")


def unknown_agent(agent: str, known: Iterable[str]) -> str:
    return (f"--agent {agent}: the daemon knows no such agent; known: {some(sorted(known))} "
            "('opptune status' lists them)")


def unknown_workload(workload: str, measured: Iterable[str], where: str = "") -> str:
    """``where``: the scope searched (" on agent a's board"), empty for the whole daemon."""
    names = sorted(measured)
    return (f"--workload {workload}: no runs of it{where}"
            + (f"; measured: {some(names)}" if names else "; nothing is measured there yet"))
