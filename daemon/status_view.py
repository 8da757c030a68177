"""Human-readable rendering of the daemon's status reply (``opptune status``)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from ..shared.clock_words import kept_clock_text
from ..shared.cpus import format_cpu_list
from ..shared.standing import WHILE_RUNNING
from .console import make_console
from .planner import clock_text, frequencies_not_swept


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def params_text(model: Any, params: dict[str, Any] | None) -> str:
    """A fit's numeric parameters as ``name=value, ...``; a combination (``combo``) by its
    members' weights only (its members' own parameters would fill a screen)."""
    shown = {k: v for k, v in (params or {}).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if model == "combo":
        shown = {k[2:]: v for k, v in shown.items() if k.startswith("w.")}
    return ", ".join(f"{k}={v:.3g}" for k, v in shown.items())


def board_facts(platform: Any) -> tuple[str, str, str]:
    """(arch, kernel, distribution) of a board's platform facts; "unknown" for what is
    missing (an agent older than these facts, a tree without os-release)."""
    p = platform if isinstance(platform, dict) else {}
    dist = p.get("distribution") if isinstance(p.get("distribution"), dict) else {}
    name = dist.get("pretty_name") or " ".join(
        str(dist[k]) for k in ("id", "version_id") if dist.get(k)) or None
    return tuple(str(v) if v else "unknown"  # type: ignore[return-value]
                 for v in (p.get("arch"), p.get("kernel"), name))


def alive_text(agent: dict[str, Any], refused: dict[str, str] | None = None) -> str:
    """The agents table's "alive" cell: yes (connected to this daemon), online through
    another daemon of the fleet (its endpoint: where to send requests for it), ? (heard
    through a daemon that does not say which: :func:`unrecorded_text` under the table), or
    no (with its key's state where the operator ``refused`` it: agent id -> rejected/revoked)."""
    if agent.get("alive"):
        return "yes"
    if agent.get("via"):
        return f"no; online through {agent['via']}"
    if agent.get("via_unrecorded"):
        return "?; see below"
    state = (refused or {}).get(agent.get("id"))  # type: ignore[arg-type]
    return f"no; key {state}" if state else "no"


def failed_text(row: dict[str, Any]) -> str:
    """The failed runs of a status ``runs`` row (or the report's fleet row), with how many of
    them were never run (a job cancelled or stopped: the jobs table's 'N not run')."""
    not_run = row.get("not_run")  # None: a daemon older than the key
    return _fmt(row.get("failed")) + (f" ({not_run} not run)" if not_run else "")


def version_text(row: dict[str, Any], daemon: dict[str, Any]) -> str:
    """An agent's or a fleet daemon's version (status agents[].version, daemon.fleet[].
    version), "older" where it is an earlier release than the ``daemon`` answering."""
    mark = " (older)" if row.get("older") else ""
    if row.get("version") is not None:
        return f"{row['version']}{mark}"
    if row.get("older"):  # a fleet daemon that records none predates version records
        return f"not recorded (older than {daemon.get('version', 'this daemon')})"
    return "-"


def unrecorded_text(agent: dict[str, Any]) -> str | None:
    """The line under the agents table on an agent heard through a daemon of the fleet that
    records neither itself nor its agents in the store (status agents[].via_unrecorded);
    None for any other."""
    if not agent.get("via_unrecorded") or agent.get("alive"):
        return None
    return (f"agent {agent.get('id')}: alive ?, heard {_fmt(agent.get('last_seen_s'), '.0f')} "
            "s ago through another daemon sharing the store that does not record which agents "
            "it holds (one from before the store recorded the fleet, schema 11, still "
            "running on it; or one that stopped since): requests for it go to the daemon it "
            "is connected to; upgrade that daemon to see it here")


def fleet_lines(daemon: dict[str, Any]) -> list[str]:
    """One line per other daemon sharing the store (none for a daemon alone): its version,
    answering or not, since when, and what that means for its agents."""
    out = []
    for f in daemon.get("fleet") or []:
        if f.get("instance") == daemon.get("instance"):
            continue
        head = f"fleet: daemon {f.get('instance')} at {f.get('endpoint')}"
        if "version" in f:  # a daemon before versions in the status says nothing of them
            head += f", version {version_text(f, daemon)},"
        age = f.get("last_seen_s")
        if f.get("answering"):
            out.append(f"{head} answering (heartbeat {_fmt(age, '.0f')} s ago)")
        else:
            out.append(f"{head} not answering: no heartbeat for {_fmt(age, '.0f')} s (killed, "
                       "or its host is down; its agents fail over to the daemons that answer; "
                       f"{_forget_text(daemon.get('fleet_forget_s'))})")
    return out


def _forget_text(forget_s: Any) -> str:
    """When a silent daemon's row goes (status daemon.fleet_forget_s; absent from an older
    daemon, which kept it)."""
    if not isinstance(forget_s, (int, float)) or forget_s <= 0:
        return "its row stays until a daemon starts at that endpoint"
    return (f"its row is dropped once it is silent for {duration_text(forget_s)} "
            "(fleet_forget_s), or when a daemon starts at that endpoint")


def duration_text(seconds: float) -> str:
    """``seconds`` in the largest whole unit that fits: "1 day", "36 h", "90 min", "45 s"."""
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if unit == 'day' and n > 1 else ''}"
    return f"{seconds:g} s"


