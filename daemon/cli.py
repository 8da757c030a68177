"""``opptune``: the operator's tool. Each subcommand maps to one function in its own module."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

from ..shared.config import ConfigError, load_daemon_config
from .entry import (DAEMON_EXTRA, LOAD_INTERRUPTED, interrupted_status, interrupted_text,
                    refuse_without_extra, stop_like_ctrl_c)
from .options import add_reconnect_option, below_least, parse_frequencies


def cmd_keys(args: argparse.Namespace) -> int:
    """List agents' keys, decide about one, or print the daemon's public key."""
    from .client import ask, daemon_endpoint
    if args.action in ("list", "server") and args.id:
        print(f"opptune keys {args.action}: takes no ID (got {args.id!r}); to decide about one "
              f"key: opptune keys accept|reject|revoke ID", file=sys.stderr)
        return 2
    if args.action == "server":
        from ..shared.curve import KeyFileError, read_public_key
        path = load_daemon_config(args.config).keys_path() / "server.pub"
        try:
            key = read_public_key(str(path), "the daemon's public key")
        except KeyFileError:
            print(f"opptune keys server: no {path}: the daemon writes it at its first start "
                  "with CURVE on (curve = \"on\", or \"auto\" with a non-loopback bind)",
                  file=sys.stderr)
            return 2
        print(json.dumps({"server_public_key": key, "file": str(path)}) if args.json else key)
        return 0
    if args.action != "list" and not args.id:
        print(f"opptune keys {args.action}: give the key's ID ('opptune keys list' shows them)",
              file=sys.stderr)
        return 2
    q = {"action": args.action} if args.action == "list" else {"action": args.action,
                                                              "id": args.id}
    data, rc = ask(f"opptune keys {args.action}", daemon_endpoint(args), "keys", q,
                   timeout_s=args.timeout,
                   changes=None if args.action == "list" else
                   "'opptune keys list' shows the key's state; running this again is safe")
    if rc is not None:
        return rc
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
    elif args.action == "list":
        rows = data.get("keys") or []
        if not rows:
            print("no agent keys yet")
        for k in rows:
            print(f"{k['id']}  {k['state']:<8}  agent {k['agent']}  first seen "
                  f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(k['first_seen']))}")
    else:
        k = data["key"]
        print(f"key {k['id']} of agent {k['agent']}: {k['state']}")
    return 0


# rows of each status table on the terminal: a fleet's status fits a screen or two
STATUS_ROWS = 20


def cmd_status(args: argparse.Namespace) -> int:
    from .client import ask, daemon_endpoint
    if below_least("status", args, {"limit": 1}):
        return 2
    # the terminal gets STATUS_ROWS of each list; --json every row (scripts read it whole)
    # unless --limit says otherwise
    limit = None if args.all else args.limit or (None if args.json else STATUS_ROWS)
    query = {k: v for k, v in (("limit", limit), ("agent", args.agent)) if v is not None}
    data, rc = ask("opptune status", daemon_endpoint(args), "status", query or None,
                   timeout_s=args.timeout)
    if rc is not None:
        return rc
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
        print()
    else:
        from .status_view import print_status  # rich: loaded once there is a status to show
        print_status(data, limit=limit, agent=args.agent)
    return 0


def _reps(text: str) -> int | str:
    """--reps: a count, or "auto" (adaptive repetition)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor auto") from None


