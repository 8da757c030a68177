"""What a run's ``wall_s`` holds besides the program: the agent's own start cost.

Runs /bin/true, ``sleep 0.005`` and ``sleep 0.05`` as command workloads through the real
Runner (``run_once``: pinned child, meters, record) for a root agent that drops to ``run_as``
(nobody), a root agent without it, and a non-root agent (a forked copy of this process that
became nobody first), and beside them a reference: the same command started with
``os.posix_spawn`` (vfork + exec, no Python between them; the child pinned as the agent pins
it, the parent not) and reaped with ``waitpid``, timed around both. The rows take turns in
``--rounds`` rounds, so that a change of the machine's load falls on all of them. Prints the
median and p90 of ``wall_s`` and of the reference, in ms; with an agent that excludes its start
cost (``extra["start_cost_s"]``) also that cost and ``wall_s`` plus it (what an agent that
started the clock before its fork recorded for the same runs).

    python benchmarks/spawn_overhead.py [-n 200] [--rounds 5] [--cpu N]

Not root, or no user ``nobody``: only the rows this process can run.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import sys
import time

from opptune.agent.child import resolve_run_as, user_env
from opptune.agent.runner import Runner
from opptune.agent.runspec import RunSpec
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload

COMMANDS = {"true": ["/bin/true"], "sleep 5 ms": ["/bin/sleep", "0.005"],
            "sleep 50 ms": ["/bin/sleep", "0.05"]}


def _stats(values: list[float]) -> tuple[float, float]:
    """Median and 90th percentile, in ms."""
    ms = sorted(v * 1e3 for v in values)
    return statistics.median(ms), ms[min(len(ms) - 1, int(0.9 * len(ms)))]


def _runner_rows(n: int, cpu: int, run_as) -> dict[str, dict[str, list[float]]]:
    """wall_s and the excluded start cost (empty: none) of n runs of each command through
    Runner.run_once."""
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload(name.replace(" ", "_"), argv) for name, argv in COMMANDS.items()])
    runner = Runner(Workloads(cfg, catalogue={}), "bench", timeout_s=60, run_as=run_as)
    out = {}
    for name in COMMANDS:
        spec = RunSpec(name.replace(" ", "_"), "default", [cpu], 1)
        walls, starts = [], []
        for _ in range(n):
            rec = runner.run_once(spec)
            if not rec.ok:
                raise SystemExit(f"{name}: {rec.error}")
            walls.append(rec.wall_s)
            if "start_cost_s" in rec.extra:
                starts.append(rec.extra["start_cost_s"])
        out[name] = {"wall": walls, "start": starts}
    return out


def _reference_rows(n: int, cpu: int) -> dict[str, dict[str, list[float]]]:
    """The same commands by posix_spawn + waitpid; the child inherits the affinity this
    thread holds around the spawn, and the parent waits unpinned, as the agent does."""
    old = os.sched_getaffinity(0)
    out = {}
    env = user_env(None)
    for name, argv in COMMANDS.items():
        walls = []
        for _ in range(n):
            t0 = time.perf_counter()
            os.sched_setaffinity(0, [cpu])
            try:
                pid = os.posix_spawn(argv[0], argv, env)
            finally:
                os.sched_setaffinity(0, old)
            os.waitpid(pid, 0)
            walls.append(time.perf_counter() - t0)
        out[name] = {"wall": walls, "start": []}
    return out


def _as_nobody(fn, *args) -> dict:
    """``fn(*args)`` in a forked copy of this process that dropped to nobody: a non-root agent."""
    pw = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.chdir("/")
            data = json.dumps(fn(*args)).encode()
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        except BaseException as exc:  # the parent reports it: nothing may unwind past fork
            print(f"non-root agent failed: {exc}", file=sys.stderr)
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("the non-root run failed")
    return json.loads(data)


def _merge(into: dict, part: dict) -> None:
    for name, data in part.items():
        for key, values in data.items():
            into.setdefault(name, {}).setdefault(key, []).extend(values)


def _cells(data: dict, key: str, add: str | None = None) -> str:
    out = []
    for c in COMMANDS:
        values = data[c][key]
        if add is not None:
            values = [a + b for a, b in zip(values, data[c][add])]
        out.append("{:6.2f} / {:6.2f}".format(*_stats(values)))
    return "  ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="What a command run's wall_s holds besides the "
                                 "program (the agent's own start), against posix_spawn.")
    ap.add_argument("-n", type=int, default=200, help="runs per command and row (200)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="the rows take turns this many times, n/rounds runs each (5)")
    ap.add_argument("--cpu", type=int, default=None,
                    help="the cpu the runs are pinned to (default: the last one allowed)")
    args = ap.parse_args()
    if args.n < 1 or not 1 <= args.rounds <= args.n:
        ap.error("-n must be at least 1 and --rounds from 1 to n")
    allowed = os.sched_getaffinity(0)
    if args.cpu is not None and args.cpu not in allowed:
        ap.error(f"--cpu {args.cpu} is not a cpu this process may run on "
                 f"({', '.join(map(str, sorted(allowed)))})")
    cpu = args.cpu if args.cpu is not None else max(allowed)
    root = os.geteuid() == 0
    nobody = any(p.pw_name == "nobody" for p in pwd.getpwall())
    rows: list[tuple[str, object]] = []
    if root and nobody:
        user = resolve_run_as("nobody")
        rows.append(("root agent, run_as nobody", lambda k: _runner_rows(k, cpu, user)))
    rows.append((f"{'root' if root else 'non-root'} agent, no run_as",
                 lambda k: _runner_rows(k, cpu, None)))
    if root and nobody:
        rows.append(("non-root agent (nobody)",
                     lambda k: _as_nobody(_runner_rows, k, cpu, None)))
    rows.append(("reference: posix_spawn + waitpid", lambda k: _reference_rows(k, cpu)))
    results: dict[str, dict] = {name: {} for name, _ in rows}
    loads = []
    for r in range(args.rounds):
        k = args.n // args.rounds + (1 if r < args.n % args.rounds else 0)
        for name, fn in rows:
            _merge(results[name], fn(k))
        loads.append(os.getloadavg()[0])
    print(f"wall_s of command workloads, {args.n} runs each on cpu {cpu} in {args.rounds} "
          f"rounds, median / p90 in ms (load average {min(loads):.1f}-{max(loads):.1f})")
    width = max(len(name) for name, _ in rows) + 2
    print(f"  {'':<{width}}  " + "  ".join(f"{c:>15}" for c in COMMANDS))
    for name, _ in rows:
        data = results[name]
        print(f"  {name:<{width}}  {_cells(data, 'wall')}")
        if all(len(data[c]["start"]) == len(data[c]["wall"]) for c in COMMANDS):
            print(f"  {'  start cost excluded':<{width}}  {_cells(data, 'start')}")
            print(f"  {'  wall_s + start cost':<{width}}  {_cells(data, 'wall', 'start')}")


if __name__ == "__main__":
    main()
