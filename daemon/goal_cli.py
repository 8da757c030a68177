"""``opptune recommend`` and ``opptune tune``: the operator's side of a goal's recommendation."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..shared.cpus import format_cpu_list, policies_text
from .console import make_console
from .entry import said
from .objectives import format_seconds, make_goal
from .options import RECONNECT_S, below_least
from .planner import clock_text
from .status_view import state_text

# exit status of recommend and tune when no configuration meets the deadline / power cap: the
# answer (the closest configuration) is printed, nothing is applied
UNMET = 3
# how long recommend --pid/--unit waits for the agent to apply or refuse the configuration: it
# checks the target at once and measures it over a 2 s window, unless a job runs before it
FOLLOW_TARGET_S = 20.0
FOLLOW_POLL_S = 0.2
# recommend --apply waits for the verification where its runs take at most this long by the
# prediction (plus FOLLOW_TARGET_S for the agent to start them); a longer one is left to
# 'opptune status', the command saying how long it takes
VERIFY_WAIT_S = 60.0
# what --apply --json's applied.verification keeps of the status row
VERIFICATION_KEYS = ("state", "error", "verified_time_s", "verified_energy_j")
# how often tune looks again which daemons of the fleet answer (its way on if its own falls
# silent): a status query, every few polls rather than each
FLEET_LOOK_S = 5.0


def goal_args(cmd: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """The query args for the goal options; None after printing one line when they are bad."""
    objective = args.objective or "time"
    try:
        make_goal(objective, args.deadline, args.power_cap)
    except ValueError as exc:
        print(f"opptune {cmd}: {exc}", file=sys.stderr)
        return None
    if below_least(cmd, args, {"cluster": 0, "max_cores": 0}):
        return None
    out: dict[str, Any] = {"agent": args.agent, "workload": args.workload,
                           "objective": objective.lower()}
    for key in ("size", "deadline", "power_cap", "cluster", "max_cores"):
        if getattr(args, key) is not None:
            out[key] = getattr(args, key)
    if args.accept_load:
        out["accept_load"] = True
    return out


def _iv(iv: dict[str, Any], unit: str, spec: str = ".4g") -> str:
    if iv.get("value") is None:
        return "-"
    text = f"{iv['value']:{spec}} {unit}"
    if iv.get("lower") is not None and iv.get("upper") is not None:
        text += f"  ({iv['lower']:{spec}} .. {iv['upper']:{spec}})"
    return text


# What each energy_source (agent/meters/energy.py, agent/run_output.py) is, in a user's words
ENERGY_SOURCE_WORDS = {
    "rapl": "the CPU's RAPL energy counters",
    "hwmon-energy": "energy counters (hwmon)",
    "hwmon-power": "power sensors (hwmon), integrated over each run",
    "energy-model-estimate": "the kernel's energy model x each cpu's busy time (an estimate: "
                             "no power sensor)",
    "workload": "the workload's own figure (energy_j in its output)",
}


def _source_words(label: str) -> str:
    """``rapl:package-0+dram`` and the like: the meter's kind in words (the label if unknown)."""
    kind = label.split(":")[0].split(" ")[0]
    return ENERGY_SOURCE_WORDS.get(kind, label)


def energy_text(r: dict[str, Any]) -> str:
    """Whether the energy figure is measured or modelled, and where it comes from: the runs'
    energy sources, and the board's meter where the runs' figure is another's."""
    if r["energy"] not in ("measured", "modelled"):
        return "no power data: time only"
    sources = [s for s in (r.get("energy_source") or "").split(", ") if s]
    said = {_source_words(s) for s in sources}
    text = ("measured: " if r["energy"] == "measured" else "modelled, not measured: ") + \
        ("; ".join(sorted(said)) or "source unknown")
    meter = _source_words(r.get("meter") or "") if r.get("meter") else None
    if meter and meter not in said:
        text += f"; the board's meter: {meter}"
    return text


def measuring_text(step: dict[str, Any]) -> str:
    """The tune progress line's state while a configuration is measured."""
    n = step["cores"]
    return (f"measuring {n} core{'s' if n != 1 else ''} at "
            f"{clock_text(step['freq_khz'], step.get('clock'))} "
            f"({step['reason']})")