def cmd_sweep(args: argparse.Namespace) -> int:
    from .client import ask, daemon_endpoint
    if below_least("sweep", args, {"reps": 1, "warmup": 0, "max_cores": 0}):
        return 2
    sweep_args: dict[str, Any] = {"agent": args.agent}
    for key in ("size", "reps", "warmup", "max_cores"):
        if getattr(args, key) is not None:
            sweep_args[key] = getattr(args, key)
    if sweep_args.get("reps") == "auto":  # adaptive repetition with [sweep]'s target
        del sweep_args["reps"]
        sweep_args["adaptive"] = True
    if args.workload:
        sweep_args["workloads"] = args.workload
    if args.freq:
        try:
            sweep_args["frequencies"] = [int(round(f)) for f in parse_frequencies(args.freq,
                                                                                  "kHz")]
        except ValueError as exc:
            print(f"opptune sweep: --freq {exc}", file=sys.stderr)
            return 2
    endpoint = daemon_endpoint(args)
    data, rc = ask("opptune sweep", endpoint, "sweep", sweep_args, timeout_s=args.timeout,
                   changes=f"'opptune status --agent {args.agent}' lists the jobs it queued; "
                           "running this again would queue them a second time")
    if rc is not None:
        return rc
    if data.get("sizes_instead") and (args.wait or not args.json):  # absent: older daemon
        print(size_instead_text(data["sizes_instead"]["size"],
                                data["sizes_instead"]["workloads"], "swept"),
              file=sys.stderr if args.wait else sys.stdout)
    for key in ("cores_not_swept", "frequencies_not_swept"):
        if data.get(key) and (args.wait or not args.json):
            # said once for the whole sweep; --json alone carries it in its field
            print(data[key], file=sys.stderr if args.wait else sys.stdout)
    if args.wait:
        # a job the agent does not have yet waits in the daemon: said before the wait, which
        # lasts up to job_expiry_s (a terminal's bars say it too; a log or pipe got nothing)
        for job in data.get("jobs", []):
            if job.get("state", "sent") != "sent":
                print(sweep_job_line(job, args.agent), file=sys.stderr)
        from .sweep_wait import wait_for_jobs
        return wait_for_jobs(endpoint, [j["job_id"] for j in data.get("jobs", [])],
                             timeout_s=args.timeout, as_json=args.json,
                             reconnect_s=args.reconnect_s)
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        for job in data.get("jobs", []):
            print(sweep_job_line(job, args.agent))
    return 0


def sweep_job_line(job: dict[str, Any], agent: str) -> str:
    """One line per job of a sweep: "sent" only where it reached the agent (a daemon older
    than the jobs' ``state`` says nothing of it: "sent", as it printed)."""
    state = job.get("state", "sent")
    return f"job {job.get('job_id')} {state}: {job.get('workload')}" + job_state_note(state,
                                                                                   agent)


def size_instead_text(size: str, used: dict[str, str], verb: str) -> str:
    """The line on workloads that lack the daemon's [sweep] ``size`` and run at ``used``'s
    (their first) instead: said alike by sweep and characterize."""
    many = len(used) != 1
    return (f"size {size} (the daemon's [sweep] size) is not one "
            f"{'they offer' if many else 'it offers'}, {verb} at {'their' if many else 'its'} "
            f"first size instead: " + ", ".join(f"{w} at {s}" for w, s in sorted(used.items())))


def job_state_note(state: str, agent: str) -> str:
    """What follows for a job the daemon did not send at once (``state`` as Jobs.send
    returns it), to end its line; "" for one sent. Said alike by sweep and characterize."""
    if state == "queued":
        return (f"; agent {agent} is not connected now: the job goes out when it says "
                "hello again (it expires after the daemon's job_expiry_s without the agent); "
                f"'opptune status --agent {agent}' shows both")
    if state == "held":
        return (f"; held in the daemon while max_outstanding_jobs jobs are out with "
                f"agent {agent}: it goes out as one of them ends")
    return ""


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    return run_demo(args)


def _add_link_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--daemon", help="daemon endpoint (default: the bind address of --config; "
                                    "without one tcp://127.0.0.1:5555)")
    p.add_argument("--config", help="daemon configuration (default /etc/opptune/daemon.toml)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for an answer (default %(default)g); a change "
                        "request left unanswered is asked about once more, so up to twice that")
    p.add_argument("--json", action="store_true", help="print JSON")


