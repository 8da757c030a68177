"""Interference check of issue 22: ``opptune demo --workload pi_integrate`` with a neighbour.

Three figures, each on this machine (a real busy loop ``taskset -c 1 sh -c 'while :; do :; done'``,
when it has 2 or more cpus) and on the virtual board rpi4 (a neighbour injected on cpu 1 with
agent/virtual_board.update_spec before the demo's processes start):

The virtual demos use size large (0.2-1.5 s runs): /proc/stat's 1/100 s ticks and the meter's
slack of one tick per cpu leave the 13-40 ms runs of size small at 3 and 4 cores unmarked.

(a) busy neighbour on cpu 1 for the whole demo: the share of the affected runs (their cpu set
    holds cpu 1) that are marked (target >= 95 %), the unaffected runs marked (target 0), and
    whether the demo's output names the interference and the offender;
(b) quiet demos (``--quiet-demos``, default 3): the runs marked (target 0);
(c) a neighbour that stops half-way through the demo (once the sweep's runs are stored, before
    the re-measures and the verification): the points measured again, and the recommendation
    beside the quiet demos' (target: the same cores, resting on clean runs).

Each demo is the real one (daemon and agent processes, daemon/demo.py) in a fresh directory
under ``--dir``; the daemon's re-measure backoff is shortened to ``--backoff`` seconds (the
default 10,30,90 s only makes the busy demo wait longer: which runs are marked does not depend
on it). Quiet figures on a machine that other work loads are not quiet ones: runs that share
their cpus with that work are marked, rightly.

    python benchmarks/interference.py [--board both|real|virtual] [--quiet-demos 3]
                                      [--backoff 3,6,12] [--dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

from opptune.agent.virtual_board import update_spec
from opptune.daemon import demo as demo_mod
from opptune.daemon.cli import build_parser

CPU = 1  # the neighbour's cpu
VIRTUAL_BOARD = "rpi4"
VIRTUAL_NEIGHBOUR = {"cpus": [CPU], "share": 0.5, "name": "sh", "pid": 4711}
BUSY_LOOP = ["taskset", "-c", str(CPU), "sh", "-c", "while :; do :; done"]


class Neighbour:
    """The busy process of one demo: a real loop pinned to ``CPU``, or the virtual board's
    injected one (the tree is known once the demo made it)."""

    def __init__(self, virtual: bool):
        self.virtual = virtual
        self.proc: subprocess.Popen | None = None
        self.root: Path | None = None

    def start(self) -> None:
        if not self.virtual:
            self.proc = subprocess.Popen(BUSY_LOOP, start_new_session=True,
                                         stdin=subprocess.DEVNULL)

    def on_tree(self, root: Path) -> None:
        self.root = root
        if self.virtual:
            update_spec(str(root), neighbour=VIRTUAL_NEIGHBOUR)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.virtual and self.root is not None:
            update_spec(str(self.root), neighbour=None)


def _rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # the daemon has not made the tables yet
        return []
    finally:
        con.close()


def _stop_half_way(db: Path, neighbour: Neighbour, done: threading.Event) -> None:
    """Stop the neighbour once the sweep's runs are stored: half-way through the demo, whose
    re-measures and verification follow. (Half-way through the sweep would stop it, on a
    2-cpu machine, before the first run it shares a cpu with: the 1-core runs come first.)"""
    while not done.is_set():
        jobs = _rows(db, "SELECT job_id, expected FROM jobs ORDER BY created LIMIT 1")
        stored = _rows(db, "SELECT COUNT(*) FROM runs WHERE job_id = ?", (jobs[0][0],)) \
            if jobs else []
        if jobs and stored and stored[0][0] >= jobs[0][1]:
            neighbour.stop()
            return
        done.wait(0.2)  # a polling interval of the benchmark, not a test's synchronisation


def run_demo(run_dir: Path, virtual: bool, backoff: list[float],
             neighbour: str | None = None) -> dict[str, Any]:
    """One demo; ``neighbour``: None, "whole" or "half" (stops half-way). Its figures."""
    argv = ["demo", "--dir", str(run_dir), "--workload", "pi_integrate", "--no-progress"]
    if virtual:
        # size large: /proc/stat counts 1/100 s ticks and a run is marked only beyond one tick
        # per cpu of slack (agent/meters/interference.py), which the 13-100 ms runs of size
        # small on this board stay within at 3 and 4 cores
        argv += ["--virtual-board", VIRTUAL_BOARD, "--size", "large"]
    args = build_parser().parse_args(argv)
    nb = Neighbour(virtual) if neighbour else None
    prepare = demo_mod.prepare

    def prepared(a: argparse.Namespace, d: Path) -> Any:
        out = prepare(a, d)
        toml = Path(out[1])
        conf = tomllib.loads(toml.read_text())
        tables = {k: conf.pop(k) for k in [k for k, v in conf.items() if isinstance(v, dict)]}
        conf["remeasure_backoff_s"] = backoff
        demo_mod._write_toml(toml, conf, tables)
        if nb is not None:
            nb.on_tree(d / "virtual-sysfs")
        return out

    done = threading.Event()
    watcher = None
    t0 = time.monotonic()
    demo_mod.prepare = prepared
    try:
        if nb is not None:
            nb.start()
            if neighbour == "half":
                watcher = threading.Thread(target=_stop_half_way,
                                           args=(run_dir / "opptune.db", nb, done), daemon=True)
                watcher.start()
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "demo.out", "w") as out, open(run_dir / "demo.err", "w") as err, \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = demo_mod.run_demo(args)
    finally:
        demo_mod.prepare = prepare
        done.set()
        if nb is not None:
            nb.stop()
    return _figures(run_dir, rc, time.monotonic() - t0)


def _figures(run_dir: Path, rc: int, seconds: float) -> dict[str, Any]:
    db = run_dir / "opptune.db"
    runs = [(json.loads(c), m) for c, m in _rows(db, "SELECT cpus, marked FROM runs WHERE ok")]
    affected = [m for c, m in runs if CPU in c]
    unaffected = [m for c, m in runs if CPU not in c]
    jobs = _rows(db, "SELECT n_points FROM jobs ORDER BY created")
    rec = _rows(db, "SELECT cores, state, error FROM recommendations ORDER BY created DESC "
                    "LIMIT 1")
    table = json.loads((run_dir / "result.json").read_text()) if (
        run_dir / "result.json").exists() else []
    text = (run_dir / "demo.out").read_text() + (run_dir / "demo.err").read_text()
    return {
        "dir": str(run_dir), "rc": rc, "seconds": round(seconds, 1), "runs": len(runs),
        "affected": len(affected), "affected_marked": sum(1 for m in affected if m),
        "unaffected": len(unaffected), "unaffected_marked": sum(1 for m in unaffected if m),
        "marked": sum(1 for _, m in runs if m),
        "remeasure_jobs": max(0, len(jobs) - 1),
        "remeasured_points": sum(n for (n,) in jobs[1:]),
        "recommended_cores": rec[0][0] if rec else None,
        "recommendation_state": rec[0][1] if rec else None,
        "rests_on": next((w.get("rests_on") for w in table if w.get("rests_on")), None),
        "output_names_interference": "interference" in text,
        "output_names_offender": " (sh)" in text,
    }


def _pct(n: int, of: int) -> str:
    return f"{100.0 * n / of:.1f} %" if of else "-"


def board_figures(name: str, virtual: bool, base: Path, quiet_demos: int,
                  backoff: list[float]) -> dict[str, Any]:
    busy = run_demo(base / f"{name}-busy", virtual, backoff, "whole")
    quiet = [run_demo(base / f"{name}-quiet{i}", virtual, backoff) for i in range(quiet_demos)]
    half = run_demo(base / f"{name}-half", virtual, backoff, "half")
    quiet_cores = sorted({q["recommended_cores"] for q in quiet if q["recommended_cores"]})
    return {"board": name, "busy": busy, "quiet": quiet, "half": half,
            "busy_marked_share": (busy["affected_marked"] / busy["affected"]
                                  if busy["affected"] else None),
            "quiet_runs": sum(q["runs"] for q in quiet),
            "quiet_marked": sum(q["marked"] for q in quiet),
            "quiet_cores": quiet_cores,
            "half_matches_quiet": half["recommended_cores"] in quiet_cores}


def print_figures(f: dict[str, Any]) -> None:
    b, h = f["busy"], f["half"]
    print(f"== {f['board']}")
    print(f"(a) busy neighbour on cpu {CPU} for the whole demo ({b['seconds']} s, rc {b['rc']}): "
          f"{b['affected_marked']} of {b['affected']} affected runs marked "
          f"({_pct(b['affected_marked'], b['affected'])}; target >= 95 %); "
          f"{b['unaffected_marked']} of {b['unaffected']} unaffected runs marked; output names "
          f"the interference: {b['output_names_interference']}, the offender: "
          f"{b['output_names_offender']}; recommendation {b['recommended_cores']} cores "
          f"({b['recommendation_state']}); rests on: {b['rests_on']}")
    verdict = ("none to compare" if not f["quiet_cores"] else
               "same" if f["half_matches_quiet"] else "DIFFERENT")
    per = ", ".join(f"{q['marked']} of {q['runs']}" for q in f["quiet"])
    print(f"(b) {len(f['quiet'])} quiet demos: {f['quiet_marked']} of {f['quiet_runs']} runs "
          f"marked ({per}; target 0); recommended cores {f['quiet_cores']}")
    print(f"(c) neighbour stopping half-way ({h['seconds']} s, rc {h['rc']}): "
          f"{h['remeasured_points']} points measured again in {h['remeasure_jobs']} jobs; "
          f"recommendation {h['recommended_cores']} cores ({h['recommendation_state']}), the "
          f"quiet demos' {f['quiet_cores']}: {verdict}"
          f"; rests on: {h['rests_on']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", choices=("both", "real", "virtual"), default="both")
    ap.add_argument("--quiet-demos", type=int, default=3)
    ap.add_argument("--backoff", default="3,6,12",
                    help="the daemon's remeasure_backoff_s in the demos (comma-separated s)")
    ap.add_argument("--dir", help="keep the demos' directories here (default: a temporary "
                                  "one, removed at the end)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    backoff = [float(x) for x in args.backoff.split(",") if x.strip()]
    base = Path(args.dir or tempfile.mkdtemp(prefix="opptune-interference-")).resolve()
    boards = []
    if args.board in ("both", "virtual"):
        boards.append(("virtual " + VIRTUAL_BOARD, True))
    if args.board in ("both", "real"):
        if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
            boards.append(("this machine", False))
        else:
            print("this machine: skipped (needs 2 or more cpus and taskset)")
    out = []
    try:
        for name, virtual in boards:
            f = board_figures(name.replace(" ", "-"), virtual, base, args.quiet_demos, backoff)
            f["board"] = name
            out.append(f)
            if not args.json:
                print_figures(f)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}" if not args.json else "",
          end="\n" if not args.json else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