def config_text(r: dict[str, Any], clock: str | None = None) -> str:
    """E.g. "4 cores (cpus 0-3, cluster 0) at 800 MHz"; ``clock``: what applies where no
    frequency is set (default ``r``'s own)."""
    where = f"cpus {format_cpu_list(r['cpus'])}"
    if r.get("cluster") is not None:
        where += f", cluster {r['cluster']}"
    return (f"{r['cores']} core{'s' if r['cores'] != 1 else ''} ({where}) at "
            f"{clock_text(r['freq_khz'], clock or r.get('clock'))}")


def recommendation_table(r: dict[str, Any], title: str | None = None) -> Table:
    """The recommendation's figures, one short cell each; what takes a sentence (why the
    runner-up was not chosen, the load, the broken limits) is in :func:`recommendation_notes`,
    printed under the table: in a cell it widened the table past 200 columns."""
    t = Table(title=title or f"{r['workload']} ({r['size']}) on {r['agent']}: "
                             f"{r['goal_text']}", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("configuration", config_text(r))
    pols = r.get("freq_per_policy") or {}
    if pols:
        t.add_row("frequency per policy", policies_text(pols, clock_text))
    t.add_row("time", _iv(r["time_s"], "s"))
    t.add_row("power", _iv(r["power_w"], "W", ".3g"))
    t.add_row("energy", _iv(r["energy_j"], "J"))
    t.add_row("energy is", energy_text(r))
    t.add_row("objective", f"{r['objective_value']:.4g} {r['unit']}")
    if r.get("runner_up"):
        ru = r["runner_up"]
        why = ", see below" if r["margin"] < 0 else ""
        t.add_row("runner-up", f"{config_text(ru, r.get('clock'))}: "
                               f"{ru['objective_value']:.4g} {r['unit']} "
                               f"({r['margin'] * 100:+.1f} %{why})")
    elif r["met"]:
        t.add_row("runner-up", "none (a single candidate meets the goal)")
    else:  # the closest configuration is shown; "a candidate meets it" would contradict limits
        t.add_row("runner-up", "none (no configuration meets the limits)")
    t.add_row("rests on", f"{r['n_measurements']} runs of {r['n_configurations']} "
                          f"configurations ({r['n_candidates']} candidates)")
    basis = r.get("rests_on") or {}
    if basis.get("marked_runs") or basis.get("outliers_left_out"):
        t.add_row("load", Text(_load_cell(basis), style=_load_style(basis)))
    t.add_row("model", f"time {r['model']}; power {r['power_model'] or '-'}")
    if not r["met"]:
        t.add_row("[red]limits[/red]", "[red]not met, see below[/red]")
    return t


def _load_cell(basis: dict[str, Any]) -> str:
    marked = basis.get("marked_runs") or 0
    parts = [f"{basis.get('clean_runs') or 0} clean runs"]
    if marked:
        parts.append(f"{marked} marked {'used' if basis.get('marked_used') else 'left out'}")
    if basis.get("outliers_left_out"):
        parts.append(f"{basis['outliers_left_out']} outliers left out")
    return ", ".join(parts) + ", see below"


def _load_style(basis: dict[str, Any]) -> str:
    return "yellow" if basis.get("marked_used") or basis.get("unclean_points") else ""


def recommendation_notes(r: dict[str, Any]) -> list[Text]:
    """The lines under :func:`recommendation_table` its ``see below`` cells point to."""
    out = []
    if r.get("runner_up") and r["margin"] < 0:
        # objectives.choose: fewest cores, then lowest clock within tolerance
        out.append(Text(f"runner-up ({r['margin'] * 100:+.1f} %): better, but within the "
                        "daemon's tolerance the fewest cores, then the lowest clock, are chosen"))
    basis = r.get("rests_on") or {}
    if basis.get("marked_runs") or basis.get("outliers_left_out"):
        out.append(Text(f"load: {basis['text']}", style=_load_style(basis)))
    if not r["met"]:
        out.append(Text(f"limits: {r['note']}", style="red"))
    if r.get("beyond"):  # absent from an older daemon's answer
        out.append(Text(f"beyond: {r['beyond']}"))
    if r.get("noise"):  # absent from an older daemon's answer
        out.append(Text(f"interval: {r['noise']}"))
    if r.get("scaling"):  # absent from an older daemon's answer
        out.append(Text(f"scaling: {r['scaling']}", style="yellow"))
    return out


def print_recommendation(con: Console, r: dict[str, Any]) -> None:
    con.print(recommendation_table(r))
    for line in recommendation_notes(r):
        con.print(line, soft_wrap=True)


def cmd_recommend(args: argparse.Namespace) -> int:
    from .client import daemon_endpoint
    from .client import ask
    q = goal_args("recommend", args)
    if q is None:
        return 2
    if args.apply or args.pid is not None or args.unit:
        q["apply"] = True
    if args.pid is not None:
        if args.pid <= 0:
            print(f"opptune recommend: --pid must be a process id (> 0), not {args.pid}",
                  file=sys.stderr)
            return 2
        q["target"] = {"kind": "pid", "pid": args.pid}
    elif args.unit:
        q["target"] = {"kind": "unit", "unit": args.unit}
    data, rc = ask("opptune recommend", daemon_endpoint(args), "recommend", q,
                   timeout_s=args.timeout,
                   changes=f"'opptune status --agent {args.agent}' lists the configurations "
                           "pushed to it; running this again would push another" if q.get("apply")
                   else None)
    if rc is not None:
        return rc
    # 3: answered, but the limits are not met (the closest configuration, never pushed)
    rc = 0 if data["met"] else UNMET
    applied = data.get("applied") or {}
    if "target" in q and applied.get("state") == "pushed":
        # a process or unit is checked by the agent at once (gone, the agent's own, a virtual
        # board): "pushed" and exit 0 would hide the refusal behind 'opptune status'
        outcome = follow_target(daemon_endpoint(args), data["agent"], applied["config_id"],
                                args.timeout)
        if outcome is not None:
            applied["state"] = outcome["state"]
            applied["reason"] = outcome["error"]
            if outcome["state"] == "refused":
                rc = 1
    waited = None  # how long recommend --apply waited in vain for the verification
    stopped: KeyboardInterrupt | None = None  # Ctrl-C or SIGTERM during that wait
    if "target" not in q and applied.get("state") == "pushed":
        seconds = verification_s(data)
        applied["verification"] = None
        if seconds is not None and seconds <= VERIFY_WAIT_S:
            start = time.monotonic()
            try:  # from the line on: an interrupt at once is one during the wait
                if not args.json:
                    print(f"opptune recommend: {applied['config_id']} pushed to "
                          f"{data['agent']}; waiting for its verification "
                          f"({verification_text(data, seconds)})", file=sys.stderr)
                row = follow_target(daemon_endpoint(args), data["agent"],
                                    applied["config_id"], args.timeout,
                                    seconds + FOLLOW_TARGET_S)
                waited = time.monotonic() - start
            except KeyboardInterrupt as exc:  # stops the waiting, not the verification
                row, stopped = None, exc
            if row is not None:
                applied["verification"] = {k: row.get(k) for k in VERIFICATION_KEYS}
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        print_outcome(data, waited)
    if stopped is not None:
        # the push is the daemon's and the agent's: leaving without a word would hide that
        # the board runs at it (cli.main gives the interrupt's exit status)
        print(f"opptune recommend: stopped waiting for the verification of "
              f"{applied['config_id']}; it stays pushed to {data['agent']}, which applies it, "
              "verifies it and keeps it in force until another applied configuration "
              f"replaces it; 'opptune status --agent {data['agent']}' shows its verdict",
              file=sys.stderr)
        raise said(stopped)
    return rc


def print_outcome(data: dict[str, Any], waited: float | None) -> None:
    """recommend's table and the line on what became of --apply's push (``waited``: how
    long it waited in vain for the verification, pushed_text)."""
    con = make_console()
    print_recommendation(con, data)
    if not data["met"] and not data.get("applied"):
        # without --apply the limits' line said what is broken, not what to do about it
        from .goal_query import advice
        con.print(f"to meet the limits: {advice(data)}", markup=False, soft_wrap=True)
    if data.get("applied"):
        a, agent = data["applied"], data["agent"]
        if a["state"] == "withheld":
            con.print(f"not applied: {a['reason']}", markup=False, soft_wrap=True)
        elif a["state"] == "unsent":
            if a.get("reason"):  # a pid/unit target's: never sent later
                con.print(f"{a['config_id']} for {agent}: {a['reason']}")
            else:
                con.print(f"not sent: stored for {agent} as {a['config_id']} (unsent); {agent} "
                          f"is not connected: it is sent when {agent} says hello again (the "
                          "newest of its group only); 'opptune status' shows its state")
        elif a["state"] == "refused":
            con.print(f"refused by {agent} ({a['config_id']}): {a['reason']}", markup=False,
                      soft_wrap=True)
        elif a["state"] == "pushed":
            con.print(pushed_text(data, waited), markup=False, soft_wrap=True)
        else:
            con.print(f"{a['config_id']} on {agent}: {a.get('reason') or a['state']}; "
                      "'opptune status' shows what it measured", markup=False, soft_wrap=True)
        if a.get("not_kept") and a["state"] not in ("withheld", "refused"):
            con.print(a["not_kept"], markup=False, soft_wrap=True)


def verification_s(data: dict[str, Any]) -> float | None:
    """How long the verification runs of a pushed recommendation take by its prediction (the
    interval's upper end, each of the agent's ``verify_runs``); None where the daemon's
    answer does not say how many (an older daemon)."""
    runs = (data.get("applied") or {}).get("verify_runs")
    t = data.get("time_s") or {}
    each = t.get("upper") or t.get("value")
    return None if not runs or each is None else runs * each


def verification_text(data: dict[str, Any], seconds: float) -> str:
    runs = data["applied"]["verify_runs"]
    return (f"the agent runs {data['workload']} {runs} time{'s' if runs != 1 else ''} at it, "
            f"about {format_seconds(seconds)} by the prediction")


def pushed_text(data: dict[str, Any], waited: float | None = None) -> str:
    """The line on a pushed recommendation: its verdict where the command waited for it, as
    ``opptune status`` says it; else, after ``waited`` seconds in vain, that it was not
    verified yet, or how long its verification takes; and where to see it."""
    a, agent = data["applied"], data["agent"]
    see = f"'opptune status --agent {agent}' shows its verdict"
    v = a.get("verification")
    if v:
        measured = (f"; measured {v['verified_time_s']:.4g} s" if v.get("verified_time_s")
                    is not None else "")
        return f"{a['config_id']} on {agent}: {state_text(v)}{measured}"
    if waited is not None:
        return (f"pushed to {agent} as {a['config_id']}: not verified after "
                f"{format_seconds(waited)} (a job of {agent}'s may run before it); {see}")
    seconds = verification_s(data)
    if seconds is None:  # an older daemon: how long is not known
        return f"pushed to {agent} as {a['config_id']} (pushed); {see}"
    return (f"pushed to {agent} as {a['config_id']}: {verification_text(data, seconds)}; "
            f"{see}")


def follow_target(endpoint: str, agent: str, config_id: str, timeout_s: float,
                  within_s: float = FOLLOW_TARGET_S) -> dict[str, Any] | None:
    """``config_id``'s status row once the agent has applied, verified or refused it; None
    when it is still pushed after ``within_s`` (a job runs before it) or the daemon stops
    answering (the push stands: 'opptune status' follows it)."""
    from .client import DaemonUnreachable, QueryFailed, query
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            page = query(endpoint, "status", {"agent": agent, "limit": 20,
                                              "only": ["recommendations"]},
                         timeout_s=timeout_s)
        except (DaemonUnreachable, QueryFailed):
            return None
        for r in page["recommendations"]:
            if r["config_id"] == config_id and r["state"] not in ("pushed", "unsent"):
                return r
        time.sleep(FOLLOW_POLL_S)  # poll interval of the daemon's status
    return None


# what --follow and --stop leave out: the options that start a session (dest, as typed)
STARTING_OPTIONS = (("agent", "--agent"), ("workload", "--workload"), ("size", "--size"),
                    ("objective", "--objective"), ("deadline", "--deadline"),
                    ("power_cap", "--power-cap"), ("cluster", "--cluster"),
                    ("max_cores", "--max-cores"), ("accept_load", "--accept-load"),
                    ("budget", "--budget"), ("reps", "--reps"))


def cmd_tune(args: argparse.Namespace) -> int:
    from .client import daemon_endpoint
    from .client import ask
    tune_id = args.follow if args.follow is not None else args.stop
    if tune_id is not None:
        flag = "--follow" if args.follow is not None else "--stop"
        given = [typed for dest, typed in STARTING_OPTIONS if getattr(args, dest)]
        if given:
            print(f"opptune tune: {flag} takes a session's id only; leave out "
                  f"{', '.join(given)} (they start a session)", file=sys.stderr)
            return 2
        if not tune_id.strip():
            print(f"opptune tune: {flag} needs a session's id (tune-...: 'opptune status' "
                  "lists the open ones)", file=sys.stderr)
            return 2
        if args.stop is not None:
            return stop_tune(args, daemon_endpoint(args), tune_id.strip())
        endpoint = daemon_endpoint(args)
        session, rc = ask("opptune tune", endpoint, "tune_status",
                          {"tune_id": tune_id.strip()}, timeout_s=args.timeout)
        return rc if rc is not None else follow_to_end(args, endpoint, session)
    missing = [typed for dest, typed in STARTING_OPTIONS[:2] if getattr(args, dest) is None]
    if missing:
        print(f"opptune tune: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
              "needed to start a session (--follow TUNE_ID or --stop TUNE_ID for one going "
              "on)", file=sys.stderr)
        return 2
    q = goal_args("tune", args)
    if q is None:
        return 2
    if below_least("tune", args, {"budget": 1, "reps": 1}):
        return 2
    for key in ("budget", "reps"):
        if getattr(args, key) is not None:
            q[key] = getattr(args, key)
    endpoint = daemon_endpoint(args)
    session, rc = ask("opptune tune", endpoint, "tune", q, timeout_s=args.timeout,
                      changes=f"'opptune status --agent {args.agent}' lists the jobs of a "
                              "session; running this again would start a second one")
    if rc is not None:
        return rc
    return follow_to_end(args, endpoint, session)


def follow_to_end(args: argparse.Namespace, endpoint: str, session: dict[str, Any]) -> int:
    """Follow ``session`` (a ``tune_status`` view) until it ends, print its verdict, and
    return tune's exit status: 0 done, 3 unmet, 1 failed or stopped (or no daemon answers)."""
    tune_id = session["tune_id"]
    if session.get("frequencies_not_tuned"):  # absent from an older daemon's answer
        # said once, as sweep says it; stdout holds the verdict (with --json, its field)
        print(session["frequencies_not_tuned"], file=sys.stderr)
    try:
        final = follow_tune(endpoint, session, args.timeout, args.no_progress,
                            args.reconnect_s)
    except KeyboardInterrupt as exc:
        # the session is the daemon's: leaving without a word would hide that it still
        # applies a configuration to the board
        print(f"opptune tune: stopped following {tune_id}; the session goes on in the daemon "
              "(it measures, recommends and applies on its own); 'opptune status' lists it "
              "under 'tune sessions (open)' until it ends; 'opptune tune --follow "
              f"{tune_id}' follows it again, 'opptune tune --stop {tune_id}' ends it",
              file=sys.stderr)
        raise said(exc)
    if final is None:
        return 1
    if args.json:
        json.dump(final, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        print_verdict(final, make_console())
    if final["state"] == "unmet":
        return UNMET
    if final["state"] != "done":
        print(f"opptune tune: {final['tune_id']} "
              f"{'stopped' if final['state'] == 'stopped' else 'failed'}: {final['reason']}",
              file=sys.stderr)
        return 1
    return 0


def stop_tune(args: argparse.Namespace, endpoint: str, tune_id: str) -> int:
    """``tune --stop``: 0 when the session is stopped now or had ended before."""
    from .client import ask
    data, rc = ask("opptune tune", endpoint, "tune_stop", {"tune_id": tune_id},
                   timeout_s=args.timeout,
                   changes=f"'opptune tune --follow {tune_id}' shows whether it stopped; "
                           "running this again is safe")
    if rc is not None:
        return rc
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    if not data["stopped"]:
        print(f"opptune tune: {tune_id} had already ended: {data['state']}: {data['reason']}")
        return 0
    n = data["measured"]
    print(f"opptune tune: {tune_id} ({data['workload']} ({data['size']}) on {data['agent']}, "
          f"{n} configuration{'s' if n != 1 else ''} measured) is stopped: "
          f"{data['reason']}; nothing more is measured or applied for it")
    job = data.get("job_cancelled")
    if job:
        from .cancel_cli import stop_text
        how = stop_text(data["agent"], job["state"], job.get("told"), job.get("via"))
        print(f"its job {job['job_id']} ({job['state']}, one configuration) is cancelled: "
              f"{how}; the runs it measured are stored, and count for later tunes and "
              "recommendations")
    job = data.get("job_left")  # an older daemon's: it could not cancel the job
    if job:
        print(f"its job {job['job_id']} ({job['state']}, one configuration) runs to its end "
              f"on {data['agent']}: a job sent cannot be called back; its runs are stored, and "
              "count for later tunes and recommendations")
    return 0


def follow_tune(endpoint: str, session: dict[str, Any], timeout_s: float, quiet: bool = False,
                reconnect_s: float = RECONNECT_S) -> dict[str, Any] | None:
    """Show the session's progress on stderr until it is done or failed; its last view, or
    None (after one line) when no daemon answers for ``reconnect_s`` (--reconnect-s). Where the daemon is one
    of a fleet, the session is followed through another that answers as soon as it stops
    answering (as sweep --wait follows its jobs): the fleet shares the store, and the daemon
    the agent fails over to takes the session up; while none answers, each daemon of the
    fleet is asked in turn."""
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .client import DaemonUnreachable, QueryFailed, query
    from .store import TUNE_FINAL_STATES
    from .sweep_wait import POLL_S, fail_over, fleet_others

    if session["state"] in TUNE_FINAL_STATES:
        return session  # --follow of a session that has ended: its verdict, no progress
    tune_id = session["tune_id"]
    others: list[str] = []  # the fleet's other daemons that answered at the last look
    known: list[str] = []  # every other daemon the fleet named, answering or not
    looked = 0.0

    def look(at: str, leave: str | None = None) -> None:
        """Read the fleet from the status of the daemon at ``at`` (tune_status has no daemon
        row); ``leave``: one that just fell silent, whose heartbeat may still look recent."""
        nonlocal others, looked
        try:
            daemon = query(at, "status", {"only": []}, timeout_s=timeout_s)["daemon"] or {}
        except DaemonUnreachable:
            return  # the last look stands, looked again next poll
        except (QueryFailed, KeyError, TypeError):  # a daemon that predates the fleet
            others, looked = [], time.monotonic()
            return
        looked = time.monotonic()
        others = [e for e in fleet_others(daemon, at) if e != leave]
        for f in daemon.get("fleet") or []:
            e = f.get("endpoint")
            if isinstance(e, str) and e != at and e not in known \
                    and f.get("instance") != daemon.get("instance"):
                known.append(e)

    console = make_console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed} of {task.fields[of]} configurations"),
                  TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                  TextColumn("{task.fields[eta]}"), console=console,
                  disable=quiet) as progress:
        task = progress.add_task(f"tune {session['workload']} on {session['agent']}",
                                 total=None, of="?", state="", eta="")
        say = progress.console.print
        silent_since: float | None = None  # when no daemon answered any more
        silent_at = endpoint  # the daemon that fell silent then
        ring: list[str] = []  # while none answers: the daemons asked in turn
        look(endpoint)
        while True:
            if session["state"] in TUNE_FINAL_STATES:
                break
            if silent_since is None and time.monotonic() - looked >= FLEET_LOOK_S:
                look(endpoint)  # daemons join and leave the fleet during a long session
            of = session["budget"] or session["grid"]
            eta = session.get("eta_s")
            step = (session["steps"] or [{}])[-1]
            state = session["state"]
            if state == "measuring" and step:
                state = measuring_text(step)
            progress.update(task, total=of, completed=session["measured"],
                            of=f"{of}" + (" (budget)" if session["budget"] else " at most"),
                            state=state, eta="" if eta is None else f"ETA {eta:.0f} s")
            time.sleep(POLL_S)  # a polling interval for the display, not synchronisation
            try:
                session = query(endpoint, "tune_status", {"tune_id": tune_id},
                                timeout_s=timeout_s)
                if silent_since is not None:
                    say(f"opptune tune: the daemon answers again; following {tune_id}"
                        if endpoint == silent_at else
                        f"opptune tune: the fleet's daemon at {endpoint} answers; following "
                        f"{tune_id} through it", markup=False, soft_wrap=True)
                    silent_since = None
                    look(endpoint)
            except DaemonUnreachable as exc:
                if silent_since is None:
                    nxt = fail_over(others, endpoint, timeout_s, "opptune tune", tune_id,
                                    "it", progress.console)
                    if nxt is not None:
                        gone, endpoint = endpoint, nxt
                        look(endpoint, leave=gone)
                        continue
                # a restarting daemon resumes the session from its store, and a fleet's
                # daemon takes it up when the agent fails over to it: wait for either
                now = time.monotonic()
                if silent_since is None:
                    silent_since, silent_at = now, endpoint
                    ring = [endpoint] + [e for e in known if e != endpoint]
                    say(f"opptune tune: {exc}; retrying for up to {reconnect_s:g} s (a "
                        "restarted daemon resumes the session" + (
                            f"; the fleet's other daemons are asked in turn: "
                            f"{', '.join(ring[1:])}" if len(ring) > 1 else "") + ")",
                        markup=False, soft_wrap=True)
                if now - silent_since < reconnect_s:
                    ring.append(ring.pop(0))
                    endpoint = ring[0]
                    continue
                progress.stop()
                if len(ring) > 1:
                    print(f"opptune tune: no answer from the daemon at {silent_at} nor from "
                          f"the other daemons of its fleet ({', '.join(ring[1:])}) for "
                          f"{now - silent_since:.0f} s; the session {tune_id} is kept in the "
                          "store and goes on through the daemon its agent connects to",
                          file=sys.stderr)
                else:
                    print(f"opptune tune: {exc} for {now - silent_since:.0f} s; the session "
                          f"{tune_id} may go on in the daemon", file=sys.stderr)
                return None
            except QueryFailed as exc:  # e.g. a daemon on another store: no such session
                progress.stop()
                print(f"opptune tune: {exc}", file=sys.stderr)
                return None
    return session


