"""One readable line for a configuration applied to a running pid or unit (the agent's log,
the daemon's verdict note): what, where, and what its verification window measured."""

from __future__ import annotations

from typing import Any

from .cpus import policies_text


def target_name(t: dict[str, Any]) -> str:
    """'pid 42', the unit's name, or 'target' for a description without either."""
    return f"pid {t['pid']}" if "pid" in t else str(t.get("unit", "target"))


def _seconds(window: Any) -> str:
    """A measured window as the CLI says times ("2 s", "0.05 s"), not the agent's 4 decimals;
    shown as sent where it is not a number (an older or foreign agent)."""
    return f"{window:.3g} s" if type(window) in (int, float) else f"{window} s"


def measured_text(m: dict[str, Any]) -> str:
    """'applied to pid 42; 0.95 cpus busy over 2 s; at policy0 1500 MHz; 3.1 J'."""
    parts = [f"applied to {target_name(m.get('target') or {})}"]
    if m.get("cpus_busy") is not None:
        parts.append(f"{m['cpus_busy']:.2f} cpus busy over {_seconds(m.get('window_s'))}")
    if m.get("freq_mhz"):
        parts.append("at " + policies_text(m["freq_mhz"], lambda f: f"{f:g} MHz"))
    if m.get("energy_j") is not None:
        parts.append(f"{m['energy_j']:.4g} J")
    return "; ".join(parts)
