"""The start cost of the ``opptune`` command: CPU time (user + sys) of a whole process.

Times ``opptune status --help`` (the parser only) and ``opptune status`` against a port where
no daemon listens (the parser, the client, its imports; --timeout 0.5, mostly waiting) and
``opptune-daemon --help``, each run in a fresh interpreter, the CPU time read from the child's
rusage. With ``--python`` another interpreter (e.g. an older opptune's virtual environment) is
timed too, the two taking turns run by run, so that a change of the machine's load falls on
both. Prints the median (and min, max) per form, in ms.

    python benchmarks/cli_start.py [-n 10] [--python /path/to/old/venv/bin/python]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

FORMS = {
    "opptune status --help": ["-m", "opptune.daemon.cli", "status", "--help"],
    "opptune status (no daemon)": ["-m", "opptune.daemon.cli", "status", "--daemon",
                                   "tcp://127.0.0.1:1", "--timeout", "0.5"],
    "opptune-daemon --help": ["-c", "import sys; from opptune.daemon.entry import daemon; "
                                    "sys.exit(daemon(['--help']))"],
}


def cpu_ms(python: str, args: list[str]) -> float:
    """User + sys CPU time of one run of ``python args``, in ms."""
    proc = subprocess.Popen([python, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd="/")
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped here: keep Popen from waiting for it again
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="runs of each form (default 10)")
    ap.add_argument("--python", help="another interpreter to time beside this one")
    args = ap.parse_args()
    pythons = {"this": sys.executable}
    if args.python:
        pythons["other"] = args.python
    print(f"load average {os.getloadavg()[0]:.1f}")
    for form, argv in FORMS.items():
        times: dict[str, list[float]] = {k: [] for k in pythons}
        for _ in range(args.n):
            for name, python in pythons.items():
                times[name].append(cpu_ms(python, argv))
        for name, ts in times.items():
            print(f"{form:<28} {name:<6} CPU median {statistics.median(ts):6.0f} ms "
                  f"(min {min(ts):.0f}, max {max(ts):.0f}, n {len(ts)})")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