def print_verdict(s: dict[str, Any], con: Console) -> None:
    # the sampler's stop reason counts the configurations stored before the session too
    segs = "; ".join(f"{x['variant'] or 'board'}: {x['measured']} measured"
                     + (f" + {x['measured_before']} before" if x.get("measured_before") else "")
                     + f" of {x['grid']} ({x['stop_reason'] or 'not finished'})"
                     for x in s["segments"])
    before = (f" ({s['measured_before']} more measured before this session)"
              if s.get("measured_before") else "")
    con.print(f"tune {s['tune_id']}: {s['goal_text']} of {s['workload']} ({s['size']}) on "
              f"{s['agent']}: measured {s['measured']} of {s['grid']} configurations{before} "
              f"in {s['elapsed_s']:.1f} s ({segs})", markup=False, soft_wrap=True)
    basis = (s.get("recommendation") or {}).get("rests_on") or {}
    if s.get("accept_load") and basis.get("marked_used"):  # said only when it changed something
        con.print("--accept-load: runs marked for interference count; what follows holds for "
                  "the board under the load it was measured under, not for a quiet board",
                  markup=False, soft_wrap=True)
    if s.get("recommendation"):
        print_recommendation(con, s["recommendation"])
    v = s.get("verification")
    reason = s["reason"]
    if v:
        error = v.get("error")
        if error and error.startswith("off by"):  # it gives the measured and predicted times
            line = f"verification: {error}"
        else:
            line = (f"verification: {v['state']}, measured {v['verified_time_s']:.4g} s, "
                    f"predicted {v['predicted_time_s']:.4g} s"
                    if v.get("verified_time_s") is not None else f"verification: {v['state']}")
            energy, predicted = v.get("verified_energy_j"), v.get("predicted_energy_j") or {}
            if energy is not None and predicted.get("value") is not None:
                # an energy goal's verdict judged the energy too (recommender.judge)
                line += f"; {energy:.4g} J, predicted {predicted['value']:.4g} J"
            line += f" ({error})" if error else ""
        con.print(line, markup=False, soft_wrap=True)
        # the daemon's reason repeats the verification's error: said on the line above
        said = f"applied and {v['state']}"
        if reason == said + (f" ({error})" if error else ""):
            reason = said
    con.print(f"{s['state']}: {reason}", markup=False, soft_wrap=True)
    not_kept = ((s.get("recommendation") or {}).get("applied") or {}).get("not_kept")
    if s["state"] == "done" and not_kept:  # "applied and verified", but not for long
        con.print(not_kept, markup=False, soft_wrap=True)
