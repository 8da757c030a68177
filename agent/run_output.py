"""What the workload printed: its captured stdout and stderr (bounded), the last JSON line of
stdout, and the numbers of that line that go into the run record."""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO

from ..shared.records import RunRecord

MAX_STDOUT = 1 << 20  # the JSON line of a kernel is small; never slurp a runaway log
MAX_ERR_TEXT = 2000


def read_captured(out: BinaryIO, err: BinaryIO) -> tuple[str, str]:
    """(stdout, stderr) of a finished child from its capture files: the first MAX_STDOUT bytes
    of stdout, the last MAX_ERR_TEXT bytes of stderr (where the reason for a failure is)."""
    out.seek(0)
    stdout = out.read(MAX_STDOUT).decode("utf-8", "replace")
    err.seek(0, os.SEEK_END)
    start = max(0, err.tell() - MAX_ERR_TEXT)
    err.seek(start)
    tail = err.read()
    nl = tail.find(b"\n")
    if start and 0 <= nl < len(tail.rstrip()) - 1:
        # the tail of a chatty program began the failure's reason with a fragment ("a chatty
        # program\nnoise line 49947 ..."): it starts at the next whole line, marked as cut
        tail = b"[...]\n" + tail[nl + 1:]
    return stdout, tail.decode("utf-8", "replace").strip()


def last_json(stdout: str) -> tuple[dict[str, Any] | None, str | None]:
    """The last stdout line that is a JSON object; (None, reason) for a broken one."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line:
            continue
        if not line.startswith("{"):
            return None, None
        try:
            data = json.loads(line)
        except ValueError as exc:
            return None, f"{exc}: {line[:200]!r}"
        if not isinstance(data, dict):
            return None, "JSON line is not an object"
        return data, None
    return None, None


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= 0 \
            and v != float("inf"):
        return float(v)
    return None


def merge_json(rec: RunRecord, data: dict[str, Any] | None) -> None:
    """Take the workload's own numbers: timed region, per-thread stats, energy if it has one."""
    if not data:
        return
    t = _num(data.get("time_s"))
    if t is not None:
        rec.time_s = t
    elif "time_s" in data:
        rec.invalid["time_s"] = f"workload reported unusable time_s {data['time_s']!r}"
    stats = data.get("thread_stats")
    if isinstance(stats, list):
        rec.thread_stats = [s for s in stats if isinstance(s, dict)]
    e = _num(data.get("energy_j"))
    if e is not None:
        rec.energy_j = e
        rec.energy_source = str(data.get("energy_source") or "workload")
        rec.invalid.pop("energy_j", None)
    mpet = data.get("mpet")  # a bench_suite kernel's MPET parameters (accounting.py)
    if isinstance(mpet, dict):
        rec.extra["mpet"] = mpet
    for key in ("checked", "check_value", "pyperf"):  # pyperf: agent/pyperf_workload.py
        if key in data:
            rec.extra[key] = data[key]
    if data.get("checked") is True and data.get("check_ok") is False:
        rec.ok, rec.error = False, "workload result check failed"
