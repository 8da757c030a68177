"""``opptune doctor``: is a board fit for measuring? This machine, or an agent's last report."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# Exit codes as ``pyperf system show``: 0 ready, 2 something warns, 1 no report could be made
# or obtained (no daemon, unknown agent, an agent that sent none).
EXIT_READY, EXIT_ERROR, EXIT_WARN = 0, 1, 2

HELP = ("check the board's state for measuring (ASLR, isolated cpus, governor, boost, perf "
        "sample rate, IRQ affinity, load, temperatures, knobs, meters, clock source) with "
        "advice; exit 0 when nothing warns, 2 when something does, 1 when no report could be "
        "made or obtained (as pyperf system show)")


def _text(report: dict[str, Any], title: str) -> str:
    """The report as a person reads it: one line per check, its advice indented below."""
    lines = [title]
    for c in report.get("checks") or []:
        value = c.get("value") if c.get("value") is not None else "-"
        lines.append(f"  {c.get('verdict', '?'):<11} {c.get('name')}: {value}")
        note = c.get("advice") if c.get("verdict") != "unavailable" else c.get("reason")
        if note:
            lines.append(f"              {'advice' if c.get('verdict') == 'warn' else 'note'}: "
                         f"{note}")
    lines.append(f"verdict: {report.get('summary', '?')}")
    return "\n".join(lines)


def _exit(report: dict[str, Any]) -> int:
    return EXIT_WARN if report.get("warnings") else EXIT_READY


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.agent is None:
        from ..agent.doctor import collect
        from ..agent.sysfs import tree_problem
        root = args.sysfs_root
        # a tree that is not there reads as a board with nothing to warn about: "ready"
        why = tree_problem(root)
        if why:
            print(f"opptune doctor: --sysfs-root {root}: {why}; give the directory that holds "
                  "the board's sys/ and proc/ (a virtual board's tree), or leave it out for "
                  "this machine", file=sys.stderr)
            return EXIT_ERROR
        report = collect(root)
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
        else:
            print(_text(report, "this machine:" if os.path.realpath(root) == "/"
                        else f"the tree at {root}:"))
        return _exit(report)
    from .client import daemon_endpoint
    from .client import ask
    data, rc = ask("opptune doctor", daemon_endpoint(args), "doctor", {"agent": args.agent},
                   timeout_s=args.timeout)
    if rc is not None:
        return EXIT_ERROR
    report = data.get("report")
    if not isinstance(report, dict):
        print(f"opptune doctor: agent {args.agent} sent no doctor report with its hello (an "
              "agent older than this opptune): update it, or run 'opptune doctor' on its board",
              file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        state = "" if data.get("alive") else " (not connected now)"
        print(_text(report, f"agent {data.get('agent')} on {data.get('board')}{state}, "
                            "as of its last hello:"))
    return _exit(report)


def board_main(argv: list[str]) -> int:
    """``opptune doctor`` on a board installed without the daemon extra: this machine only
    (an agent's report needs the daemon, and so the extra)."""
    ap = argparse.ArgumentParser(prog="opptune doctor", description=HELP)
    ap.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    _add_sysfs_root(ap)
    args = ap.parse_args(argv)
    args.agent = None
    return cmd_doctor(args)


def _add_sysfs_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sysfs-root", default="/", metavar="DIR",
                   help="without --agent: check the /sys and /proc under DIR (a board's "
                        "mounted image, a virtual board's tree) instead of this machine's")


def add_parser(sub: Any, add_link_options: Any) -> None:
    p = sub.add_parser("doctor", help=HELP,
                       description=HELP[0].upper() + HELP[1:] + ".")
    add_link_options(p)
    p.add_argument("--agent", metavar="ID",
                   help="show this agent's report, sent with its hello, from the daemon "
                        "(default: check this machine, no daemon needed)")
    _add_sysfs_root(p)
    p.set_defaults(func=cmd_doctor)