def refused_key_lines(daemon: dict[str, Any]) -> list[str]:
    """One line per agent key the operator rejected or revoked (status keys_refused)."""
    return [f"key {k.get('id')} of agent {k.get('agent')} was {k.get('state')} by the operator: "
            "its messages are refused and it gets no jobs; to let it in again: opptune keys "
            f"accept {k.get('id')}" for k in daemon.get("keys_refused") or []]


def clash_text(agent: dict[str, Any]) -> str | None:
    """The line on an agent id two connected agents use at once (status agents[].id_clash),
    naming both boards (and the daemon of the fleet the holder is connected to, where not
    this one) and the key that parts them; None without a clash."""
    c = agent.get("id_clash")
    boards = c.get("boards") if isinstance(c, dict) else None
    if not isinstance(boards, list) or len(boards) != 2:
        return None
    held, other = ({k: b.get(k) if isinstance(b, dict) else None
                    for k in ("board", "platform", "instance", "machine", "boot")}
                   for b in boards)
    # of one platform, the machine or boot id (hashed, as the agent's start line shows it)
    # parts two boards, and the agent process two agents
    parts = [k for k in ("machine", "boot") if isinstance(held[k], str)
             and isinstance(other[k], str) and held[k] != other[k]][:1]

    def name(b: dict[str, Any]) -> str:
        if held["platform"] != other["platform"]:
            return f"{b['board']} (platform {b['platform']})"
        ids = "".join(f", {k} {b[k][:8]}" for k in parts)
        # a holder through another daemon is known from the store, which keeps no instance
        inst = f", agent instance {b['instance']}" if b["instance"] else ""
        return f"{b['board']} (platform {b['platform']}{ids}{inst})"
    where = [f" through the daemon at {v}" if isinstance(v, str) and v else ""
             for v in (b.get("daemon") if isinstance(b, dict) else None for b in boards)]
    return (f"agent {agent.get('id')}: two agents use this id at once: {name(held)} holds it"
            f"{where[0]} and gets the jobs, {name(other)} is connected too{where[1]} (its "
            f"results are stored, it gets no jobs); set {c.get('key') or 'agent_id'} in each "
            "board's agent.toml to a name of its own (default: the host name) and restart its "
            "agent")


