"""One run of a pyperf benchmark script (``[[workloads]] pyperf = "bench.py"``).

``python -m opptune.agent.pyperf_workload --cpus 0,1 SCRIPT [-- PYPERF OPTIONS]`` runs the
script once with pyperf's own options for one quick measurement (one worker process, one
value after one warmup, pinned by pyperf's ``--affinity`` to the run's cpus, written with
``--output``), reads that file with pyperf and prints the JSON line the agent's runner takes:
``time_s`` is the value (the sum over the script's benchmarks when it has several, each one's
mean when the options ask for several values) and ``pyperf`` holds every value, the loops and
the benchmarks' names. The agent repeats runs itself, so each repetition is one pyperf value.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# One worker, one value, one warmup: a run is one measurement; the agent's reps and warmups
# repeat it. --affinity is given even though the agent already pins this process: without it
# pyperf pins its worker to the machine's isolated cpus when it has some.
QUICK = ["--processes", "1", "--values", "1", "--warmups", "1"]


def pyperf_argv(script: str, cpus: str, output: str, extra: list[str]) -> list[str]:
    """The script's command line; ``extra`` (pyperf_args) comes last and wins."""
    return [sys.executable, script, *QUICK, "--affinity", cpus, "--quiet", "--output", output,
            *extra]


def summarise(path: str) -> dict[str, object]:
    """The runner's JSON line from pyperf's output file."""
    import pyperf
    suite = pyperf.BenchmarkSuite.load(path)
    benchmarks = {}
    time_s = 0.0
    for bench in suite.get_benchmarks():
        values = list(bench.get_values())
        if bench.get_unit() != "second":
            raise ValueError(f"benchmark {bench.get_name()} measures {bench.get_unit()}, not "
                             "time: opptune takes time values only")
        time_s += sum(values) / len(values)
        benchmarks[bench.get_name()] = {"values": values, "loops": bench.get_total_loops()}
    return {"time_s": time_s, "pyperf": {"benchmarks": benchmarks}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="opptune.agent.pyperf_workload")
    p.add_argument("script")
    p.add_argument("--cpus", required=True)
    p.add_argument("extra", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    with tempfile.TemporaryDirectory(prefix="opptune-pyperf-") as tmp:
        out = str(Path(tmp) / "result.json")
        # the script's own report goes to stderr: stdout carries the runner's JSON line only
        done = subprocess.run(pyperf_argv(args.script, args.cpus, out, extra),
                              stdout=sys.stderr, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            print(f"pyperf script {args.script} failed with exit status {done.returncode}",
                  file=sys.stderr)
            return done.returncode if done.returncode > 0 else 1
        try:
            line = summarise(out)
        except FileNotFoundError:  # it exited 0 without running a benchmark
            print(f"pyperf script {args.script} ran no pyperf benchmark (it exited without "
                  "writing a result): it must run one through pyperf.Runner(), e.g. "
                  "runner.bench_func(...) or runner.timeit(...), at its top level, with "
                  "pyperf's options left to it", file=sys.stderr)
            return 1
        except (OSError, ValueError, KeyError) as exc:
            print(f"pyperf script {args.script} wrote no usable result: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
