"""``opptune report``: ask the daemon for what it measured, fitted and recommended (the
``report`` query, so the store stays the daemon's) and write the static page."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..options import below_least

DEFAULT_OUT = "opptune-report"
# groups refitted and drawn by default: a refit and 4 figures take 1-2 s a group on the
# 2-cpu machine, and nobody reads a page of hundreds of groups' figures (a table lists them)
DEFAULT_MAX_GROUPS = 20


def add_parser(sub: argparse._SubParsersAction, add_link_options) -> None:
    p = sub.add_parser(
        "report", help="write a static HTML page with plots of a running daemon's "
                       "measurements, models and recommendations",
        description="Write DIR/index.html with PNG figures (no JavaScript, nothing loaded from "
                    "the network): per workload the measured and fitted scaling curves, time "
                    "and energy maps over cores x frequency with the recommended point and the "
                    "time/energy Pareto front; per board its topology and the bench_suite "
                    "kernels' traits; the fleet of agents. Models are refitted here from the "
                    "runs the daemon sends. With more workload groups than --max-groups the "
                    "page lists every group in a table with the daemon's model and draws those "
                    "of the newest recommendations; --workload and --agent choose the groups.")
    add_link_options(p)
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                   help=f"directory to write (default ./{DEFAULT_OUT}); its index.html and "
                        "fig-*.png are replaced, nothing else in it is touched")
    p.add_argument("--workload", help="only this workload's groups")
    p.add_argument("--agent", metavar="ID", help="only the groups of this agent's board")
    p.add_argument("--max-groups", type=int, metavar="N", default=DEFAULT_MAX_GROUPS,
                   help=f"refit and draw at most N groups (default {DEFAULT_MAX_GROUPS}; "
                        "1-2 s each; 0 = all); the page lists the others in a table")
    p.set_defaults(func=cmd_report, timeout=10.0)


def cmd_report(args: argparse.Namespace) -> int:
    from ..client import daemon_endpoint
    from ..client import BadEndpoint, DaemonUnreachable, QueryFailed, query, waiting_note
    out = Path(args.out)
    if not args.timeout > 0:  # zmq would wait forever on a negative poll
        return _fail(f"--timeout {args.timeout:g}: give a number of seconds > 0", 2)
    if below_least("report", args, {"max_groups": 0}):
        return 2
    if out.exists() and not out.is_dir():
        return _fail(f"--out {args.out}: is a file, not a directory; name a directory", 2)
    try:
        endpoint = daemon_endpoint(args)
        data = query(endpoint, "report", timeout_s=args.timeout, first=True,
                     on_wait=waiting_note("opptune report", endpoint, args.timeout))
    except BadEndpoint as exc:
        return _fail(str(exc), 2)
    except QueryFailed as exc:
        hint = ("; the daemon predates 'opptune report': upgrade it"
                if exc.code == "unknown_query" else "")
        return _fail(f"{exc}{hint}", 1)
    except DaemonUnreachable as exc:
        return _fail(str(exc), 1)
    from .build import NoGroups, build_report
    from ..progress import terminal_counter, terminal_progress
    try:
        built = build_report(data, out, terminal_progress("opptune report"),
                             terminal_counter("opptune report"), max_groups=args.max_groups,
                             workload=args.workload, agent=args.agent)
    except KeyboardInterrupt:
        if sys.stderr.isatty():  # end a progress line counted in place
            print(file=sys.stderr)
        return _fail(f"interrupted: nothing written; {out} holds what it held before", 130)
    except NoGroups as exc:
        return _fail(str(exc), 2)
    except OSError as exc:
        return _fail(f"--out {args.out}: cannot write: {exc.strerror or exc}", 2)
    summary = {"index": str(built.index), "groups": built.groups, "listed": built.listed,
               "images": len(built.images), "bytes": built.bytes,
               "seconds": round(built.seconds, 3)}
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(wrote_line(built))
    return 0


def wrote_line(built) -> str:
    """What ``build_report`` wrote, in one line (1 workload group, 2 figures, ...)."""
    g, i, n = len(built.groups), len(built.images), built.listed
    drawn = f"{g} of {n} workload groups drawn (the page lists all)" if n > g else \
        f"{g} workload group{'s' * (g != 1)}"
    what = (f"{drawn}, {i} figure{'s' * (i != 1)}" if g else
            "nothing measured yet (the page says how to start)")
    return f"wrote {built.index}: {what}, {built.bytes / 1024:.0f} KiB in {built.seconds:.1f} s"


def _fail(message: str, code: int) -> int:
    print(f"opptune report: {message}", file=sys.stderr)
    return code