def standing_lines(agent: dict[str, Any], board: str) -> list[str]:
    """The lines on what a user applied that stands on the board (one per target, a clock a
    newer one overrides said so: shared/standing.py), why the agent dropped one (at its
    restart, or its process exited), or that this daemon does not know (the agent has not
    said hello to it since it started); none when nothing is applied, or from an older
    agent."""
    who = f"board {board} (agent {agent.get('id')})"
    if agent.get("standing_known") is False:
        as_of = agent.get("standings_as_of")
        via = agent.get("via")  # another daemon of the fleet holds its connection
        if via and type(as_of) in (int, float):
            # the store's, as the holder keeps it from the agent's hellos
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(as_of))
            said = f"{when}, as the daemon at {via} that holds its agent keeps it"
            if not agent.get("standings"):
                return [f"{who}: no applied configuration in force as of {said}"]
            return [_standing_line(who, s, said, confirmed=True) for s in agent["standings"]
                    if isinstance(s, dict)]
        if via:
            return [f"{who}: what stands on it is not known to this daemon: its agent said "
                    f"hello to the daemon at {via} (opptune status --daemon {via} shows it)"]
        if type(as_of) not in (int, float):
            return [f"{who}: what stands on it is not known to this daemon: its agent has "
                    "not said hello to it since the daemon started (a connected agent does "
                    "within a heartbeat or two)"]
        # the store's, of its last hello: shown, said unconfirmed until the next one
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(as_of))
        if not agent.get("standings"):
            return [f"{who}: no applied configuration in force as of {when}, not yet "
                    "confirmed (its agent has not said hello to this daemon since it "
                    "started)"]
        return [_standing_line(who, s, when) for s in agent["standings"]
                if isinstance(s, dict)]
    rows = agent.get("standings")
    if not isinstance(rows, list):  # a daemon that knows one per board
        rows = [agent["standing"]] if isinstance(agent.get("standing"), dict) else []
    lines = [_standing_line(who, s) for s in rows if isinstance(s, dict)]
    dropped = agent.get("standings_dropped")
    if not isinstance(dropped, list):
        dropped = [agent["standing_dropped"]] if agent.get("standing_dropped") else []
    rest = ("the others stand" if lines else "the board is at its original settings")
    for d in dropped:  # at the agent's restart, or its process exited while the agent ran
        when = "while the agent ran" if WHILE_RUNNING in str(d) else \
            "when the agent restarted"
        lines.append(f"{who}: the applied configuration was dropped {when}: {d}; {rest}")
    return lines


def _standing_line(who: str, s: dict[str, Any], as_of: str | None = None,
                   confirmed: bool = False) -> str:
    """One configuration in force; ``as_of``: when the agent's last hello said so, to a daemon
    before this one's start (not yet confirmed), or to the daemon of the fleet that holds it
    (``confirmed``: its own word)."""
    # a standing record keeps no clock: what its cpus run at is not known here
    clock = kept_clock_text(s["freq_khz"] if isinstance(s.get("freq_khz"), int) else None)
    target = s.get("target") if isinstance(s.get("target"), dict) else {}
    where = (f", process {target.get('pid')}" if target.get("kind") == "pid" else
             f", unit {target.get('unit')}" if target.get("kind") == "unit" else "")
    cpus = s.get("cpus") if isinstance(s.get("cpus"), list) else []
    # the agent's word, not checked as a job's points are: shown as sent when not numbers
    shown = (format_cpu_list(cpus) if all(type(c) is int for c in cpus)
             else ",".join(map(str, cpus)))
    over = s.get("clock_overridden") if isinstance(s.get("clock_overridden"), list) else []
    note = "".join(
        f"; its clock is overridden on {o.get('policy')} by {o.get('by')} "
        f"({clock_text(o['freq_khz']) if isinstance(o.get('freq_khz'), int) else '?'}), "
        "applied after it" for o in over if isinstance(o, dict))
    note += "".join(_cpus_note(o) for o in (s.get("cpus_overridden") or [])
                    if isinstance(o, dict))
    if target.get("kind") == "pid" and isinstance(target.get("in_unit"), str):
        where += f" in unit {target['in_unit']}"
    said = "" if not as_of else f" as of {as_of}" if confirmed else \
        f" as of {as_of}, not yet confirmed"
    return (f"{who}: applied configuration {s.get('config_id')} in force{said}: "
            f"{s.get('workload')} on cpus {shown} {clock}{where}{note}")


