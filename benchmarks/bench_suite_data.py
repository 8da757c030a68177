"""Measure the bench_suite with ``opptune characterize`` and keep it as eval-mpet CSVs.

Starts a daemon and one agent per board (this machine's real kernels and the virtual boards
asked) in a temporary directory or --workdir, characterises each, waits for the re-measures of
points marked for interference, and writes
``OUT/bench_suite_<name>/data.csv`` per board (the shape ``opptune eval-mpet`` reads; see
daemon/mpet_answer.py:store_rows). Usage::

    python benchmarks/bench_suite_data.py --out data --local-size default --reps 3 \\
        --virtual rpi4 --virtual odroid-xu4

``--local-size ''`` leaves this machine out (only the virtual boards, each kernel modelled by
agent/virtual_workload.py: about 2 minutes at size small). Beside each data.csv, runs.csv
keeps every run of the board as stored (the marked ones too).

``--from-db A.db --from-db B.db --name xeon16`` measures nothing: it exports stores of earlier
runs, several sessions on one machine pooled into one store (each point's median over the
runs of every session), its platform column and folder named NAME.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _toml(path: Path, values: dict, tables: dict | None = None) -> Path:
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    for name, table in (tables or {}).items():
        lines += [f"[{name}]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


RUN_COLUMNS = ("workload", "cores", "rep", "time_s", "wall_s", "user_s", "sys_s", "marked",
               "received_utc", "agent")


def _pool_stores(stores: list[str], into: Path) -> None:
    """Pool the SQLite stores into ``into`` (the same machine measured in several sessions:
    one platform id, other agent ids and jobs). Each source is copied and brought to this
    version's schema first, and rows are copied by column name: stores of different versions
    order their columns differently (a migration appends), which a positional copy would mix
    up. The sources are left as they were."""
    import shutil
    import sqlite3
    from opptune.daemon.store import open_store
    copies = []
    for i, path in enumerate(stores):
        copy = into if i == 0 else into.with_name(f"{into.stem}-session{i}.db")
        shutil.copy(path, copy)
        open_store(str(copy)).close()
        copies.append(copy)
    con = sqlite3.connect(into)
    try:
        for i, other in enumerate(copies[1:]):
            con.execute(f"ATTACH DATABASE ? AS s{i}", (str(other),))
            for table in ("platforms", "workloads", "agents", "jobs", "runs"):
                cols = ", ".join(r[1] for r in con.execute(f"PRAGMA main.table_info({table})"))
                con.execute(f"INSERT OR IGNORE INTO {table} ({cols}) "
                            f"SELECT {cols} FROM s{i}.{table}")
            con.commit()
            con.execute(f"DETACH DATABASE s{i}")
    finally:
        con.close()
    for other in copies[1:]:
        other.unlink()


def _store_problem(path: str) -> str | None:
    """Why ``path`` is not an opptune SQLite store to export, or None."""
    import sqlite3
    if not Path(path).is_file():
        return "no such file"
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            con.execute("SELECT 1 FROM runs LIMIT 1").fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"not an opptune store (SQLite: {exc})"
    return None


def _write_runs_csv(db: Path, path: Path, platform_id: str) -> int:
    """Every run of one platform as stored, in the order received."""
    import csv
    import sqlite3
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT workload, cores, rep, time_s, wall_s, user_s, sys_s, marked, "
            "datetime(received, 'unixepoch'), agent FROM runs WHERE platform = ? "
            "ORDER BY received, msg_id", (platform_id,)).fetchall()
    finally:
        con.close()
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(RUN_COLUMNS)
        w.writerows(rows)
    return len(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data",
                    help="folder for OUT/bench_suite_<agent>/data.csv (default data)")
    ap.add_argument("--local-size", default="default",
                    help="size class on this machine (default default; '' = leave it out)")
    ap.add_argument("--reps", type=int, default=3,
                    help="repetitions per point on this machine (default 3)")
    ap.add_argument("--virtual", action="append", default=[], help="virtual board (repeatable)")
    ap.add_argument("--virtual-reps", type=int, default=1,
                    help="repetitions per point on the virtual boards, at size small (default 1)")
    ap.add_argument("--local-id", default="local",
                    help="agent id of this machine, names its output folder (default local)")
    ap.add_argument("--run-timeout", type=float, default=600.0,
                    help="the agent's limit on one run, s (default 600)")
    ap.add_argument("--workdir", metavar="DIR",
                    help="keep the daemon's store and the logs here (default: a new temporary "
                         "folder); export it later with --from-db DIR/opptune.db")
    ap.add_argument("--timeout", type=float, default=3600,
                    help="longest wait, s, for the re-measures of marked points after the "
                         "sweeps (default 3600)")
    ap.add_argument("--from-db", metavar="FILE", action="append", default=[],
                    help="measure nothing: export the store of an earlier run (a copy of it); "
                         "repeat it to pool sessions on the same machine")
    ap.add_argument("--name", help="with --from-db of one platform: its platform column and "
                                   "folder name (default: the board's and the agent's)")
    args = ap.parse_args(argv)
    # `timeout` (tools/suite_on_bare_machine.sh) ends this with SIGTERM: leave through the
    # finally below, which stops the daemon and agents it started, not around it
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    for path in args.from_db:
        if (why := _store_problem(path)) is not None:
            ap.error(f"--from-db {path}: {why} (give the opptune.db of a --workdir, or the "
                     "store.db tools/suite_on_bare_machine.sh copies out)")
    if args.name and not args.from_db:
        ap.error("--name goes with --from-db")
    from opptune.agent.virtual_board import make_tree
    from opptune.daemon.mpet_answer import (clock_queries, merge_answer, store_rows,
                                            write_store_csv)
    from opptune.daemon.client import query

    if args.workdir:
        tmp = Path(args.workdir)
        tmp.mkdir(parents=True, exist_ok=True)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="opptune-bench-data-"))
    ep = _endpoint()
    procs = []

    def spawn(module: str, cfg: Path, log: str) -> None:
        with open(tmp / log, "ab") as fh:
            procs.append(subprocess.Popen([sys.executable, "-m", module, "--config", str(cfg)],
                                          stdout=fh, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))

    agents = {}  # agent id -> (size, reps)
    if args.from_db:
        _pool_stores(args.from_db, tmp / "opptune.db")
        args.local_size, args.virtual = "", []
    try:
        spawn("opptune.daemon.service", _toml(tmp / "daemon.toml", {
            "bind": ep, "database": str(tmp / "opptune.db"), "heartbeat_s": 1.0,
            "agent_timeout_s": 30.0, "auto_sweep": False, "auto_recommend": False},
            {"sweep": {"size": "small", "reps": 1, "warmup": 0}}), "daemon.log")
        base = {"daemon": ep, "heartbeat_s": 1.0, "bench_kernels": ["all"],
                "run_timeout_s": args.run_timeout}
        if args.local_size:
            agents[args.local_id] = (args.local_size, args.reps)
            spawn("opptune.agent", _toml(tmp / "local.toml", {
                **base, "agent_id": args.local_id, "state_dir": str(tmp / "local"),
                # a bare lab machine (the device tool's) has no unprivileged user to run the
                # kernels as, and an agent running as root refuses to guess one
                **({"run_as": "root"} if os.geteuid() == 0 else {})}),
                "local.log")
        for board in args.virtual:
            agents[board] = ("small", args.virtual_reps)
            spawn("opptune.agent", _toml(tmp / f"{board}.toml", {
                **base, "agent_id": board, "state_dir": str(tmp / board),
                "virtual_board": board, "sysfs_root": make_tree(board, str(tmp / f"{board}-fs"))}),
                f"{board}.log")
        deadline = time.monotonic() + 60
        while True:
            try:
                st = query(ep, "status", timeout_s=1.0)
                if sum(a["alive"] for a in st["agents"]) >= len(agents):
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"agents did not come up; logs in {tmp}")
            time.sleep(0.2)
        for agent, (size, reps) in agents.items():
            started = time.time()
            subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "characterize",
                            "--daemon", ep, "--agent", agent, "--size", size, "--reps",
                            str(reps), "--wait", "--timeout", "30"], check=True)
            print(f"{agent}: {time.time() - started:.0f} s", file=sys.stderr)
        # --wait ends with the jobs; points marked for interference are measured again after
        # that (the daemon's re-measure): wait for those too, or the export lacks them
        deadline = time.monotonic() + args.timeout
        while agents:
            st = query(ep, "status", timeout_s=10)
            pending = [m for m in st.get("remeasure") or [] if m["agent"] in agents
                       and m["state"] in ("waiting", "measuring")]
            if not pending:
                break
            if time.monotonic() > deadline:
                print(f"exporting with {len(pending)} re-measure(s) still pending",
                      file=sys.stderr)
                break
            time.sleep(1.0)  # a polling interval, not synchronisation
        data = query(ep, "mpet_data", {}, timeout_s=30)
        # every clock characterize measured (min, mid, max per policy), not the highest alone
        for clock in clock_queries(data):
            merge_answer(data, query(ep, "mpet_data", {"clock": clock}, timeout_s=30))
        rows = store_rows(data)
        names = {pid: a for a, pid in data["agents"].items()}
        pids = sorted({r["platform_id"] for r in rows})
        if args.name and len(pids) != 1:
            raise SystemExit(f"--name names one platform; the store has {len(pids)}")
        for pid in pids:
            agent = args.name or names.get(pid, pid[:12])
            mine = [r for r in rows if r["platform_id"] == pid]
            if args.name:
                mine = [{**r, "platform": args.name} for r in mine]
            out = Path(args.out) / f"bench_suite_{agent.replace('-', '_')}"
            out.mkdir(parents=True, exist_ok=True)
            write_store_csv(out / "data.csv", mine)
            n = _write_runs_csv(tmp / "opptune.db", out / "runs.csv", pid)
            print(f"{out / 'data.csv'}: {len(mine)} rows; runs.csv: {n} runs", file=sys.stderr)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the daemon and agents it started are stopped; what was stored is "
              "in --workdir's opptune.db where one was given", file=sys.stderr)
        sys.exit(130)
