"""Human-readable rendering of the daemon's status reply (``opptune status``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def params_text(model: Any, params: dict[str, Any] | None) -> str:
    """A fit's numeric parameters as ``name=value, ...``; a combination (``combo``) by its
    members' weights only (its members' own parameters would fill a screen)."""
    shown = {k: v for k, v in (params or {}).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if model == "combo":
        shown = {k[2:]: v for k, v in shown.items() if k.startswith("w.")}
    return ", ".join(f"{k}={v:.3g}" for k, v in shown.items())


def print_status(data: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    d = data.get("daemon", {})
    console.print(f"daemon {d.get('instance', '?')} at {d.get('endpoint', '?')}, "
                  f"up {_fmt(d.get('uptime_s'), '.0f')} s, database {d.get('database', '?')}")

    t = Table(title="agents")
    for col in ("agent", "platform", "alive", "last seen (s)", "outbox"):
        t.add_column(col)
    for a in data.get("agents", []):
        t.add_row(str(a.get("id")), str(a.get("platform")), "yes" if a.get("alive") else "no",
                  _fmt(a.get("last_seen_s"), ".1f"), _fmt(a.get("outbox")))
    console.print(t)

    t = Table(title="runs")
    for col in ("agent", "workload", "input", "runs"):
        t.add_column(col)
    for r in data.get("runs", []):
        t.add_row(str(r.get("agent")), str(r.get("workload")), str(r.get("input")),
                  _fmt(r.get("count")))
    console.print(t)

    t = Table(title="jobs")
    for col in ("job", "agent", "workload", "received/expected", "state"):
        t.add_column(col)
    for j in data.get("jobs", []):
        t.add_row(str(j.get("job_id"))[:12], str(j.get("agent")), str(j.get("workload")),
                  f"{j.get('received')}/{j.get('expected')}", str(j.get("state")))
    console.print(t)

    t = Table(title="fits")
    for col in ("group", "model", "parameters", "MAPE %", "runners-up"):
        t.add_column(col)
    for f in data.get("fits", []):
        params = params_text(f.get("model"), f.get("params"))
        runners = ", ".join(str(r.get("model", r)) if isinstance(r, dict) else str(r)
                            for r in (f.get("runners_up") or []))
        t.add_row(_group(f.get("group")), str(f.get("model")), params,
                  _fmt((f.get("quality") or {}).get("mape"), ".2f"), runners)
    console.print(t)

    t = Table(title="recommendations")
    for col in ("group", "cores", "cpus", "freq kHz", "predicted s", "state", "verified s"):
        t.add_column(col)
    for r in data.get("recommendations", []):
        t.add_row(_group(r.get("group")), _fmt(r.get("cores")),
                  ",".join(map(str, r.get("cpus") or [])), _fmt(r.get("freq_khz")),
                  _fmt(r.get("predicted_time_s")), str(r.get("state")) +
                  (f" ({r['error']})" if r.get("error") else ""),
                  _fmt(r.get("verified_time_s")))
    console.print(t)


def _group(group: Any) -> str:
    if isinstance(group, dict):
        return "/".join(str(group.get(k, "")) for k in ("platform", "workload", "input")
                        if group.get(k) not in (None, ""))
    if isinstance(group, (list, tuple)):
        return "/".join(str(g) for g in group if g not in (None, ""))
    return str(group)
