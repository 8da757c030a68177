"""What the agent's look at a workload's program costs per run: before it (Workloads.refresh:
its files stat'ed and compared with those last digested; digested again only where one
changed) and after it (Workloads.ran: which of them the run wrote).

Rows: a command run by an interpreter with a script argument (``python3 bench.py``), a
script run by its ``#!/usr/bin/env python3`` line (``./bench``: env and the interpreter the
PATH finds, with their libraries), a
``sh -c`` command string (its shell and the program the string names), and a bench_suite
kernel (its built extension and accounting), unchanged; and the same command after its script
was edited (the digest made again, the file's content hashed). A command's files include the
shared libraries of its programs (agent/shared_libs.py: the interpreter's, the shell's),
found once and kept by the program's identity, stat'ed at each look. Best of ``--repeat``
timings of ``-n`` checks, in microseconds of this process's CPU time (user + system) per
check: the machine's load from others weighs less than in wall time.

    python benchmarks/program_check.py [-n 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import timeit

from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000, help="checks per timing")
    ap.add_argument("--repeat", type=int, default=5, help="timings; the best is printed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "bench.py")
        with open(script, "w") as f:
            f.write("print(1)\n" * 200)
        run = os.path.join(tmp, "bench")
        with open(run, "w") as f:
            f.write("#!/usr/bin/env python3\n" + "print(1)\n" * 200)
        os.chmod(run, 0o755)
        path = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', os.defpath)}"
        config = AgentConfig(state_dir=tmp, bench_kernels=["pi_integrate"], workloads=[
            CommandWorkload("script", [sys.executable, script, "{threads}"]),
            CommandWorkload("shebang", [run, "{threads}"], env={"PATH": path}),
            CommandWorkload("shell", ["sh", "-c", f"{sys.executable} {script} {{threads}}"]),
        ])
        ws = Workloads(config)
        for name in ("script", "shebang", "shell", "pi_integrate"):
            t = min(timeit.repeat(lambda: (ws.refresh(name), ws.ran(name)), number=args.n,
                                  repeat=args.repeat, timer=time.process_time))
            print(f"{name:14s} unchanged  {t / args.n * 1e6:8.1f} us per run "
                  f"({len(ws._files(ws.get(name)))} files)")
        edits = iter(range(10 ** 9))

        def edited() -> None:
            with open(script, "a") as f:  # a new size: the digest is made again
                f.write(f"# {next(edits)}\n")
            assert ws.refresh("script")

        n = max(1, args.n // 10)
        t = min(timeit.repeat(edited, number=n, repeat=args.repeat, timer=time.process_time))
        print(f"{'script':14s} edited     {t / n * 1e6:8.1f} us per look (with the edit)")
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
