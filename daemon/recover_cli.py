"""``opptune recover``: store the results the agents kept because the daemon's store did not know
their jobs (a store replaced, or restored from a backup): daemon/recovery.py."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

HELP = ("store the results the agents kept because this daemon's store did not know their jobs "
        "(after a store was replaced or restored from a backup)")


def agent_line(a: dict[str, Any]) -> str:
    until = time.strftime("%H:%M:%S", time.localtime(a["until"]))
    if a["told"]:
        how = "asked for them now"
    elif a.get("via"):
        how = (f"it is connected to the daemon at {a['via']}, which asks it within a second "
               f"(the opening is in the store every daemon of the fleet reads)")
    elif a["known"]:
        how = "not connected: asked at its next hello"
    else:
        how = ("not heard by this daemon yet (is the id right? 'opptune status' lists the "
               "agents): asked at its first hello")
    also = [c for c in a.get("codes") or () if c != "unknown_job"]
    more = f" (and those refused as {', '.join(also)} are sent again)" if also else ""
    return (f"agent {a['agent']}: results of jobs this store never issued are stored as "
            f"recovered until {until}{more}; {how}; recovered so far: {a['jobs']} jobs, "
            f"{a['runs']} runs")


def cmd_recover(args: argparse.Namespace) -> int:
    from .client import ask, daemon_endpoint
    from ..shared.protocol import PERMANENT_REFUSALS
    from .recovery import MAX_CODES, MAX_FOR_S
    if args.for_s is not None and not 0 < args.for_s <= MAX_FOR_S:
        print(f"opptune recover: --for must be a number of seconds above 0, at most "
              f"{MAX_FOR_S:.0f} (a week)", file=sys.stderr)
        return 2
    q: dict[str, Any] = {}
    if args.agent is not None:
        q["agent"] = args.agent
    if args.for_s is not None:
        q["for_s"] = args.for_s
    if args.also:
        # only these are kept on the board: any other code would be asked for in vain
        kept = sorted(PERMANENT_REFUSALS - {"unknown_job"})
        bad = [c for c in args.also if c not in PERMANENT_REFUSALS]
        if bad or len(args.also) > MAX_CODES:
            print(f"opptune recover: --also takes a code under which an agent keeps refused "
                  f"results, as its log names it: {', '.join(kept)} (at most {MAX_CODES}; "
                  f"unknown_job is always asked for); got {', '.join(bad or args.also)[:200]}",
                  file=sys.stderr)
            return 2
        q["also"] = list(args.also)
    data, rc = ask("opptune recover", daemon_endpoint(args), "recover", q,
                   timeout_s=args.timeout,
                   changes="running this again is safe: nothing is stored twice")
    if rc is not None:
        return rc
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    agents = data.get("agents") or []
    if not agents:
        print("opptune recover: no agent has said hello to this daemon yet: name one with "
              "--agent ID (it is asked at its first hello)")
    for a in agents:
        print(f"opptune recover: {agent_line(a)}")
    if agents:
        print("opptune recover: run it again to see the counts grow; 'opptune status' lists "
              "the recovered jobs (state 'recovered')")
    return 0


def add_parser(sub: Any, add_link_options: Any) -> None:
    p = sub.add_parser("recover", help=HELP, description=(
        HELP[0].upper() + HELP[1:] + ". A daemon stores only the results of jobs its store "
        "issued; an agent keeps the others in its outbox's rejected table (its log says so at "
        "its start). After a store was replaced, that is every result the agents had not yet "
        "seen acknowledged. This opens the agent (every agent this daemon knows, without "
        "--agent) for a while: it is asked to send those results again (now, or at its next "
        "hello), and each result of a job the store does not know is stored under a job of "
        "state 'recovered' for the agent, on its own platform only. Nothing is stored twice; "
        "runs the lost store had acknowledged are not on the board any more and cannot come "
        "back. The groups the results belong to are fitted again; nothing is pushed to the "
        "boards. Exit 0 when asked, 1 when the daemon does not answer, 2 on bad input."))
    p.add_argument("--agent", metavar="ID",
                   help="the agent whose results to recover (default: every agent this "
                        "daemon knows)")
    p.add_argument("--also", action="append", metavar="CODE",
                   help="ask for the results refused with this code too (repeatable), once "
                        "what refused them changed: too_large after max_message_bytes was "
                        "raised, bad_record or unknown_type after the daemon was upgraded; "
                        "the daemon checks them again as any result; a code under which "
                        "no agent keeps results is refused, naming those it keeps")
    p.add_argument("--for", dest="for_s", type=float, metavar="S",
                   help="how long the agent stays open to jobs the store does not know, in "
                        "seconds (default 3600)")
    add_link_options(p)
    p.set_defaults(func=cmd_recover)
