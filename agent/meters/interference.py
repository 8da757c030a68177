"""What else used a run's cpus while it ran (all reads through SysFS).

Per cpu of the run's set, /proc/stat's busy time (user nice system irq softirq steal) and its
total (busy + idle + iowait) are read at start and at stop. What the workload used itself is
its child's rusage (user + sys; a virtual run reports the board's own ``board_cpu_s``
instead); the rest of the busy time went to others: the share of the set's capacity they used
is the run's ``interference``, with the load average at stop; a marked run adds how busy each
cpu was (the kernel keeps no per-cpu time of one process, so others' share per cpu is not
known; the offender's is) and the process that used the set most, with its share of the cpu it
ran on.

/proc/stat counts in ticks of 1/100 s: a run is marked when others used more than
``max_share`` of the capacity plus one tick per cpu, so that a tick charged the wrong way on a
short run does not mark it. The frequencies seen during the run are the thermal meter's
samples (record.thermal), throttling its judgement: both are part of :func:`mark_reason`.

The top offender: reading every /proc/PID/stat costs 2 ms for 114 processes on the 2-core
development machine (23 ms at a load of 10), 4 to 40 times the budget of a run's accounting
(which costs 0.06 ms; benchmarks/agent_overhead.py). So the processes are read at start only
where there are few (a board's fake tree; a real system has more kernel threads alone);
elsewhere, and only for a marked run, they are read twice over a short window after the run
and the busiest one on the set is named (a neighbour that stopped with the run is then "other
processes"); the marked runs on the same cpus in the next few seconds name the same one.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from ...shared.cpus import format_cpu_list, parse_cpu_list
from ..sysfs import SysFS

if TYPE_CHECKING:
    from ...shared.records import RunRecord
    from ..runspec import RunSpec

USER_HZ = 100  # /proc/stat unit; fixed at 100 in the kernel ABI
TICK_SLACK = 1  # ticks per cpu that /proc/stat's sampling may charge the wrong way
SCAN_AT_START_MAX_PROCS = 16  # read the processes before each run only when this few
WINDOW_S = 0.2  # after a marked run, how long the processes are watched for the offender
REUSE_S = 5.0  # a window's offender names the next marked runs on the same cpus this long


def cpu_ticks(fs: SysFS, cpus: set[int] | None = None) -> dict[int, tuple[int, int]]:
    """cpu -> (busy, total) ticks from /proc/stat, for the cpus in ``cpus`` (None: all)."""
    out = {}
    for line in fs.read_text("/proc/stat").splitlines():
        if not line.startswith("cpu") or line[3:4] == " ":
            continue
        name, _, rest = line.partition(" ")
        c = int(name[3:])
        if cpus is None or c in cpus:
            v = [int(x) for x in rest.split()[:8]]
            v += [0] * (8 - len(v))
            busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # guest time is inside user
            out[c] = (busy, busy + v[3] + v[4])
    return out


def proc_ticks(fs: SysFS) -> dict[int, tuple[str, int, int]]:
    """pid -> (name, user + system ticks, the cpu it last ran on), from /proc/PID/stat."""
    out = {}
    try:
        names = os.listdir(fs.path("/proc"))
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        text = fs.try_text(f"/proc/{name}/stat")
        if not text:
            continue
        # the name is in parentheses and may hold spaces and parentheses itself
        lp, rp = text.find("("), text.rfind(")")
        f = text[rp + 2:].split()
        try:
            out[int(name)] = (text[lp + 1:rp], int(f[11]) + int(f[12]), int(f[36]))
        except (ValueError, IndexError):
            continue
    return out


def allowed_cpus(fs: SysFS, pid: int) -> set[int] | None:
    """The cpus a process may run on (/proc/PID/status); None when unreadable."""
    text = fs.try_text(f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return set(parse_cpu_list(line.split(":", 1)[1]))
    return None


def top_offender(fs: SysFS, before: dict, after: dict, cpus: set[int],
                 skip: set[int]) -> tuple[int, str, int, int] | None:
    """(pid, name, ticks, cpu) of the process that most likely used the set most between two
    :func:`proc_ticks`. The kernel keeps no per-cpu time of a process, so its time is weighted
    by the evidence that it went to the set: the share of the cpus it may run on that are in
    the set, times (1 + the number of the two reads that saw it on the set) / 3. A process
    pinned there counts whole; one free to run on twice as many cpus, seen there once, a third.
    ``cpu``: where it last ran on the set."""
    best, best_w = None, 0.0
    for pid, (name, ticks, cpu) in after.items():
        if pid in skip or pid not in before or ticks <= before[pid][1]:
            continue
        used = ticks - before[pid][1]
        allowed = allowed_cpus(fs, pid)
        seen = (cpu in cpus) + (before[pid][2] in cpus)
        weight = (len(allowed & cpus) / len(allowed) if allowed else 1.0) * (1 + seen) / 3
        if used * weight > best_w:
            where = cpu if cpu in cpus else before[pid][2] if before[pid][2] in cpus \
                else min((allowed or cpus) & cpus)
            best, best_w = (pid, name, used, where), used * weight
    return best


def mark_reason(record: "RunRecord") -> str | None:
    """Why a run does not measure its configuration alone: interference and throttling."""
    reasons = []
    reason = (record.interference or {}).get("reason")
    if reason:
        reasons.append(reason)
    if record.throttled:
        why = (record.thermal or {}).get("reasons") or ["throttled"]
        reasons.append("throttled: " + "; ".join(why))
    return "; ".join(reasons) or None


class InterferenceMeter:
    """Meter plug point (runspec.py): the share of the run's cpu set that others used."""

    name = "interference"

    def __init__(self, sysfs_root: str | SysFS = "/", max_share: float = 0.05,
                 window_s: float = WINDOW_S):
        self.fs = sysfs_root if isinstance(sysfs_root, SysFS) else SysFS(sysfs_root)
        self.max_share = max_share
        self.window_s = window_s
        try:
            n = sum(1 for name in os.listdir(self.fs.path("/proc")) if name.isdigit())
        except OSError:
            n = 0
        self.scan_at_start = n <= SCAN_AT_START_MAX_PROCS
        self._wake = threading.Event()  # never set: paces the window after a marked run
        self._last: tuple[float, frozenset, dict[str, Any] | None] | None = None

    def start(self, spec: "RunSpec") -> None:
        self._cpus = set(spec.cpus)
        self._procs = proc_ticks(self.fs) if self.scan_at_start else None
        self._t0 = time.monotonic()
        self._ticks = cpu_ticks(self.fs, self._cpus)

    def stop(self, record: "RunRecord", ctx: dict[str, Any]) -> None:
        ticks = cpu_ticks(self.fs, self._cpus)
        wall = time.monotonic() - self._t0
        data = ctx.get("json") or {}
        if record.virtual and isinstance(data.get("board_cpu_s"), (int, float)):
            own_s = float(data["board_cpu_s"])  # the board's accounting, not this host's
        else:
            ru = ctx.get("rusage")
            own_s = float(ru.ru_utime + ru.ru_stime) if ru is not None else 0.0
        cpus = sorted(c for c in self._cpus if c in ticks and c in self._ticks)
        if not cpus:
            record.invalid["interference"] = (f"no counters of cpus "
                                              f"{format_cpu_list(self._cpus)} in /proc/stat")
            return
        busy = {c: ticks[c][0] - self._ticks[c][0] for c in cpus}
        total = {c: ticks[c][1] - self._ticks[c][1] for c in cpus}
        if sum(total.values()) <= 0:  # a tree whose counters stand still: the wall clock
            total = {c: wall * USER_HZ for c in cpus}
        capacity = sum(total.values())
        others = max(0.0, sum(busy.values()) - own_s * USER_HZ)
        share = others / capacity if capacity > 0 else 0.0
        out: dict[str, Any] = {"share": round(share, 4), "others_s": round(others / USER_HZ, 4)}
        load = self.fs.try_text("/proc/loadavg")
        if load:
            try:
                out["loadavg"] = [float(x) for x in load.split()[:3]]
            except ValueError:
                pass
        if others > self.max_share * capacity + TICK_SLACK * len(cpus):
            # how busy each cpu was, the workload included: which cpu was shared shows there
            # (a marked run only: a record of a clean run stays small for the ingest path)
            out["busy"] = {str(c): round(busy[c] / total[c], 4) if total[c] > 0 else 0.0
                           for c in cpus}
            top = self._offender(ctx.get("pid"), total)
            if top is not None:
                out["top"] = top
            out["reason"] = _reason(share, cpus, top)
        record.interference = out

    def _offender(self, child: int | None, total: dict[int, float]) -> dict[str, Any] | None:
        """The busiest other process on the set: over the run when the processes were read
        at its start, else over a window now; with its share of the cpu it ran on."""
        skip = {os.getpid(), child or 0}
        if self._procs is not None:
            before, after = self._procs, proc_ticks(self.fs)
            found = top_offender(self.fs, before, after, self._cpus, skip)
            span = total.get(found[3]) if found else None
        else:
            # on a busy board every run is marked: one window per few seconds, not per run
            if self._last and self._last[1] == frozenset(self._cpus) and \
                    time.monotonic() - self._last[0] < REUSE_S:
                return self._last[2]
            before, t0 = proc_ticks(self.fs), time.monotonic()
            self._wake.wait(self.window_s)
            after = proc_ticks(self.fs)
            found = top_offender(self.fs, before, after, self._cpus, skip)
            span = (time.monotonic() - t0) * USER_HZ
        top = None
        if found is not None:
            pid, name, ticks, cpu = found
            top = {"pid": pid, "name": name, "cpu": cpu,
                   "cpu_share": round(min(1.0, ticks / span), 4) if span else None,
                   "over": "run" if self._procs is not None else "window"}
        if self._procs is None:
            self._last = (time.monotonic(), frozenset(self._cpus), top)
        return top


def _reason(share: float, cpus: list[int], top: dict[str, Any] | None) -> str:
    who = f"pid {top['pid']} ({top['name']})" if top else "other processes"
    if len(cpus) == 1:
        return f"interference: {share * 100:.0f} % of cpu {cpus[0]} used by {who}"
    if top is None or top["cpu_share"] is None:
        return f"interference: {share * 100:.0f} % of cpus {format_cpu_list(cpus)} used by {who}"
    return (f"interference: {share * 100:.0f} % of cpus {format_cpu_list(cpus)}; {who} used "
            f"{top['cpu_share'] * 100:.0f} % of cpu {top['cpu']}")
