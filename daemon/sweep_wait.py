"""``opptune sweep --wait``: follow the jobs of a sweep to their final state.

A progress bar per job on stderr (runs received of expected); exit 0 when every job is done
over all its points, ``STOPPED_EXIT`` (3) when each is done but one or more the agent stopped
after points in a row timed out (stop_after_timeouts: what ran before is stored, the rest never
ran; one line says so), ``CANCELLED_EXIT`` (4) when one or more was cancelled by the user
(opptune cancel, tune --stop) and none failed, 1 with each reason when one failed or expired
(or the daemon did not answer for ``reconnect_s``, --reconnect-s: one that restarts sooner is
followed on; where another daemon of its fleet answered, the jobs are followed through that
one at once, since the fleet shares the store and the agents fail over); a done job whose
points had marked runs says which and when the daemon measures them again. With ``--json``,
stdout holds only the final job entries of the daemon's status (a JSON list).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .client import DaemonUnreachable, QueryFailed, query
from .console import make_console
from .entry import said
from .jobs import FINAL_JOB_STATES, runs_text, stopped_early
from .options import RECONNECT_S

POLL_S = 0.5  # how often the display is refreshed from the daemon's status
# every job done, one or more stopped by the agent for its timeouts before all points ran (as
# recommend's 3: the command did its work, and the result falls short of what was asked)
STOPPED_EXIT = 3
# every job ended, one or more cancelled by the user before all its points ran (none failed)
CANCELLED_EXIT = 4


def wait_for_jobs(endpoint: str, job_ids: list[str], timeout_s: float = 5.0,
                  as_json: bool = False, console: Console | None = None,
                  prog: str = "opptune sweep", reconnect_s: float = RECONNECT_S) -> int:
    console = console or make_console(stderr=True)
    try:
        return _wait(endpoint, job_ids, timeout_s, as_json, console, prog, reconnect_s)
    except KeyboardInterrupt as exc:
        ids = ", ".join(job_ids[:3]) + (f" and {len(job_ids) - 3} more" if len(job_ids) > 3
                                        else "")
        console.print(f"{prog}: stopped waiting; the jobs go on in the daemon: {ids}; 'opptune "
                      "status' follows them" + ("; run it again to resume waiting"
                                                if prog == "opptune characterize" else ""),
                      markup=False, soft_wrap=True)
        raise said(exc)


def _wait(endpoint: str, job_ids: list[str], timeout_s: float, as_json: bool,
          console: Console, prog: str, reconnect_s: float) -> int:
    jobs: dict[str, dict[str, Any]] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  # "?" until the daemon's first answer says how many (rich's None read
                  # "0/None runs" under a job id while a busy daemon took seconds)
                  TextColumn("{task.completed}/{task.fields[expected]} runs"),
                  TextColumn("{task.fields[state]}"),
                  TimeElapsedColumn(), console=console) as progress:
        tasks = {j: progress.add_task(j, total=None, state="", expected="?")
                 for j in job_ids}
        silent_since: float | None = None  # when the daemon stopped answering
        others: list[str] = []  # the fleet's other daemons that answered at the last poll
        while True:
            try:
                status = query(endpoint, "status", jobs_query(job_ids), timeout_s=timeout_s)
            except (DaemonUnreachable, QueryFailed) as exc:
                now = time.monotonic()
                nxt = fail_over(others, endpoint, timeout_s, prog, "the jobs", "them",
                                progress.console) if isinstance(exc, DaemonUnreachable) else None
                if nxt is not None:
                    endpoint = nxt
                    continue
                if isinstance(exc, DaemonUnreachable):
                    if silent_since is None:
                        silent_since = now
                        progress.console.print(
                            f"{prog}: {exc}; retrying for up to {reconnect_s:g} s (a "
                            "restarted daemon goes on with the jobs of its store)",
                            markup=False, soft_wrap=True)
                    if now - silent_since < reconnect_s:
                        time.sleep(POLL_S)  # a polling interval, not synchronisation
                        continue
                progress.stop()
                again = ("run it again to follow them" if prog == "opptune characterize"
                         else "'opptune status' follows them")
                console.print(f"{prog}: {exc}; the jobs are kept in the daemon's store and "
                              f"go on when it runs again: {again}", markup=False,
                              soft_wrap=True)
                return 1
            if silent_since is not None:
                progress.console.print(f"{prog}: the daemon answers again; following the "
                                       "jobs", markup=False, soft_wrap=True)
                silent_since = None
            others = fleet_others(status.get("daemon") or {}, endpoint)
            jobs = {j["job_id"]: j for j in status.get("jobs") or [] if j["job_id"] in tasks}
            agents = {a["id"]: a for a in status.get("agents") or []}
            for job_id, task in tasks.items():
                j = jobs.get(job_id)
                if j is not None:
                    progress.update(task, description=f"{j['workload']} on {j['board']}",
                                    total=j["expected"] or None,
                                    # the runs recorded not run (a cancel, a timeout) ran not at all
                                    completed=j["received"] - (j.get("not_run") or 0),
                                    expected=j["expected"] or "?",
                                    state=state_text(j, agents.get(j.get("agent"))))
            if len(jobs) == len(tasks) and all(j["state"] in FINAL_JOB_STATES
                                               and not _agent_ending(j, agents)
                                               for j in jobs.values()):
                break
            time.sleep(POLL_S)  # a polling interval for the display, not synchronisation
    final = [jobs[j] for j in job_ids]
    if as_json:
        json.dump(final, sys.stdout, indent=2, sort_keys=True)
        print()
    cancelled = [j for j in final if j["state"] == "cancelled"]
    bad = [j for j in final if j["state"] not in ("done", "cancelled")]
    short = [j for j in final if j["state"] == "done" and stopped_early(j)]
    again = {(m["agent"], m["workload"], m["size"]): m for m in status.get("remeasure") or []}
    for j in final:
        line = (f"job {j['job_id']} ({j['workload']} on {j['board']}) {j['state']}: "
                f"{runs_text(j)}")
        if j["reason"]:
            line += f"; {j['reason']}"
        m = again.get((j.get("agent"), j["workload"], j["size"]))
        if j["state"] == "done" and m is not None:
            line += "; " + remeasure_note(m)
        console.print((f"{prog}: " if j in bad or j in short or j in cancelled else "")
                      + line, markup=False, soft_wrap=True)
    if cancelled and not bad:
        n = len(cancelled)
        console.print(f"{prog}: exit {CANCELLED_EXIT}: {n} of {len(final)} job"
                      f"{'s' * (len(final) != 1)} cancelled (opptune cancel, tune --stop); "
                      "the runs measured before are kept", markup=False, soft_wrap=True)
        return CANCELLED_EXIT
    if short and not bad:
        console.print(stopped_line(prog, short, len(final)), markup=False, soft_wrap=True)
        return STOPPED_EXIT
    return 1 if bad else 0


def stopped_line(prog: str, short: list[dict[str, Any]], of: int) -> str:
    """The one line that says why the exit status is ``STOPPED_EXIT``."""
    n = len(short)
    names = ", ".join(f"{j['workload']} ({j['job_id']})" for j in short[:3]) + (
        f" and {n - 3} more" if n > 3 else "")
    return (f"{prog}: exit {STOPPED_EXIT}: {n} of {of} job{'s' * (of != 1)} stopped before all "
            f"{'its' if n == 1 else 'their'} points ran: {names}; the agent stops a job after "
            "stop_after_timeouts points in a row timed out, keeping what ran before (where "
            "the workload is only slow, raise run_timeout_s in the agent's configuration)")


def jobs_query(job_ids: list[str]) -> dict[str, Any]:
    """The status query's arguments for following ``job_ids``: those jobs, the agents (is one
    offline?) and the re-measurements, nothing else (the whole status of a large store held
    the daemon's loop 0.2 s, every POLL_S; a daemon that predates them sends it all)."""
    return {"jobs": list(job_ids), "only": ["agents", "jobs", "remeasure"]}


def fleet_others(daemon: dict[str, Any], endpoint: str) -> list[str]:
    """The endpoints of the other daemons of the fleet that answer (status daemon.fleet;
    none from a daemon alone or one that predates the field)."""
    return [f["endpoint"] for f in daemon.get("fleet") or []
            if f.get("answering") and f.get("instance") != daemon.get("instance")
            and isinstance(f.get("endpoint"), str) and f["endpoint"] != endpoint]


def fail_over(others: list[str], gone: str, timeout_s: float, prog: str, what: str,
              them: str, console: Console) -> str | None:
    """The fleet's next daemon to follow ``what`` through (taken from ``others``, said in one
    line) once the one at ``gone`` stopped answering; None where no other answered at the last
    look (a daemon alone is waited for: a restarted one goes on from its store). The daemons
    of a fleet share the store and the agents fail over to them, so another answers for the
    same jobs and sessions. Only reads go there: a change request unanswered is asked about
    again at its own daemon alone (client.ask), since the others do not know it."""
    if not others:
        return None
    endpoint = others.pop(0)
    console.print(f"{prog}: no answer from the daemon at {gone} within {timeout_s:g} s; "
                  f"following {what} through the fleet's daemon at {endpoint} (the agents "
                  f"fail over to it; 'opptune status --daemon {endpoint}' shows {them})",
                  markup=False, soft_wrap=True)
    return endpoint


def state_text(job: dict[str, Any], agent: dict[str, Any] | None) -> str:
    """A job's state for its progress bar; while it waits on an agent that is offline, says
    so (else a queued bar of a board that is off looks like a hang)."""
    if job["state"] in FINAL_JOB_STATES or agent is None or agent.get("alive"):
        return job["state"]
    seen = agent.get("last_seen_s")
    return (f"{job['state']}: agent {agent['id']} offline"
            + (f", last seen {seen:.0f} s ago" if isinstance(seen, (int, float)) else ""))


def remeasure_note(m: dict[str, Any]) -> str:
    """What the daemon does with a job's points whose runs were marked (status ``remeasure``):
    '1 point marked (at 2 cores: interference: ...): measured again in 10 s (retry 1); ...'."""
    from .remeasure import marked_point_text
    pts = m.get("points") or []
    what = "; ".join(marked_point_text(p) for p in pts[:3]) + ("; ..." if len(pts) > 3 else "")
    head = f"{len(pts)} point{'s' if len(pts) != 1 else ''} marked ({what})"
    if m["state"] == "never clean":
        return f"{head}: never measured clean; 'opptune status' says what it rests on"
    when = (f"in {m['due_in_s']:.0f} s" if m["state"] == "waiting" and m.get("due_in_s")
            is not None else "now")
    return (f"{head}: measured again {when} (retry {m['retry']}); 'opptune status' follows "
            f"{'them' if len(pts) != 1 else 'it'}")


def _agent_ending(job: dict[str, Any], agents: dict[str, dict[str, Any]]) -> bool:
    """Whether ``job`` was cancelled while its agent held it and that agent, connected, has
    not yet ended it: its runs not run are on their way, and the counts are not final until
    they arrive. An agent not connected ends it at its next hello: not waited for."""
    held = (job.get("stopped") or {}).get("held")
    agent = agents.get(job.get("agent") or "") or {}
    return job["state"] == "cancelled" and bool(held) and bool(agent.get("alive"))
