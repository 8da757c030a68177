"""Run every benchmark script of this folder and print its figures (``make bench``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    # without a parser, --help (or a typo) went unread and started every benchmark
    argparse.ArgumentParser(
        description="Run every benchmark script of this folder in turn, each with its defaults "
                    "(minutes each: README, Measured figures), and print its figures; exit 1 when "
                    "one fails. Each script's --help says how to run it alone.").parse_args(argv)
    failed = []
    for script in sorted(HERE.glob("*.py")):
        if script.name == Path(__file__).name or script.name.startswith("_"):
            continue
        print(f"== {script.name}", flush=True)
        rc = subprocess.call([sys.executable, str(script)])
        if rc:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
