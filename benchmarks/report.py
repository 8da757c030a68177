"""`opptune report` on a large store: seconds until the page is written, and where they go.

Builds a store of ``--groups`` workload groups (workload x size x board) through the store's
API in a temporary directory: three virtual boards (rpi4: 4 cpus, no meter; odroid-xu4:
8 cpus with energy sensors; x86-2numa), each group swept at 1..4 cores (its board's cluster) at
three clocks with two repetitions, times from Amdahl's law with noise, energy where the board
has a meter, a stored fit for each group and a recommendation for every fourth. Then starts a real daemon on
that store and times ``opptune report`` (the installed command, as a user runs it): the
daemon's answer (the ``report`` query alone, and how long the daemon's loop was busy with it)
and the whole command.

    python3 benchmarks/report.py [--groups 771] [--max-groups N] [--json] [--keep DIR]

``--max-groups 0`` refits and draws every group, as the report did before it drew at most 20.
Measured 2026-11-26 23:38 (2 cores, load average 2.1-2.5, other sessions' work running),
771 groups, 16,448 runs: the command 26.9 and 28.5 s (23.6 / 24.9 to refit, draw and write),
20 groups drawn of 771 listed, 80 figures, 2.6 MiB; the query 0.32 / 0.35 s on the daemon's
loop. Every group refitted and drawn (the code before, in one process on the same answer,
23:08-23:36 at load 0.9-3.0): 1,648 s, 236 of them the refits, 1,409 the 3,084 figures (94 MiB).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BOARDS = ("rpi4", "odroid-xu4", "x86-2numa")
SIZES = ("small", "medium", "large")


def _board_facts(name: str, tmp: Path) -> dict[str, Any]:
    from opptune.agent.platform import discover
    from opptune.agent.virtual_board import make_tree
    from opptune.shared.config import AgentConfig
    root = make_tree(name, str(tmp / f"board-{name}"))
    return discover(AgentConfig(agent_id=f"bench-{name}", virtual_board=name, sysfs_root=root))


def _clocks(facts: dict[str, Any]) -> list[int]:
    """Three of the first cluster's clocks (kHz): lowest, middle, highest."""
    table = sorted(next(iter(((facts.get("cpufreq") or {}).get("frequencies_khz")
                              or {"": [1_000_000]}).values())))
    return sorted({table[0], table[len(table) // 2], table[-1]})


def build_store(db: Path, groups: int, tmp: Path, seed: int = 0) -> dict[str, int]:
    """Write ``groups`` swept groups into a new SQLite store at ``db``; the counts written."""
    from opptune.daemon.store import Group, ResultIn, open_store
    from opptune.shared.records import RunRecord
    rng = random.Random(seed)
    store = open_store(str(db))
    now = time.time()
    boards = []
    for name in BOARDS:
        facts = _board_facts(name, tmp)
        store.save_platform(facts["id"], facts, now)
        store.save_agent(f"bench-{name}", facts["id"], [], "bench", now)
        metered = bool((facts.get("energy") or {}).get("available"))
        boards.append((name, facts, _clocks(facts), metered))
    runs = recs = 0
    for i in range(groups):
        name, facts, clocks, metered = boards[i % len(boards)]
        agent, pid = f"bench-{name}", facts["id"]
        workload, size = f"w{i // (len(boards) * len(SIZES)):03d}", SIZES[i // len(boards) % 3]
        order = facts["cluster_sweep_orders"][0][:4]
        serial = rng.uniform(0.02, 0.4)
        t1 = rng.uniform(0.05, 2.0)
        job_id = f"job-{i:05d}"
        items = []
        for n in range(1, len(order) + 1):
            for khz in clocks:
                for rep in range(2):
                    t = t1 * (serial + (1 - serial) / n) * clocks[-1] / khz \
                        * rng.lognormvariate(0, 0.02)
                    rec = RunRecord(platform=pid, workload=workload, input=size, cores=n,
                                    cpus=order[:n], threads=n, rep=rep, freq_mhz=khz / 1000,
                                    time_s=t, wall_s=t, virtual=True, started_at=now,
                                    energy_j=t * (0.6 + 0.4 * n * (khz / clocks[-1]) ** 2)
                                    if metered else None,
                                    energy_source="hwmon:bench" if metered else None)
                    items.append(ResultIn(f"{job_id}-{len(items)}", agent, job_id, len(items),
                                          rec, rec.to_dict()))
        store.save_job(agent, {"job_id": job_id, "workload": workload, "size": size,
                               "points": [{"cpus": order[:n], "threads": n, "freq_khz": khz}
                                          for n in range(1, len(order) + 1) for khz in clocks],
                               "reps": 2, "warmup": 0}, now, state="done")
        store.insert_results(items, now)
        runs += len(items)
        # the daemon's fit as it stores one (what the page lists for the groups not drawn)
        store.save_fit(Group(pid, workload, size, ""), "amdahl",
                       {"serial": serial, "t1": t1}, {"cv_mape": rng.uniform(1, 8)}, [], now)
        if i % 4 == 0:
            best = len(order)
            store.save_recommendation({
                "config_id": f"cfg-{i:05d}", "agent": agent, "platform": pid,
                "workload": workload, "input": size, "variant": "", "cores": best,
                "cpus": order[:best], "threads": best, "freq_khz": clocks[-1], "predicted_time_s": 0.1,
                "predicted_lower_s": 0.09, "predicted_upper_s": 0.11, "state": "pushed"}, now)
            recs += 1
    store.close()
    return {"groups": groups, "runs": runs, "recommendations": recs}


def _daemon(tmp: Path, db: Path) -> tuple[subprocess.Popen, str]:
    """A real daemon on ``db`` (loopback, CURVE off) and its endpoint."""
    conf = tmp / "daemon.toml"
    conf.write_text('curve = "off"\nauto_sweep = false\n')
    ep = tmp / "endpoint"
    proc = subprocess.Popen([sys.executable, "-m", "opptune.daemon.service", "--config",
                             str(conf), "--bind", "tcp://127.0.0.1:0", "--database", str(db),
                             "--endpoint-file", str(ep), "--log-level", "WARNING"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "wb"))
    deadline = time.monotonic() + 60
    while not ep.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the daemon did not start: {(tmp / 'daemon.log').read_text()}")
        time.sleep(0.05)
    return proc, ep.read_text().strip()


def run(groups: int, max_groups: int | None, tmp: Path) -> dict[str, Any]:
    """Build the store, start the daemon, time the query and the command; the figures."""
    from opptune.daemon.client import query
    db = tmp / "opptune.db"
    t = time.perf_counter()
    built = build_store(db, groups, tmp)
    fig: dict[str, Any] = {**built, "store_s": round(time.perf_counter() - t, 2)}
    daemon, endpoint = _daemon(tmp, db)
    try:
        t = time.perf_counter()
        data = query(endpoint, "report", timeout_s=120)
        fig["query_s"] = round(time.perf_counter() - t, 3)  # the loop answers it itself
        fig["reply_points"] = len(data["points"])
        fig["stored_runs"] = sum(int(r["count"]) for r in data.get("runs") or [])
        cmd = [str(Path(sys.executable).with_name("opptune")), "report", "--daemon", endpoint,
               "--out", str(tmp / "site"), "--json", "--timeout", "120"]
        if max_groups is not None:
            cmd += ["--max-groups", str(max_groups)]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        fig["command_s"] = round(time.perf_counter() - t, 2)
        if proc.returncode:
            raise SystemExit(f"opptune report failed ({proc.returncode}): {proc.stderr}")
        summary = json.loads(proc.stdout)
        fig.update(drawn=len(summary["groups"]), listed=summary.get("listed"),
                   images=summary["images"], page_mib=round(summary["bytes"] / 2**20, 1),
                   build_s=summary["seconds"])
    finally:
        daemon.terminate()
        daemon.wait(30)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=771, help="workload groups in the store")
    ap.add_argument("--max-groups", type=int, help="passed to opptune report (default: its own)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="build in DIR (kept) instead of a temp dir")
    args = ap.parse_args()
    if args.groups < 1:
        ap.error("--groups must be >= 1")
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="opptune-report-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        load = [round(x, 1) for x in os.getloadavg()]
        fig = run(args.groups, args.max_groups, tmp)
        fig["load_before"], fig["load_after"] = load, [round(x, 1) for x in os.getloadavg()]
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(fig))
    else:
        print(f"store: {fig['groups']} groups, {fig['runs']} runs, {fig['recommendations']} "
              f"recommendations (written in {fig['store_s']} s)")
        print(f"report query: {fig['query_s']} s on the daemon's loop")
        print(f"opptune report: {fig['command_s']} s in all ({fig['build_s']} s to refit, "
              f"draw and write): {fig['drawn']} groups drawn of {fig['listed']} listed, "
              f"{fig['images']} figures, {fig['page_mib']} MiB; load average "
              f"{fig['load_before'][0]} before, {fig['load_after'][0]} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
