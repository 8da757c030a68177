"""CLI: `python -m opptune.bench_suite run NAME --threads N --cpus 0,1 --size small` prints the
result as one JSON line; `list [--json]` shows the catalogue. Errors: message on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from .catalogue import KERNELS
from .runner import run_kernel


def _cpu_list(text: str) -> list[int]:
    """'0,1,4-6' -> [0, 1, 4, 5, 6]."""
    cpus: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            cpus.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad cpu list {text!r} (expected e.g. 0,1 or 0-3)")
    if not cpus:
        raise argparse.ArgumentTypeError("cpu list is empty")
    return cpus


def _size(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m opptune.bench_suite", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one kernel and print its result as JSON")
    run.add_argument("name")
    run.add_argument("--threads", type=int, required=True)
    run.add_argument("--cpus", type=_cpu_list, required=True, help="e.g. 0,1 or 0-3")
    run.add_argument("--size", type=_size, default="default",
                     help="size class (small, default) or an integer")
    lst = sub.add_parser("list", help="list the kernels")
    lst.add_argument("--json", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "list":
        if args.json:
            print(json.dumps([k.as_dict() for k in KERNELS.values()]))
        else:
            for k in KERNELS.values():
                sizes = ", ".join(f"{c}={v}" for c, v in k.sizes.items())
                print(f"{k.name:<14} {k.kind:<8} {sizes} ({k.size_unit})\n    {k.description}")
        return 0
    try:
        result = run_kernel(args.name, args.threads, args.cpus, args.size)
    except (ValueError, RuntimeError, MemoryError) as exc:
        print(f"bench_suite: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
