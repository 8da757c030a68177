"""Ingest throughput of opptune-daemon: results/s stored and acknowledged.

Starts the daemon as a real subprocess on a fresh SQLite file and several simulated agent
processes. Each agent says hello, then streams pre-encoded ``result`` messages through a DEALER
socket keeping at most ``--window`` unacknowledged (as an agent's outbox would), and counts the
acks. Throughput is the total acked over the span from the first send to the last ack. At the end
the stored row count is checked and the daemon's resident memory (current and peak) is read
from /proc. ``--full-records`` sends records as a board with every meter fills them (perf
counters, energy, frequencies, per-thread times): 1.1 kB per message against 0.28 kB.

``--curve`` runs the link encrypted and authenticated (the agents' keys accepted beforehand).

    python3 benchmarks/ingest.py --agents 4 --results 50000 [--full-records] [--curve]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq

from opptune.shared import protocol as P
from opptune.shared.records import RunRecord


def make_messages(agent_id: str, n: int, full: bool = False) -> list[bytes]:
    """``n`` encoded result messages. ``full``: records as a board with every meter sends them
    (14 perf counters plus derived ratios, energy, frequencies, per-thread times, context
    switches); otherwise the fields a board without counters or sensors fills."""
    from opptune.agent.meters.perf import DERIVED, EVENTS
    out = []
    for i in range(n):
        cores = 1 + i % 8
        rec = RunRecord(platform="bench-plat", workload="bench", input="s", cores=cores,
                        cpus=list(range(cores)), threads=cores, rep=i // 8,
                        time_s=1.0 / cores + 0.1, wall_s=1.0 / cores + 0.11, user_s=0.9,
                        sys_s=0.01, virtual=True, started_at=time.time())
        if full:
            rec.freq_mhz = 1800.0
            rec.freq_observed_mhz = {"policy0": 1800.0, "policy4": 1800.0}
            rec.counters = {name: 1.2345e9 + i for name in EVENTS}
            rec.counters.update({name: 0.8123 for name in DERIVED})
            rec.energy_j, rec.energy_source = 3.21 + i % 7, "rapl:package-0"
            rec.ctx_voluntary, rec.ctx_involuntary, rec.max_rss_kb = 12, 3, 20480
            rec.thread_stats = [{"busy_s": 0.5, "wait_s": 0.01} for _ in range(cores)]
        # of = n + 1: the job stays open, so this measures ingest, not the fit that a
        # completed job triggers.
        body = {"job_id": f"job-{agent_id}", "seq": i, "of": n + 1, "record": rec.to_dict()}
        out.append(P.encode(P.make("result", agent_id, body)))
    return out


def agent_proc(endpoint: str, agent_id: str, n: int, window: int, full: bool, ready, go,
               results, curve: tuple[str, str, str] | None = None) -> None:
    msgs = make_messages(agent_id, n, full)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (
            k.encode() for k in curve)
    sock.setsockopt(zmq.IDENTITY, agent_id.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send(P.encode(P.make("hello", agent_id, {
        "platform": {"id": "bench-plat", "cpus_online": list(range(8))},
        "workloads": ["bench"], "agent_version": "bench"})))
    while True:  # the welcome heartbeat: the hello is registered before any result
        if P.decode(sock.recv())["type"] == "heartbeat":
            break
    ready.set()
    go.wait()
    t0 = time.perf_counter()
    sent = acked = 0
    while acked < n:
        while sent < n and sent - acked < window:
            sock.send(msgs[sent], copy=False)
            sent += 1
        if not sock.poll(10_000):
            break
        while True:
            try:
                data = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            msg = P.decode(data)
            if msg["type"] == "ack":
                acked += len(msg["body"]["ids"])
            elif msg["type"] == "error":
                print(f"{agent_id}: error {msg['body']}", file=sys.stderr)
    results.put((agent_id, t0, time.perf_counter(), acked))
    sock.close(0)
    ctx.term()


def proc_mem_kb(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pressure_pct(resource: str) -> float | None:
    """Share of the last 60 s in which some task waited for ``resource`` (Linux PSI), or None
    without PSI. Tells a slow run on a busy machine from a slow daemon."""
    try:
        with open(f"/proc/pressure/{resource}") as fh:
            return float(fh.readline().split()[2].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def issue_jobs(db: Path, agents: int) -> None:
    """Store one open job per agent before the daemon starts: the daemon stores results only
    for jobs it issued to their agent (as after a restart with jobs in flight)."""
    from opptune.daemon.store import open_store
    store = open_store(str(db))
    for i in range(agents):
        store.save_job(f"bench-agent-{i}", {"job_id": f"job-bench-agent-{i}", "workload": "bench",
                                            "size": "s", "points": [{"cpus": [0], "threads": 1}], "reps": 1,
                                            "warmup": 0}, time.time())
    store.close()


def accept_keys(keys: Path, agents: int) -> list[tuple[str, str, str]]:
    """Make the daemon's key pair and one accepted key per agent, as an operator would with
    'opptune keys accept'; each agent's (server public, public, secret)."""
    from opptune.daemon.keyring import KeyRing
    from opptune.shared.curve import ensure_keypair
    server = ensure_keypair(keys / "server.key")
    ring = KeyRing(keys / "agents.json", ensure_keypair(keys / "operator.key")[0])
    out = []
    for i in range(agents):
        public, secret = (k.decode() for k in zmq.curve_keypair())
        try:
            ring.check(public, f"bench-agent-{i}", "hello")
        except Exception:  # pending: accept it
            ring.decide("accept", ring.keys[public]["id"])
        out.append((server[0], public, secret))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--results", type=int, default=50_000, help="per agent")
    ap.add_argument("--window", type=int, default=2000, help="unacked results per agent")
    ap.add_argument("--full-records", action="store_true",
                    help="records with every meter's fields (counters, energy, ...)")
    ap.add_argument("--bind", default="tcp://127.0.0.1:0")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--profile", help="run the daemon under cProfile, writing this file")
    ap.add_argument("--curve", action="store_true", help="CURVE on the link")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="opptune-ingest-"))
    db, ep_file = tmp / "ingest.db", tmp / "endpoint"
    prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
    issue_jobs(db, args.agents)
    conf = tmp / "daemon.toml"
    conf.write_text(f'curve = "{"on" if args.curve else "off"}"\nkeys_dir = "{tmp / "keys"}"\n')
    agent_keys = accept_keys(tmp / "keys", args.agents) if args.curve else [None] * args.agents
    daemon = subprocess.Popen([sys.executable, *prof, "-m", "opptune.daemon.service",
                               "--config", str(conf),
                               "--bind", args.bind, "--database", str(db),
                               "--endpoint-file", str(ep_file), "--log-level", "WARNING"])
    try:
        deadline = time.monotonic() + 30
        while not ep_file.exists():  # wait for the daemon process to come up
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("daemon did not start")
            time.sleep(0.05)
        endpoint = ep_file.read_text().strip()
        rss_idle = proc_mem_kb(daemon.pid)
        mpc = mp.get_context("fork")
        go, results = mpc.Event(), mpc.Queue()
        readies, procs = [], []
        for i in range(args.agents):
            ready = mpc.Event()
            p = mpc.Process(target=agent_proc, args=(endpoint, f"bench-agent-{i}", args.results,
                                                     args.window, args.full_records, ready, go,
                                                     results, agent_keys[i]))
            p.start()
            readies.append(ready)
            procs.append(p)
        for r in readies:
            r.wait(120)
        cpu0 = proc_cpu_s(daemon.pid)
        go.set()
        got = [results.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(30)
        start = min(g[1] for g in got)
        end = max(g[2] for g in got)
        acked = sum(g[3] for g in got)
        total = args.agents * args.results
        mem = proc_mem_kb(daemon.pid)
        cpu = proc_cpu_s(daemon.pid) - cpu0
        stored = sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        out = {"agents": args.agents, "full_records": args.full_records, "curve": args.curve,
               "results": total,
               "acked": acked, "stored": stored,
               "seconds": round(end - start, 3), "results_per_s": round(acked / (end - start)),
               "daemon_cpu_s": round(cpu, 2),
               "results_per_daemon_cpu_s": round(acked / cpu) if cpu else None,
               "load_avg_1min": os.getloadavg()[0],
               "cpu_pressure_pct_60s": pressure_pct("cpu"),
               "io_pressure_pct_60s": pressure_pct("io"),
               "daemon_rss_idle_mib": round(rss_idle["VmRSS"] / 1024, 1),
               "daemon_rss_mib": round(mem["VmRSS"] / 1024, 1),
               "daemon_rss_peak_mib": round(mem["VmHWM"] / 1024, 1),
               "db_mib": round(sum(f.stat().st_size for f in tmp.glob("ingest.db*")) / 2**20, 1),
               "endpoint": endpoint}
        if args.json:
            print(json.dumps(out))
        else:
            for k, v in out.items():
                print(f"{k:>22}: {v}")
        return 0 if acked == total == stored else 1
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