DESCRIPTION = ("Find the operating point of parallel software: how many cores and which CPU "
               "frequency. 'opptune demo' runs the whole loop on this machine; 'status', "
               "'sweep', 'recommend', 'tune' and 'report' talk to a running opptune-daemon; "
               "'fit' and 'eval' work on a CSV of measurements, 'predict --fit' on a saved fit. "
               "MPET (seed 000): 'characterize' measures a board's whole bench_suite, 'predict "
               "--workload' predicts a workload on a platform it never ran on from a daemon's "
               "measurements, 'eval-mpet' evaluates that by leave-one-out. 'opptune COMMAND "
               "--help' describes each command.")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from ..agent.virtual_board import BOARDS  # demo's --virtual-board (demo itself loads rich)
    parser = argparse.ArgumentParser(prog="opptune", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"opptune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="run the whole loop locally: daemon + agent, sweep, fit, "
                                    "recommend, apply, verify", description=(
        "Run the whole loop on this machine: start a daemon and an agent (separate processes "
        "over loopback), sweep each workload over 1..N cores, fit the models, recommend, "
        "apply and verify, then print a table per workload; with --virtual-board on a "
        "simulated board that has the knobs this machine lacks. Everything goes to one "
        "directory (--dir). Exit 0 with a recommendation for every workload, 1 without one "
        "(the last line says why: on a busy machine, --accept-load), 2 on bad options."))
    p.add_argument("--dir", help="directory for everything the demo writes "
                                 "(default: ./opptune-demo-<time>)")
    p.add_argument("--size", help="size class of the workloads: on this machine small or "
                                   "default (the default); on a virtual board small (the "
                                   "default), medium or large")
    p.add_argument("--reps", type=int, default=3, help="repetitions per configuration (>= 1)")
    p.add_argument("--warmup", type=int, help="warmup runs per configuration (>= 0; default 1 "
                                              "on this machine, 0 on a virtual board)")
    p.add_argument("--max-cores", type=int, default=0, help="sweep 1..N cores (0 = all)")
    p.add_argument("--workload", action="append",
                   help="only this workload (repeatable; default: pi_integrate, triad and "
                        "locked_update on this machine, pi_integrate on a virtual board, where "
                        "every workload runs the board's model)")
    p.add_argument("--virtual-board", metavar="BOARD",
                   help="run on a simulated board with the knobs this machine lacks (tests "
                        f"and demos); one of: {', '.join(BOARDS)}")
    p.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result table as JSON")
    p.add_argument("--accept-load", action="store_true",
                   help="fit runs marked for interference too (the recommendation then holds "
                        "for the machine under that load); default: measure such points "
                        "again when the machine is quiet, and leave them out")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("status", help="agents, workloads, runs, fits and recommendations of a "
                                      "running daemon",
                       description="What a running daemon knows: its agents and boards, runs, "
                                   "jobs, fits, recommendations, drift, re-measurements "
                                   "and open tune sessions. "
                                   "Each table shows at most --limit rows (the ones that need "
                                   "a look: offline agents, unfinished and newest jobs, newest "
                                   "fits and recommendations) and says how many more there "
                                   "are; --json prints every row unless --limit or --agent is "
                                   "given.")
    _add_link_options(p)
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--limit", type=int, metavar="N",
                      help="rows of each table at most (default 20 on the terminal, every row "
                           "with --json)")
    rows.add_argument("--all", action="store_true", help="every row of every table")
    p.add_argument("--agent", metavar="ID", help="only this agent's board: its runs, jobs, "
                                                 "fits, recommendations")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("sweep", help="ask the daemon to sweep an agent", description=(
        "Ask the daemon to measure workloads on an agent's board over 1..N cores (and the "
        "frequencies of the daemon's [sweep] frequency_grid, or --freq), one job per "
        "workload. A size, core count or frequency the board does not offer is refused at "
        "once (exit 2). The daemon fits and recommends when the jobs are done ('opptune "
        "status'); --wait follows them here."))
    _add_link_options(p)
    p.add_argument("--agent", metavar="ID", required=True, help="agent id (see opptune status)")
    p.add_argument("--workload", action="append", help="workload (repeatable; default all)")
    p.add_argument("--size", help="size class (default: [sweep] size of the daemon's "
                                   "configuration)")
    p.add_argument("--reps", type=_reps, help="repetitions per point (>= 1), or auto: "
                   "adaptive, until the median's 95 %% interval is within [sweep] target_ci")
    p.add_argument("--warmup", type=int, help="warm-up runs per point, not stored (>= 0; "
                                              "default: [sweep] warmup)")
    p.add_argument("--max-cores", type=int, help="sweep 1..N cores (0 = all; default: [sweep] "
                                                 "max_cores)")
    p.add_argument("--freq", help="frequencies, comma-separated: kHz as sysfs counts them, or "
                                  "with a unit (1.4GHz, 1400MHz); default: [sweep] of the "
                                  "daemon's configuration")
    p.add_argument("--wait", action="store_true",
                   help="show progress until every job is done; exit 0 when every job "
                        "measured all its points, 3 when each is done but the agent stopped "
                        "one or more after points in a row timed out (stop_after_timeouts: the "
                        "rest never ran), 4 when one or more was cancelled (opptune cancel) "
                        "and none failed, 1 with the reason when one fails or expires")
    add_reconnect_option(p, "the jobs (--wait)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("keys", help="agents' CURVE keys: list, accept, reject or revoke one; "
                                    "'server' prints the daemon's public key", description=(
        "With CURVE on, an agent's new key waits ('pending') until the operator accepts it; "
        "reject and revoke refuse its messages again. 'list' shows each key with its id, "
        "state and agent; 'server' prints the daemon's public key (from its keys_dir, no "
        "daemon asked), which each agent's daemon_public_key names."))
    p.add_argument("action", choices=("list", "accept", "reject", "revoke", "server"),
                   help="list the keys; accept, reject or revoke the key ID; server: print the "
                        "daemon's public key for the agents' daemon_public_key")
    p.add_argument("id", nargs="?", help="the key's ID from 'opptune keys list' (or its "
                                         "agent id when that names one key)")
    _add_link_options(p)
    p.set_defaults(func=cmd_keys)

    from .cancel_cli import add_parser as add_cancel
    add_cancel(sub, _add_link_options)

    from .recover_cli import add_parser as add_recover
    add_recover(sub, _add_link_options)

    from .doctor_cli import add_parser as add_doctor
    add_doctor(sub, _add_link_options)

    from .characterize_cli import add_parser as add_characterize
    add_characterize(sub, _add_link_options)

    from .report.cli import add_parser as add_report
    add_report(sub, _add_link_options)

    from .export_cli import add_parsers as add_export
    add_export(sub, _add_link_options)

    # the parsers only: the commands' modules (numpy, scipy, pyperf, rich) load when one runs
    from .goal_args import add_parsers as add_goal_parsers
    add_goal_parsers(sub, _add_link_options)

    from .analysis_args import add_eval_mpet_parser, add_eval_parser, add_fit_parsers
    add_fit_parsers(sub)
    add_eval_parser(sub)
    add_eval_mpet_parser(sub)
    for command in sub.choices.values():  # main() shows an unknown option with its usage
        command.set_defaults(command_parser=command)
    return parser