def _cpus_note(o: dict[str, Any]) -> str:
    """A process in a unit, each with a configuration in force (shared/standing.py): whose cpu
    set holds for that process, said on the line of the one that does not."""
    cpus = o.get("cpus") if isinstance(o.get("cpus"), list) else []
    shown = format_cpu_list(cpus) if all(type(c) is int for c in cpus) else "?"
    if "pid" in o:
        return (f"; its cpu set is overridden for process {o.get('pid')} by {o.get('by')} "
                f"(cpus {shown}), the process's own: the narrower target holds for it")
    return (f"; its cpu set is overridden by {o.get('by')} (unit {o.get('unit')}, cpus "
            f"{shown}): a process stays within its unit's cpus")


def predates_text(fit: dict[str, Any], names: dict[Any, str] | None = None) -> str | None:
    """The line under the fits table on a stored fit made before a drift that leaves its
    runs out (status fits[].predates_drift), and what measures the group again; None for a
    current one."""
    e = fit.get("predates_drift")
    if not isinstance(e, dict):
        return None
    group = fit.get("group") if isinstance(fit.get("group"), dict) else {}
    head = f"the fit of {_group(group, names)} predates "
    if e.get("variant") == group.get("variant"):
        # none sent: a changed program's (drift.REDEFINED), or a sweep that could not be sent
        again = ("the drift's sweep" if e.get("job_ids") != [] else
                 f"opptune characterize --agent {e.get('agent')} --size {group.get('input')}"
                 if not group.get("variant")
                 else sweep_hint(e.get("agent"), group))
        whose = (f"agent {e.get('agent')}'s runs from before no longer count (the platform's "
                 "other agents' stay in)" if e.get("agent_only")
                 else "its runs from before no longer count")
        return (head + f"its drift on agent {e.get('agent')}: {whose}; {again} measures it "
                "again and refits it")
    if not e.get("variant"):  # a cluster's group, after the whole board's drift
        return (head + f"the drift of its whole-board group on agent {e.get('agent')}: its "
                "runs from before no longer count (they ran on the cores that drifted); "
                + sweep_hint(e.get("agent"), group) + " measures it again")
    return (head + f"the drift of its {e.get('variant')} group on agent {e.get('agent')}: its "
            "runs from before no longer count (they ran on that cluster too); opptune "
            f"characterize --agent {e.get('agent')} measures it again")


def state_text(rec: dict[str, Any]) -> str:
    """A recommendation's state as the status and the report say it: the verdict, its note,
    and the newer configuration that replaced it on the board (status recommendations[].
    replaced), which the verdict no longer describes as in force."""
    text = str(rec.get("state")) + (f" ({rec['error']})" if rec.get("error") else "")
    replaced = rec.get("replaced")
    if isinstance(replaced, dict):
        at = replaced.get("at")
        when = (f" at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(at))}"
                if isinstance(at, (int, float)) else "")
        text += f"; replaced by {replaced.get('by')}{when}: no longer in force"
    return text


def sweep_hint(agent: Any, group: dict[str, Any]) -> str:
    """The command that measures ``group`` again by hand; a ``cluster<i>`` group is swept
    alone only where the daemon sweeps per cluster."""
    text = (f"opptune sweep --agent {agent} --workload {group.get('workload')} "
            f"--size {group.get('input')}")
    if group.get("variant"):
        text += " with [sweep] per_cluster = true in the daemon's configuration"
    return text


def drift_text(e: dict[str, Any], names: dict[Any, str] | None = None) -> str:
    """The status's line on a drift event: why, and the sweep that measures the group again
    (its jobs' states), why none could be sent, or that none was (what measures it then)."""
    jobs = ", ".join(f"{j} {s}" for j, s in zip(e.get("job_ids") or [],
                                                 e.get("job_states") or []))
    group = e.get("group") if isinstance(e.get("group"), dict) else {}
    if jobs:
        then = f"re-characterising ({jobs})"
    elif e.get("error"):
        then = str(e["error"])
    else:
        then = "no sweep was sent to measure it again: " + sweep_hint(e.get("agent"), group)
    if e.get("recommendation"):
        then += f"; recommended again: {e['recommendation']}"
    return f"drift on {_group(group, names)}: {e.get('reason')}; {then}"


