"""``opptune cancel``: stop a job for good, or every unfinished job of one agent.

The daemon cancels a job it has not sent at once; one the agent may hold is sent a ``cancel``
(the agent kills the run under way and skips the rest; daemon/jobs.py). Either way the job is
``cancelled``, never sent again, and the runs it measured stay stored."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = ("cancel a job (or every unfinished job of an agent): one not sent is dropped, one "
        "running is stopped on the board; the runs it measured are kept")


def stop_text(agent: str, was: str, told: bool | None, via: str | None) -> str:
    """How a job cancelled in state ``was`` stops (the cancel reply's ``told`` and ``via``,
    daemon/jobs.py JobTracker.cancel): said alike by ``cancel`` and ``tune --stop``."""
    if was == "queued":
        # another daemon of a fleet may send it just as this one cancels it (jobs.py,
        # _sent_cancelled): that one then tells the agent to stop it
        return ("it was queued, not sent, when cancelled: it is never sent (a daemon of the "
                "fleet that sent it at that instant tells the agent to stop it)")
    if told:
        return f"{agent} stops it now"
    if via:
        return (f"{agent} is connected to the daemon at {via}, which tells it to stop it "
                "within a few seconds")
    return (f"{agent} is not connected to this daemon: it is told at its next hello, and the "
            "job never runs again")


def job_line(j: dict[str, Any]) -> str:
    """What became of one job the command named."""
    from .jobs import runs_text
    head = f"job {j['job_id']} ({j['workload']} on {j['agent']})"
    runs = runs_text(j)
    if not j["cancelled"]:
        return (f"{head} had already ended: {j['state']}: {runs}" +
                (f"; {j['reason']}" if j.get("reason") else ""))
    how = stop_text(j["agent"], j["was"], j.get("told"), j.get("via"))
    if j["was"] != "queued":
        how += "; the runs it measured are kept" + (
            ", and those under way are stored as they arrive" if j.get("told") else "")
    return f"{head} cancelled ({j['was']}, {runs}): {how}"


def cmd_cancel(args: argparse.Namespace) -> int:
    from .client import ask, daemon_endpoint
    if (args.job_id is None) == (args.agent is None):
        print("opptune cancel: give a JOB_ID or --agent ID (not both); 'opptune status' lists "
              "the jobs", file=sys.stderr)
        return 2
    q = {"job_id": args.job_id} if args.job_id is not None else {"agent": args.agent}
    data, rc = ask("opptune cancel", daemon_endpoint(args), "cancel", q,
                   timeout_s=args.timeout,
                   changes="'opptune status' shows whether it is cancelled; running this "
                           "again is safe")
    if rc is not None:
        return rc
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    jobs = data.get("jobs") or []
    if not jobs:
        print(f"opptune cancel: agent {args.agent} has no unfinished job: nothing to cancel")
    for j in jobs:
        print(f"opptune cancel: {job_line(j)}")
    return 0


def add_parser(sub: Any, add_link_options: Any) -> None:
    p = sub.add_parser("cancel", help=HELP, description=(
        HELP[0].upper() + HELP[1:] + ". A job the agent had queued is dropped; one running has its workload's "
        "process group killed, its other points are recorded as not run, and the agent goes "
        "on with its next job. The job's state becomes 'cancelled' for good (also after a "
        "daemon or agent restart); 'sweep --wait' and 'characterize --wait' exit 4 for it. "
        "An older agent cannot cancel: the job then runs to its end there, which 'opptune "
        "status' says in the job's reason. Any daemon of a fleet takes the cancel: the one the "
        "agent is connected to tells it within about a second. Exit 0 when cancelled or "
        "already ended (said in one line), 1 for an unknown job or when the daemon does not "
        "answer, 2 on bad input."))
    p.add_argument("job_id", nargs="?", metavar="JOB_ID",
                   help="the job to cancel ('opptune status' lists them)")
    p.add_argument("--agent", metavar="ID",
                   help="cancel every unfinished job (queued, sent, running, expired) of this "
                        "agent instead")
    add_link_options(p)
    p.set_defaults(func=cmd_cancel)