def load_failure(exc: ImportError, command: str) -> int:
    """Say in one line why a command's modules did not load; the exit status. The parser loads
    none of the daemon extra: a command's own modules load as it runs, so a missing module of
    the extra is said there, naming what to install (2). A Ctrl-C that a library's import
    turned into an ImportError (the interrupt in its chain) is the interrupt it is (130);
    anything else is a broken install (1)."""
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            print(LOAD_INTERRUPTED, file=sys.stderr)
            return 130
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    top = (getattr(exc, "name", None) or "").partition(".")[0]
    missing = [dist for dist, module in DAEMON_EXTRA.items() if module == top]
    if isinstance(exc, ModuleNotFoundError) and missing:
        return refuse_without_extra(command, missing)
    print(f"{command}: cannot load its commands: {type(exc).__name__}: {exc}; reinstall: "
          "pip install --force-reinstall 'opptune[daemon]'", file=sys.stderr)
    return 1


# a negative quantity: "-1s", "-.5s", "-3W" (no opptune option starts with a digit)
_NEGATIVE = re.compile(r"-\.?\d")


def join_negative_values(argv: list[str]) -> list[str]:
    """``--deadline -1s`` as ``--deadline=-1s``. argparse reads a word that starts with '-'
    as an option unless it is a plain number, so such a value met "expected one argument"
    and never reached the command's own check, which says what is wrong with it."""
    out: list[str] = []
    for word in argv:
        if (out and out[-1].startswith("--") and "=" not in out[-1] and "--" not in out
                and _NEGATIVE.match(word)):
            out[-1] += "=" + word
        else:
            out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    stop_like_ctrl_c()
    try:
        parser = build_parser()
    except KeyboardInterrupt as exc:
        print(LOAD_INTERRUPTED, file=sys.stderr)
        return interrupted_status(exc)
    except ImportError as exc:
        return load_failure(exc, "opptune")
    args, unknown = parser.parse_known_args(
        join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    if unknown:  # parse_args would print the top-level usage, not the command's
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args) or 0)
    except ImportError as exc:
        return load_failure(exc, f"opptune {args.command}")
    except ConfigError as exc:
        # a command's own errors name its subcommand ('opptune keys list: ...'): so does this
        action = getattr(args, "action", None)
        print(f"opptune {args.command}{f' {action}' if isinstance(action, str) else ''}: "
              f"{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if sys.stderr.isatty():  # end a progress line counted in place (progress.py)
            print(file=sys.stderr)
        line = interrupted_text(args.command, exc)
        if line:  # (an exit of 130 with nothing said: eval-mpet, fit, a query)
            print(line, file=sys.stderr)
        return interrupted_status(exc)


if __name__ == "__main__":
    sys.exit(main())