REASON_CELL = 20  # characters of a job's state and reason kept in its cell: the table keeps
# to 120 columns with 24-character job ids and a board named "odroid-xu4 (virtual)"


def runs_cell(job: dict[str, Any]) -> str:
    """The jobs table's runs cell: received/expected, or for a job whose agent recorded
    runs without running them (counted in received: a cancel, a timeout) '1/4 measured, 3
    not run'."""
    received, not_run = job.get("received"), job.get("not_run") or 0
    if not not_run or not isinstance(received, int):
        return f"{received}/{job.get('expected')}"
    return f"{received - not_run}/{job.get('expected')} measured, {not_run} not run"


def job_state_cell(job: dict[str, Any]) -> tuple[str, str | None]:
    """(the jobs table's state cell, the line under the table or None): a reason that takes a
    sentence (a stopped job's made the table 240 columns wide) is printed whole under the
    table, and its cell points there."""
    # done, but the agent stopped it early: its points not measured are in the reason
    state = "stopped" if job.get("stopped") and job.get("state") == "done" else str(
        job.get("state"))
    reason = job.get("reason")
    if not reason:
        return state, None
    if len(state) + 2 + len(str(reason)) <= REASON_CELL:
        return f"{state}: {reason}", None
    return f"{state}, see below", f"job {job.get('job_id')} {state}: {reason}"


def _table(title: str, columns: tuple[str, ...]) -> Table:
    """A table whose cells wrap in a narrow terminal instead of being cut with an ellipsis:
    ids, labels and reasons are what a user copies into the next command."""
    t = Table(title=title)
    for col in columns:
        t.add_column(col, overflow="fold")
    return t


def _print_table(console: Console, t: Table) -> None:
    """The table, or one line where it has no rows: a grid of headers alone reads as a
    display fault on a new daemon's status."""
    if t.row_count:
        console.print(t)
    else:
        console.print(f"{t.title}: none", markup=False)


# the lists whose newest rows are last (a daemon that predates paging sends them whole: the
# view keeps the newest, as a paging daemon picks them)
_NEWEST_LAST = ("jobs", "recommendations", "drift")


def rows_of(data: dict[str, Any], key: str, limit: int | None) -> tuple[list[Any], int]:
    """(the rows of list ``key`` to print, how many the daemon has): a paging daemon has cut
    the list already and says its total in ``page.total``; an older one sends every row."""
    rows = list(data.get(key) or [])
    total = ((data.get("page") or {}).get("total") or {}).get(key)
    if not isinstance(total, int):
        total = len(rows)
    if limit is not None and len(rows) > limit:
        rows = rows[-limit:] if key in _NEWEST_LAST else rows[:limit]
    return rows, total


def more_text(key: str, shown: int, total: int, agent: str | None) -> str | None:
    """'751 more of 771 jobs: opptune status --all for every row, --agent ID for one
    board's'; None when nothing is left out."""
    if total <= shown:
        return None
    how = "--all for every row" + ("" if agent else ", --agent ID for one board's")
    return f"{total - shown} more of {total} {_NAMES.get(key, key)}: opptune status {how}"


_NAMES = {"tunes": "open tune sessions", "runs": "rows of runs", "fit_errors": "fit errors", "remeasure": "re-measurements",
          "drift": "drift events"}


