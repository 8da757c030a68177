"""Agent footprint when idle and connected: resident memory and CPU share.

Starts a real daemon and a real agent (separate processes, loopback), waits until the agent is
registered, then samples the agent process for ``--seconds``. Targets (issue 2): RSS <= 40 MB,
CPU <= 0.5 % of one core.

    python benchmarks/agent_idle.py [--seconds 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procs import Cluster  # noqa: E402

RSS_TARGET_MB = 40.0
CPU_TARGET_PCT = 0.5


def measure(seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(Path(tmp), auto_sweep=False)
        # Production heartbeat interval: the idle cost is what a deployed agent pays.
        c.agent_toml.write_text(c.agent_toml.read_text().replace("heartbeat_s = 0.5",
                                                                 "heartbeat_s = 2.0"))
        c.start_daemon()
        c.start_agent()
        try:
            c.wait_for(lambda s: any(a.get("alive") for a in s.get("agents") or []),
                       timeout=30, what="the agent registered")
            proc = psutil.Process(c.agent.pid)
            t0 = proc.cpu_times()
            w0 = time.monotonic()
            rss = []
            while time.monotonic() - w0 < seconds:
                rss.append(proc.memory_info().rss)
                time.sleep(0.5)  # sampling interval
            t1 = proc.cpu_times()
            wall = time.monotonic() - w0
            alive = c.status()
        finally:
            c.stop()
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    return {
        "seconds": round(wall, 2),
        "rss_mb_max": round(max(rss) / 2**20, 2),
        "rss_mb_median": round(sorted(rss)[len(rss) // 2] / 2**20, 2),
        "cpu_pct_of_one_core": round(100 * cpu / wall, 3),
        "still_registered": bool(alive and any(a.get("alive") for a in alive.get("agents", []))),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = measure(args.seconds)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"agent idle over {res['seconds']} s: RSS max {res['rss_mb_max']} MB "
              f"(target <= {RSS_TARGET_MB:g}), CPU {res['cpu_pct_of_one_core']} % of one core "
              f"(target <= {CPU_TARGET_PCT:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
