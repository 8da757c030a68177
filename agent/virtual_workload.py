"""A workload on a virtual board: runs for its modelled time and feeds the fake meters.

``python -m opptune.agent.virtual_workload --board NAME --root DIR --kernel K --threads N
--cpus 0,1 --size small`` reads the frequencies currently set in the fake tree, computes the run
time of kernel K from its nature (KERNEL_TRAITS) on the board's hardware (kernel_model; for
pi_integrate that is the board's true model, virtual_board.run_model), with each thread's MPET
accounting, with multiplicative log-normal noise, sleeps
that long for real, advances the tree's energy counters (RAPL energy_uj, /proc/stat busy time)
by what the V^2 f power model gives for that modelled time (hwmon power is shown during the
run and sampled in real time by the agent's meter), shows an injected neighbour
(``update_spec(root, neighbour=...)``) in /proc/stat and its /proc/PID/stat, a run on its cpus
lasting longer, and prints one JSON line like the bench_suite kernels, with "virtual": true.
``time_s`` is the modelled time (the board's clock); ``elapsed_s`` is how long the host really
slept; ``board_cpu_s`` the busy time the run itself added to the board's /proc/stat.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import sys
import time
from typing import Any

from ..shared.cpus import parse_cpu_list
from .private import open_private
from .sysfs import SysFS
from .virtual_board import (CPUFREQ, SIZES, cpu_cluster, dynamic_power_w, load_spec,
                            model_time_s, policy_of, run_model, write_proc_stat)
from ..bench_suite.accounting import run_parameters

# --------------------------------------------------------------------------- kernel traits

# What each bench_suite kernel spends its one-thread time on, read from its code
# (bench_suite/kernels/*.c, catalogue.py), as shares of the board's serial work at the
# reference hardware (1 GHz, ipc 1, BW_REF_GBS per core, LAT_REF_NS to DRAM):
#   c  compute: core cycles, the board's true memory-wall curve (virtual_board.model_time_s)
#   b  streamed bytes: per-core bandwidth, then the board's (or package's) memory bandwidth
#   a  dependent DRAM loads: the cluster's memory latency, no frequency in it
#   L  inside one lock (serialised; handover cost kappa per extra thread)
#   A  atomic read-modify-writes on shared lines (cost grows by kappa per extra thread)
# shares sum to 1. f: parallel fraction of the compute share (None: the board's truth, so
# pi_integrate is the board's own curve); split: how the compute share is divided
# ("static" even blocks, "dynamic" chunks or stealing, "triangle" row blocks of a
# triangular loop, "wavefront" anti-diagonals of B x B blocks, "blocks" U whole blocks,
# "merge" a merge-sort tree of 32 leaves); barriers per run; tasks per run (size small) with
# per-task creation/switch/join and per-steal distribution costs in microseconds at 1 GHz.
BW_REF_GBS = 4.0
LAT_REF_NS = 100.0
TASK_US = {"create": 0.8, "switch": 0.3, "join": 0.5, "push": 0.4, "steal": 2.0}
BARRIER_US = 0.6  # per barrier and per extra thread taking part
CROSS_CLUSTER = 2.0  # coherence traffic between clusters/packages costs this much more

KERNEL_TRAITS: dict[str, dict] = {
    # midpoint rule in registers, static split: the board's own curve
    "pi_integrate": {"c": 1.0, "f": None, "split": "static"},
    # three streams, 40 passes with a barrier between them
    "triad": {"c": 0.08, "b": 0.92, "f": 0.995, "split": "static", "barriers": 40},
    # every load's address from the previous one: latency, not bandwidth
    "pointer_chase": {"c": 0.05, "a": 0.95, "f": 0.995, "split": "static"},
    # 64 x 64 tiles in cache; default size 1280: 20 row blocks split statically
    "matmul": {"c": 0.92, "b": 0.08, "f": 0.995, "split": "blocks", "units": 20},
    # 5-point sweeps stream two grids, barrier after each of 64 sweeps
    "stencil": {"c": 0.3, "b": 0.7, "f": 0.995, "split": "static", "barriers": 64},
    # hashing, then an atomic fetch-add into one 1024-bin shared table
    "histogram": {"c": 0.6, "A": 0.4, "f": 0.995, "split": "static", "kappa": 0.35},
    # ~40 % of the work inside one mutex
    "locked_update": {"c": 0.6, "L": 0.4, "f": 0.995, "split": "static", "kappa": 0.15},
    # batches in and out of one locked ring; items (and their lines) cross threads
    "shared_queue": {"c": 0.6, "b": 0.1, "L": 0.3, "f": 0.995, "split": "static",
                     "kappa": 0.2},
    # row i does i iterations, rows in static blocks: the last thread has the most
    "triangle": {"c": 1.0, "f": 0.995, "split": "triangle"},
    # Needleman-Wunsch in 256 x 256 blocks (size small: 12 per side), a barrier per diagonal
    "wavefront": {"c": 0.85, "b": 0.15, "f": 0.995, "split": "wavefront", "units": 12,
                  "barriers": 23},
    # random graph: neighbour loads are DRAM misses, CAS claims, two barriers per level
    "bfs": {"c": 0.25, "b": 0.2, "a": 0.5, "A": 0.05, "f": 0.99, "split": "dynamic",
            "kappa": 0.2, "barriers": 16},
    # recursive spawns with stealing: ~1000 tasks at fib(35), cut-off 20
    "fib_tasks": {"c": 1.0, "f": 0.999, "split": "dynamic", "tasks": 1000},
    # 32 leaves of 8192 keys sorted by stealing threads, merges serial per parent
    "merge_sort": {"c": 0.6, "b": 0.4, "f": 0.995, "split": "merge", "tasks": 31},
}


def _split(tr: dict, n: int) -> tuple[list[float], float]:
    """Per-thread shares of the compute work (summing to 1) and the wall share (the
    critical path as a share of the work; 1/n when perfectly balanced)."""
    kind = tr.get("split", "static")
    if kind == "triangle":
        return [(2 * i + 1) / n ** 2 for i in range(n)], (2 * n - 1) / n ** 2
    if kind == "blocks":
        u = tr["units"]
        counts = [u // n + (1 if i < u % n else 0) for i in range(n)]
        return [k / u for k in counts], max(counts) / u
    if kind == "wavefront":
        b = tr["units"]
        counts, wall = [0] * n, 0
        for d in range(1, 2 * b):
            length = min(d, 2 * b - d)
            wall += math.ceil(length / n)
            for i in range(n):
                counts[i] += length // n + (1 if i < length % n else 0)
        return [k / b ** 2 for k in counts], wall / b ** 2
    if kind == "merge":
        # 32 leaves of 13 units (8192 log2 8192 compares, in 8192s) then 5 levels of merges,
        # level k: 2^k merges of 32 / 2^k units each, at most n at a time
        leaves, total = 32, 32 * 13 + 5 * 32
        wall = math.ceil(leaves / n) * 13 + sum(math.ceil(2 ** k / n) * 32 / 2 ** k
                                                 for k in range(5))
        return [1.0 / n] * n, wall / total
    return [1.0 / n] * n, 1.0 / n


def kernel_model(spec: dict, kernel: str, cpus: list[int], threads: int,
                 freqs_khz: dict[int, int], size: str = "small") -> dict:
    """Noise-free time of ``kernel`` and each thread's MPET accounting (bench_suite/runtime.h
    categories exec, lock wait, idle, create, dist, switch, join), every thread's categories
    summing to the run's time. The run is a sequence of phases (one per trait); each phase
    lasts as long as its slowest thread, the others idle (or wait on the lock) meanwhile."""
    if kernel not in KERNEL_TRAITS:
        raise ValueError(f"no virtual model for kernel {kernel!r}; known: "
                         f"{', '.join(sorted(KERNEL_TRAITS))}")
    tr = KERNEL_TRAITS[kernel]
    truth = spec["truth"]
    n = max(1, min(threads, len(cpus)))
    used = list(cpus)[:n]
    cls = [spec["clusters"][cpu_cluster(spec, c)] for c in used]
    f_ghz = [freqs_khz[c] / 1e6 for c in used]
    v = [cl["ipc"] * f for cl, f in zip(cls, f_ghz)]  # instructions per ns
    groups = {cpu_cluster(spec, c) for c in used}
    pkgs = {p for p, cs in spec["packages"].items() if set(cs) & set(used)}
    cross = CROSS_CLUSTER if len(groups) > 1 or len(pkgs) > 1 else 1.0
    work = truth["work_s"] * SIZES[size]
    cats = ("exec_s", "lock_wait_s", "idle_s", "create_s", "dist_s", "switch_s", "join_s")
    threads_out = [{k: 0.0 for k in cats} for _ in used]
    phases = []

    def phase(wall: float, **per_thread: list[float]) -> None:
        # every thread's categories in this phase fill its wall time; the rest is idle
        for i, t in enumerate(threads_out):
            spent = 0.0
            for cat, vals in per_thread.items():
                t[cat] += vals[i]
                spent += vals[i]
            t["idle_s"] += wall - spent
        phases.append(wall)

    # compute: the board's memory-wall curve (seed 003 eq. 15-16) at the pacing core
    c = tr.get("c", 0.0)
    if c:
        shares, wall_share = _split(tr, n)
        dynamic = tr.get("split") == "dynamic"
        pace = sum(v) / n if dynamic else min(v)
        f_pace = sum(f_ghz) / n if dynamic else f_ghz[v.index(min(v))]
        t_truth = dict(truth, f=truth["f"] if tr.get("f") is None else tr["f"])
        t_n = c * model_time_s(t_truth, n, f_pace, size, speed=pace / f_pace)
        serial = c * (1 - t_truth["f"]) * model_time_s(t_truth, 1, f_pace, size,
                                                       speed=pace / f_pace)
        serial = min(serial, t_n)
        par = t_n - serial
        rel = [1.0] * n if dynamic else [pace / x for x in v]
        ex = [par * n * s * r + (serial if i == 0 else 0.0)
              for i, (s, r) in enumerate(zip(shares, rel))]
        phase(max(max(ex), serial + par * n * wall_share), exec_s=ex)
    # streamed bytes: each thread at its core's bandwidth (a little lower at low
    # frequency: fewer misses in flight), all together capped by the memory's bandwidth
    b = tr.get("b", 0.0)
    if b:
        fmax = [(max(cl["freqs_khz"]) if cl.get("freqs_khz") else cl["max_khz"]) / 1e6
                for cl in cls]
        bw = [cl["bw_core_gbs"] * (0.6 + 0.4 * f / fm) for cl, f, fm in zip(cls, f_ghz, fmax)]
        mem = spec["memory"]
        if mem.get("domain") == "package":
            cap_of = {p: mem["bw_gbs"] / len(spec["packages"]) for p in spec["packages"]}
            dom = [next(p for p, cs in spec["packages"].items() if c in cs) for c in used]
        else:
            cap_of, dom = {0: mem["bw_gbs"]}, [0] * n
        rate = []
        for i in range(n):
            demand = sum(bw[j] for j in range(n) if dom[j] == dom[i])
            rate.append(bw[i] * min(1.0, cap_of[dom[i]] / demand))
        ex = [work * b * BW_REF_GBS / n / r for r in rate]
        phase(max(ex), exec_s=ex)
    # dependent loads: latency-bound, a little queueing in the memory controller
    a = tr.get("a", 0.0)
    if a:
        ex = [work * a / n * cl["mem_latency_ns"] / LAT_REF_NS * (1 + 0.04 * (n - 1))
              for cl in cls]
        phase(max(ex), exec_s=ex)
    kappa = tr.get("kappa", 0.0) * cross
    # atomics on shared lines: each update waits for the line to come over
    A = tr.get("A", 0.0)
    if A:
        ex = [work * A / n / x * (1 + kappa * (n - 1)) for x in v]
        phase(max(ex), exec_s=ex)
    # one lock: its holds are serialised; the waits a closed queue of n threads gives
    L = tr.get("L", 0.0)
    if L:
        hold = [work * L / n / x * (1 + kappa * (n - 1)) for x in v]
        total = sum(hold)
        rest = sum(phases)
        rho = total / (total + n * rest) if total + rest > 0 else 0.0
        wait = (n - 1) * (total / n) * rho
        wall = max(total / n + wait, total - rest, max(hold))
        phase(wall, exec_s=hold, lock_wait_s=[wall - h for h in hold])
    # barriers: every thread waits for the last to arrive and the release to propagate
    nb = tr.get("barriers", 0)
    if nb and n > 1:
        j = nb * BARRIER_US * 1e-6 * (n - 1) * cross
        phase(j, join_s=[j] * n)
    # tasks: creation, pushes, switches and joins per task, steals per extra thread
    nt = tr.get("tasks", 0) * SIZES[size]
    if nt:
        per = {k: [nt / n * TASK_US[k] * 1e-6 / x for x in v]
               for k in ("create", "switch", "join", "push")}
        steals = [(n - 1) * math.log2(nt + 1) * TASK_US["steal"] * 1e-6 / x for x in v]
        dist = [p + s for p, s in zip(per["push"], steals)]
        tot = [sum(t) for t in zip(per["create"], per["switch"], per["join"], dist)]
        phase(max(tot), create_s=per["create"], switch_s=per["switch"], join_s=per["join"],
              dist_s=dist)
    time_s = sum(phases)
    for t, c_ in zip(threads_out, used):
        t["cpu"] = c_
        t["idle_s"] = max(t["idle_s"], 0.0)
    return {"time_s": time_s, "p": n, "thread_stats": threads_out}


def _add_int(fs: SysFS, rel: str, delta: int, wrap: int | None = None) -> None:
    v = fs.read_int(rel) + delta
    if wrap:
        v %= wrap + 1
    _raw_write(fs, rel, v)


def _raw_write(fs: SysFS, rel: str, value) -> None:
    # Sensors are read-only on a board: the virtual hardware writes the files directly.
    with open(fs.path(rel), "w") as fh:
        fh.write(f"{value}\n")


def run(board_root: str, cpus: list[int], threads: int, size: str = "small",
        seed: int | None = None, sleep: bool | Any = True, kernel: str = "pi_integrate",
        clock: Any = time.time) -> dict:
    """One run (``sleep``: sleep the modelled time, or a callable that is given it;
    ``clock``: the wall clock the spec's ``neighbour_at`` is read against)."""
    fs = SysFS(board_root)
    spec = load_spec(board_root)
    freqs = {c: fs.read_int(f"{CPUFREQ}/{policy_of(spec, c)}/scaling_cur_freq") for c in cpus}
    throttle = spec.get("throttle") or {}
    hot = sorted(set(cpus) & set(throttle.get("cpus") or []))
    capped: dict[str, int] = {}  # policy -> the frequency it was set to, shown capped meanwhile
    for c in hot:
        freqs[c] = min(freqs[c], int(throttle["max_khz"]))
        capped.setdefault(policy_of(spec, c), fs.read_int(
            f"{CPUFREQ}/{policy_of(spec, c)}/scaling_cur_freq"))
    m = run_model(spec, cpus, threads, freqs, size)  # the board's power (and pi_integrate)
    km = kernel_model(spec, kernel, cpus, threads, freqs, size)
    rng = random.Random(seed)
    scale = math.exp(rng.gauss(0.0, spec["truth"]["noise"]))
    # an injected neighbour takes its share of each of its cpus: the run's threads there get
    # the rest, and the slowest of them paces the run
    nb = spec.get("neighbour") or {}
    nb_cpus = set(nb.get("cpus") or [])
    if nb_cpus & set(m["cpus_used"]):
        scale /= 1.0 - nb["share"]
    noisy = km["time_s"] * scale
    # the noise stretches the whole run: every thread's categories with it
    stats = [{k: (x * scale if k.endswith("_s") else x) for k, x in t.items()}
             for t in km["thread_stats"]]
    lock = open_private(os.path.join(fs.root, ".opptune-virtual-board.lock"))
    hw = spec.get("hwmon", [])
    idle = {}
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        for i, h in enumerate(hw):
            rel = f"/sys/class/hwmon/hwmon{i}/power1_input"
            idle[rel] = fs.read_int(rel)
            w = m["cluster_power_w"][h["cluster"]] if "cluster" in h else h["constant_w"]
            _raw_write(fs, rel, int(w * 1e6))
        # injected throttling: the capped frequency shows while the run lasts, the x86
        # counters count it
        for pol in capped:
            cap = int(throttle["max_khz"])
            for leaf in ("scaling_cur_freq", "cpuinfo_cur_freq"):
                if fs.exists(f"{CPUFREQ}/{pol}/{leaf}"):
                    _raw_write(fs, f"{CPUFREQ}/{pol}/{leaf}", min(cap, capped[pol]))
        for c in hot:
            rel = f"/sys/devices/system/cpu/cpu{c}/thermal_throttle/core_throttle_count"
            if fs.exists(rel):
                _add_int(fs, rel, 1)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
    t0, wall0 = time.perf_counter(), clock()
    if callable(sleep):
        sleep(noisy)
    elif sleep:
        time.sleep(noisy)
    elapsed = time.perf_counter() - t0 if sleep else noisy
    # The board's clock is the model: a busy host can wake the sleep tens of ms late, which is
    # the host's noise, not the simulated board's. The run lasts ``noisy`` on the board.
    board_s = noisy
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        for rel, v in idle.items():
            _raw_write(fs, rel, v)
        for pol, f in capped.items():
            for leaf in ("scaling_cur_freq", "cpuinfo_cur_freq"):
                if fs.exists(f"{CPUFREQ}/{pol}/{leaf}"):
                    _raw_write(fs, f"{CPUFREQ}/{pol}/{leaf}", f)
        if spec.get("rapl"):
            for pk in sorted(spec["packages"]):
                members = set(spec["packages"][pk])
                share = sum(1 for c in m["cpus_used"] if c in members)
                cl = spec["clusters"][0]
                f = max(freqs[c] for c in cpus)
                w = cl["p_static"] + share * dynamic_power_w(cl, f)
                z = f"/sys/class/powercap/intel-rapl:{pk}"
                _add_int(fs, f"{z}/energy_uj", int(w * board_s * 1e6),
                         fs.read_int(f"{z}/max_energy_range_uj"))
                zd = f"/sys/class/powercap/intel-rapl:{pk}:0"
                _add_int(fs, f"{zd}/energy_uj", int(spec.get("rapl_dram_w", 0) * board_s * 1e6),
                         fs.read_int(f"{zd}/max_energy_range_uj"))
        # each cpu of the run and of the neighbour counts the run's time: busy for the run's
        # threads and the neighbour's share, idle for the rest
        # a neighbour removed or replaced during the run ran only until then: its share is
        # of that part of the run (charging it over the whole run marked such a run as if
        # the run's own threads were others')
        now_spec = load_spec(board_root)
        ran = 1.0
        if nb_cpus and now_spec.get("neighbour") != nb:
            wall1 = clock()
            at = float(now_spec.get("neighbour_at") or wall1)
            ran = min(1.0, max(0.0, (at - wall0) / (wall1 - wall0))) if wall1 > wall0 else 0.0
        lines = fs.read_text("/proc/stat").splitlines()
        jiffies = int(round(board_s * 100))
        nb_j = int(round(nb["share"] * ran * jiffies)) if nb_cpus else 0
        own_j = 0
        out = []
        for line in lines:
            name, *vals = line.split()
            c = int(name[3:]) if name.startswith("cpu") and name[3:].isdigit() else None
            if c is not None and (c in cpus or c in nb_cpus):
                theirs = nb_j if c in nb_cpus else 0
                mine = jiffies - theirs if c in m["cpus_used"] else 0
                own_j += mine
                vals[0] = str(int(vals[0]) + mine + theirs)
                vals[3] = str(int(vals[3]) + jiffies - mine - theirs)
            out.append(" ".join([name] + vals))
        _raw_write(fs, "/proc/stat", "\n".join(out))
        if nb_cpus and fs.exists(f"/proc/{nb['pid']}/stat"):  # gone with its removal
            stat = fs.read_text(f"/proc/{nb['pid']}/stat")
            ticks = int(stat[stat.rfind(")") + 2:].split()[11]) + nb_j * len(nb_cpus)
            write_proc_stat(fs.root, nb["pid"], nb["name"], ticks, sorted(nb_cpus))
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    mpet = run_parameters(board_s, stats)
    if len(stats) == 1:  # this run is its own t(1), as bench_suite/runner.py does
        mpet["R"] = mpet["exec_s"] / board_s
    return {"kernel": kernel, "time_s": board_s, "elapsed_s": elapsed, "virtual": True,
            "board": spec["name"], "size": size, "thread_stats": stats, "mpet": mpet,
            "threads": threads, "cpus": cpus, "p": m["p"], "model_time_s": km["time_s"],
            "noisy_time_s": noisy, "freq_khz": {str(c): f for c, f in freqs.items()},
            "power_w": m["power_w"], "energy_j": m["power_w"] * board_s,
            "board_cpu_s": own_j / 100}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opptune.agent.virtual_workload",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--board", required=True, help="board name (must match the tree)")
    ap.add_argument("--root", required=True, help="root of the board's fake tree")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpus", default=None, help="cpu list, e.g. 0,1 or 4-7 (default: affinity)")
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--kernel", default="pi_integrate", choices=sorted(KERNEL_TRAITS),
                    help="bench_suite kernel whose nature the run follows")
    args = ap.parse_args(argv)
    spec = load_spec(args.root)
    if spec["name"] != args.board:
        print(f"tree at {args.root} is board {spec['name']!r}, not {args.board!r}",
              file=sys.stderr)
        return 2
    cpus = parse_cpu_list(args.cpus) if args.cpus else None
    if not cpus:
        board_cpus = sorted(c for cl in spec["clusters"] for c in cl["cpus"])
        cpus = board_cpus[:max(1, args.threads)]
    print(json.dumps(run(args.root, cpus, args.threads, args.size, args.seed,
                         kernel=args.kernel)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