def print_status(data: dict[str, Any], console: Console | None = None,
                 limit: int | None = None, agent: str | None = None) -> None:
    """The status as tables; ``limit``: rows of each at most (the rest counted in a line
    naming --all and --agent; ``agent``: the one asked for)."""
    console = console or make_console()
    lists = {k: rows_of(data, k, limit) for k in ("agents", "runs", "jobs", "fits",
                                                  "fit_errors", "recommendations",
                                                  "remeasure", "drift")}
    data = {**data, **{k: rows for k, (rows, _) in lists.items()}}

    def more(key: str) -> None:
        line = more_text(key, len(lists[key][0]), lists[key][1], agent)
        if line:
            console.print(line, markup=False, soft_wrap=True)
    d = data.get("daemon", {})
    version = f"opptune {d['version']}, " if d.get("version") else ""
    console.print(f"daemon {d.get('instance', '?')} at {d.get('endpoint', '?')}, {version}"
                  f"up {_fmt(d.get('uptime_s'), '.0f')} s, database {d.get('database', '?')}",
                  markup=False, soft_wrap=True)
    for line in fleet_lines(d):
        console.print(line, markup=False, soft_wrap=True)

    t = _table("agents", ("agent", "board", "arch", "kernel", "distribution", "version",
                          "alive", "last seen (s)", "outbox"))
    boards = {}
    platforms = data.get("platforms") or {}
    # groups are keyed by the platform's hash: show the board's name instead
    names: dict[Any, str] = {}
    refused = {k.get("agent"): k.get("state") for k in d.get("keys_refused") or []}
    for a in data.get("agents", []):
        boards[a.get("id")] = a.get("board") or a.get("platform")
        if a.get("platform") and a.get("board"):
            names[a["platform"]] = str(a["board"])
        t.add_row(str(a.get("id")), str(boards[a.get("id")]),
                  *board_facts(platforms.get(a.get("platform"))),
                  version_text(a, d), alive_text(a, refused),
                  _fmt(a.get("last_seen_s"), ".1f"),
                  _fmt(a.get("outbox")) + (", FULL, see below" if a.get("outbox_full") else ""))
    _print_table(console, t)
    more("agents")
    for a in data.get("agents", []):
        # a sentence with a path: in the cell it made the table 330 columns wide
        if a.get("outbox_full"):
            console.print(f"agent {a.get('id')} starts no new run: {a['outbox_full']}",
                          markup=False, soft_wrap=True)
    for k in d.get("keys_pending") or []:
        console.print(f"key {k['id']} of agent {k['agent']} waits for approval: opptune keys "
                      f"accept {k['id']}", markup=False, soft_wrap=True)
    for line in refused_key_lines(d):
        console.print(line, markup=False, soft_wrap=True)
    for line in filter(None, map(unrecorded_text, data.get("agents", []))):
        console.print(line, markup=False, soft_wrap=True)
    for line in filter(None, map(clash_text, data.get("agents", []))):
        console.print(line, markup=False, soft_wrap=True)
    for a in data.get("agents", []):
        if a.get("doctor"):  # agents older than the doctor report send none
            age = a.get("doctor_age_s")
            when = "" if a.get("alive") or age is None else \
                f" (as of its last hello, {age:.0f} s ago)"
            console.print(f"board {boards[a.get('id')]} (agent {a.get('id')}): {a['doctor']}"
                          f"{when}", markup=False, soft_wrap=True)
    for a in data.get("agents", []):
        for line in standing_lines(a, str(boards[a.get("id")])):
            console.print(line, markup=False, soft_wrap=True)
    said = set()
    for a in data.get("agents", []):  # once per board: several agents may share one
        plat = platforms.get(a.get("platform"))
        why = frequencies_not_swept(plat, str(boards[a.get("id")])) \
            if isinstance(plat, dict) and a.get("platform") not in said else None
        if why:
            said.add(a.get("platform"))
            console.print(why, markup=False, soft_wrap=True)

    t = _table("runs", ("agent", "workload", "input", "runs", "failed", "marked"))
    for r in data.get("runs", []):
        t.add_row(str(r.get("agent")), str(r.get("workload")), str(r.get("input")),
                  _fmt(r.get("count")), failed_text(r), _fmt(r.get("marked")))
    _print_table(console, t)
    more("runs")

    t = _table("jobs", ("job", "board", "workload", "size", "runs received/expected",
                        "state"))
    below = []
    for j in data.get("jobs", []):
        state, line = job_state_cell(j)
        if line:
            below.append(line)
        t.add_row(str(j.get("job_id")), str(j.get("board") or boards.get(j.get("agent"))
                                            or j.get("agent")),
                  str(j.get("workload")), _fmt(j.get("size")),
                  runs_cell(j), state)
    _print_table(console, t)
    for line in below:
        console.print(line, markup=False, soft_wrap=True)
    more("jobs")

    tunes, total = rows_of(data, "tunes", limit)
    if tunes:  # open sessions only, and only when there are any (a daemon before them: none)
        t = _table("tune sessions (open)", ("session", "agent", "workload", "goal", "state",
                                            "measured", "since"))
        for r in tunes:
            t.add_row(str(r.get("tune_id")), str(r.get("agent")),
                      f"{r.get('workload')} ({r.get('size')})", str(r.get("goal_text")),
                      str(r.get("state")), _fmt(r.get("measured"))
                      + (f" of {r['budget']} (budget)" if r.get("budget") else ""),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
                      if isinstance(r.get("started"), (int, float)) else "-")
        _print_table(console, t)
        line = more_text("tunes", len(tunes), total, agent)
        if line:
            console.print(line, markup=False, soft_wrap=True)

    t = _table("fits", ("group", "model", "parameters", "MAPE %", "runners-up"))
    for f in data.get("fits", []):
        params = params_text(f.get("model"), f.get("params"))
        runners = ", ".join(str(r.get("model", r)) if isinstance(r, dict) else str(r)
                            for r in (f.get("runners_up") or []))
        t.add_row(_group(f.get("group"), names), str(f.get("model"))
                  + (" (predates a drift)" if f.get("predates_drift") else ""), params,
                  _fmt((f.get("quality") or {}).get("mape"), ".2f"), runners)
    _print_table(console, t)
    more("fits")
    for f in data.get("fits", []):
        line = predates_text(f, names)
        if line:
            console.print(line, markup=False, soft_wrap=True)
    for e in data.get("fit_errors") or []:
        console.print(f"fit failed for {_group(e.get('group'), names)}: {e.get('error')}", markup=False)
    more("fit_errors")

    t = _table("recommendations", ("group", "cores", "cpus", "frequency",
                                   "predicted s (interval)", "state", "measured s"))
    for r in data.get("recommendations", []):
        freq = r.get("freq_khz")
        lo, hi = r.get("predicted_lower_s"), r.get("predicted_upper_s")
        t.add_row(_group(r.get("group"), names), _fmt(r.get("cores")),
                  format_cpu_list(r.get("cpus") or []),
                  clock_text(freq, r.get("clock")),
                  _fmt(r.get("predicted_time_s"))
                  + (f" ({_fmt(lo)}..{_fmt(hi)})" if lo is not None and hi is not None else ""),
                  state_text(r), _fmt(r.get("verified_time_s")))
    _print_table(console, t)
    more("recommendations")
    for r in data.get("recommendations", []):  # what each rests on, when not clean runs only
        basis = r.get("rests_on") or {}
        if basis.get("marked_runs") or basis.get("outliers_left_out"):
            console.print(f"{r.get('config_id')} ({_group(r.get('group'), names)}): "
                          f"{basis.get('text')}", markup=False)
    for m in data.get("remeasure") or []:
        what = f"{m.get('workload')} ({m.get('size')}) on {m.get('agent')}"
        if m.get("state") == "never clean":
            from .remeasure import never_clean_text
            console.print(f"{what}: " + "; ".join(never_clean_text(p) for p in m["points"]),
                          markup=False)
        else:
            n = len(m.get("points") or [])
            console.print(f"{what}: {n} marked point{'s' * (n != 1)} {m.get('state')} "
                          f"(retry {m.get('retry')}"
                          + (f", in {m['due_in_s']:g} s)" if m.get("due_in_s") is not None
                             else ")"), markup=False)
    more("remeasure")
    for e in data.get("drift") or []:
        console.print(drift_text(e, names), markup=False)
    more("drift")


def _group(group: Any, names: dict[Any, str] | None = None) -> str:
    """board/workload/input[/variant]; the platform hash where no agent names its board."""
    if isinstance(group, dict):
        g = dict(group)
        g["platform"] = (names or {}).get(g.get("platform"), g.get("platform"))
        return "/".join(str(g.get(k, "")) for k in ("platform", "workload", "input", "variant")
                        if g.get(k) not in (None, ""))
    if isinstance(group, (list, tuple)):
        return "/".join(str(g) for g in group if g not in (None, ""))
    return str(group)
