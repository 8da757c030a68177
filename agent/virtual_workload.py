"""A workload on a virtual board: runs for its modelled time and feeds the fake meters.

``python -m opptune.agent.virtual_workload --board NAME --root DIR --threads N --cpus 0,1
--size small`` reads the frequencies currently set in the fake tree, computes the run time from
the board's true model (virtual_board.run_model) with multiplicative log-normal noise, sleeps
that long for real, advances the tree's energy counters (RAPL energy_uj, /proc/stat busy time)
by what the V^2 f power model gives for that modelled time (hwmon power is shown during the
run and sampled in real time by the agent's meter), and prints one JSON line like the
bench_suite kernels, with "virtual": true. ``time_s`` is the modelled time (the board's clock);
``elapsed_s`` is how long the host really slept.
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

from .sysfs import SysFS, parse_cpu_list
from .virtual_board import CPUFREQ, SIZES, dynamic_power_w, load_spec, policy_of, run_model


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
        seed: int | None = None, sleep: bool = True) -> dict:
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
    m = run_model(spec, cpus, threads, freqs, size)
    rng = random.Random(seed)
    noisy = m["time_s"] * math.exp(rng.gauss(0.0, spec["truth"]["noise"]))
    lock = open(os.path.join(fs.root, ".opptune-virtual-board.lock"), "w")
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
    t0 = time.perf_counter()
    if sleep:
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
        lines = fs.read_text("/proc/stat").splitlines()
        jiffies = int(round(board_s * 100))
        out = []
        for line in lines:
            name, *vals = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in m["cpus_used"]:
                vals[0] = str(int(vals[0]) + jiffies)
            out.append(" ".join([name] + vals))
        _raw_write(fs, "/proc/stat", "\n".join(out))
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    return {"time_s": board_s, "elapsed_s": elapsed, "virtual": True, "board": spec["name"],
            "size": size,
            "threads": threads, "cpus": cpus, "p": m["p"], "model_time_s": m["time_s"],
            "noisy_time_s": noisy, "freq_khz": {str(c): f for c, f in freqs.items()},
            "power_w": m["power_w"], "energy_j": m["power_w"] * board_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opptune.agent.virtual_workload",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--board", required=True, help="board name (must match the tree)")
    ap.add_argument("--root", required=True, help="root of the board's fake tree")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpus", default=None, help="cpu list, e.g. 0,1 or 4-7 (default: affinity)")
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--seed", type=int, default=None)
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
    print(json.dumps(run(args.root, cpus, args.threads, args.size, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
