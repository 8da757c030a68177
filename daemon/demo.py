"""``opptune demo``: the whole loop on this machine, with a real daemon and a real agent.

Both run as separate processes talking ZeroMQ over loopback; everything they write (configs,
database, agent state, logs, the result table) lives in one directory that the demo names.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..agent.virtual_board import BOARDS
from ..shared.config import DaemonConfig
from ..shared.cpus import format_cpu_list
from ..shared.lifeline import dies_with_this_process
from .client import DaemonUnreachable, QueryFailed, query
from .console import make_console
from .jobs import UNSUCCESSFUL_JOB_STATES
from .planner import clock_text
from .status_view import params_text

FINAL_STATES = {"verified", "unconfirmed", "off", "marked", "refused", "failed"}
# On a virtual board the sweep is cores x this many frequencies, evenly spread over the board's
# table (lowest and highest included): the whole grid on a Pi takes a few seconds.
VIRTUAL_FREQUENCY_STEPS = 3


# On a virtual board pi_integrate follows the board's true model (agent/virtual_board.py), the
# one the demo's fit is checked against; the demo sweeps it unless told (other kernels follow
# their own nature there, agent/virtual_workload.py).
VIRTUAL_DEFAULT_WORKLOAD = "pi_integrate"
# one kernel per behaviour (compute, memory bandwidth, lock contention): the whole suite at
# default size would take many minutes (sweep the others by name)
REAL_DEFAULT_WORKLOADS = ["pi_integrate", "triad", "locked_update"]
VIRTUAL_DEFAULT_SIZE = "small"
REAL_DEFAULT_SIZE = "default"
REAL_DEFAULT_WARMUP = 1


def _real_kernels() -> dict[str, Any]:
    from ..bench_suite.catalogue import KERNELS
    return dict(KERNELS)


def _valid_sizes(workloads: list[str], virtual_board: str | None) -> list[str]:
    if virtual_board:
        from ..agent.virtual_board import SIZES
        return list(SIZES)
    kernels = _real_kernels()
    sizes: list[str] | None = None
    for name in workloads or sorted(kernels):
        offered = list(kernels[name].sizes)
        sizes = offered if sizes is None else [x for x in sizes if x in offered]
    return sizes or []


def check_args(args: argparse.Namespace) -> str | None:
    """Fill the device-dependent defaults and check the options before anything starts.

    Returns the one-line reason for refusing them (naming the valid values), or None.
    """
    if args.virtual_board is not None:
        boards = list(BOARDS)
        if args.virtual_board not in boards:
            return (f"unknown virtual board {args.virtual_board!r}; known boards: "
                    f"{', '.join(boards)}")
    kernels = sorted(_real_kernels())
    unknown = [w for w in args.workload or [] if w not in kernels]
    if unknown:
        return f"unknown workload {unknown[0]!r}; workloads: {', '.join(kernels)}"
    if not args.workload:
        args.workload = ([VIRTUAL_DEFAULT_WORKLOAD] if args.virtual_board
                         else list(REAL_DEFAULT_WORKLOADS))
    if args.size is None:
        args.size = VIRTUAL_DEFAULT_SIZE if args.virtual_board else REAL_DEFAULT_SIZE
    if args.warmup is None:
        # a virtual run has nothing to warm (no caches, no governor ramp): a warmup run would
        # only sleep the same modelled time once more
        args.warmup = 0 if args.virtual_board else REAL_DEFAULT_WARMUP
    sizes = _valid_sizes(args.workload or [], args.virtual_board)
    if args.size not in sizes:
        where = (f"on virtual board {args.virtual_board}" if args.virtual_board
                 else "for " + ", ".join(args.workload or kernels))
        return f"size {args.size!r} does not exist {where}; sizes: {', '.join(sizes)}"
    for name, least in (("reps", 1), ("warmup", 0), ("max_cores", 0)):
        value = getattr(args, name)
        if value < least:
            what = "at least 1" if least else "0 or more"
            extra = " (0 = all cores)" if name == "max_cores" else ""
            return f"--{name.replace('_', '-')} must be {what}{extra}, got {value}"
    if not args.timeout > 0:
        return f"--timeout must be more than 0 seconds, got {args.timeout:g}"
    n_cpus, where = _board_cpus(args.virtual_board)
    if n_cpus and args.max_cores > n_cpus:  # as 'opptune sweep' refuses it (sweeps.py)
        return (f"--max-cores {args.max_cores} is more than the {n_cpus} cpus of {where}; "
                f"use 1..{n_cpus} (0 = all)")
    return None


def _board_cpus(virtual_board: str | None) -> tuple[int, str]:
    """The cpus the demo's agent sweeps over (0: unknown) and the board's name in words."""
    if virtual_board:
        from ..agent.virtual_board import board_spec
        spec = board_spec(virtual_board)
        return (sum(len(c["cpus"]) for c in spec["clusters"]),
                f"virtual board {virtual_board}")
    return os.cpu_count() or 0, "this machine"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(value: Any) -> str:
    return json.dumps(value)  # JSON scalars and arrays of them are valid TOML


def _write_toml(path: Path, values: dict[str, Any], tables: dict[str, dict[str, Any]]) -> None:
    lines = [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    for name, table in tables.items():
        lines.append(f"\n[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")


def prepare(args: argparse.Namespace, run_dir: Path) -> tuple[str, Path, Path]:
    """Write the daemon's and the agent's configuration; returns (endpoint, daemon, agent) paths."""
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    daemon_toml = run_dir / "daemon.toml"
    _write_toml(daemon_toml, {
        "bind": endpoint, "database": str(run_dir / "opptune.db"), "heartbeat_s": 1.0,
        "auto_sweep": True, "auto_recommend": True, "verify_reps": args.reps,
        "accept_load": bool(getattr(args, "accept_load", False)),
    }, {"sweep": {"size": args.size, "reps": args.reps, "warmup": args.warmup,
                  "max_cores": args.max_cores,
                  # a virtual board has every knob: sweep cores x frequencies there; on the
                  # real machine leave the frequency to its governor (the knob may be absent)
                  "frequency_grid": (str(VIRTUAL_FREQUENCY_STEPS) if args.virtual_board
                                     else "none")}})
    agent: dict[str, Any] = {
        "agent_id": "demo-agent", "daemon": endpoint, "state_dir": str(run_dir / "agent"),
        "heartbeat_s": 1.0, "bench_kernels": args.workload or ["all"],
    }
    if os.geteuid() == 0 and not args.virtual_board:
        # The demo runs only opptune's own kernels, with this interpreter, which the
        # unprivileged default user may not be able to read (a venv under /root): as root,
        # they run as root on purpose (the agent says so once in its log). A virtual board's
        # workloads run as the agent's own user without it, and its log then does not advise
        # an unprivileged run_as, which a virtual board refuses.
        agent["run_as"] = "root"
    if args.virtual_board:
        from ..agent.virtual_board import make_tree
        agent["virtual_board"] = args.virtual_board
        agent["sysfs_root"] = str(make_tree(args.virtual_board, run_dir / "virtual-sysfs"))
    agent_toml = run_dir / "agent.toml"
    _write_toml(agent_toml, agent, {})
    return endpoint, daemon_toml, agent_toml


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    """Start the demo's daemon or agent; it gets SIGTERM (its clean stop: the agent puts the
    virtual knobs back) when the demo ends without stopping it, killed with SIGKILL or by a
    timeout, rather than running on with nobody to stop it."""
    fh = open(log, "ab")
    try:
        return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                preexec_fn=dies_with_this_process(signal.SIGTERM))
    finally:
        fh.close()


def _stop(proc: subprocess.Popen, timeout: float = 20.0) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout``; the child's exit status, None where that
    SIGTERM ended it: a daemon or agent still starting (its handler not yet set) dies of it,
    which is the stop asked for, not a failure to report ('daemon exited -15')."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        else:
            if proc.returncode == -signal.SIGTERM:
                return None
    return proc.returncode


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached the demo: stop the children, write what there is, exit."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped(signum)


def _trap_stop_signals() -> dict[int, Any]:
    previous = {s: signal.getsignal(s) for s in (*STOP_SIGNALS, signal.SIGINT)}
    for s in STOP_SIGNALS:
        signal.signal(s, _raise_stopped)
    return previous


def _ignore_stop_signals() -> None:
    for s in (*STOP_SIGNALS, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)


def _restore_signals(previous: dict[int, Any]) -> None:
    for s, handler in previous.items():
        signal.signal(s, signal.SIG_DFL if handler is None else handler)


def _last_status(endpoint: str) -> dict[str, Any] | None:
    """The daemon's status once more before it stops, for the table of what was measured."""
    try:
        return query(endpoint, "status", timeout_s=2.0)
    except (DaemonUnreachable, QueryFailed):
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _done(status: dict[str, Any]) -> tuple[bool, list[str]]:
    """(whether every swept workload has reached an end, the daemon's reasons for those that
    ended without a recommendation). A workload ends with a recommendation in a final state,
    or with a job that failed or expired, or with a group that no model (or no
    recommendation) could be made for."""
    if not status.get("agents"):
        return False, []
    jobs = status.get("jobs") or []
    recs = status.get("recommendations") or []
    final = {_workload_of(r) for r in recs if r.get("state") in FINAL_STATES}
    recommended = {_workload_of(r) for r in recs}
    reasons: dict[str, list[str]] = {}
    for j in jobs:
        if j.get("state") in UNSUCCESSFUL_JOB_STATES:
            reasons.setdefault(str(j.get("workload")), []).append(
                f"job {j.get('job_id')} ({j.get('workload')}) {j.get('state')}: "
                f"{j.get('reason')}")
    newest = {str(j.get("workload")): j.get("job_id") for j in jobs}  # jobs come oldest first
    for e in status.get("fit_errors") or []:
        workload = _workload_of(e)
        if e.get("job_id") and newest.get(workload, e["job_id"]) != e["job_id"]:
            continue  # the fit after an earlier job (before a re-measure): the newer one's is due
        if workload not in recommended:
            reasons.setdefault(workload, []).append(
                f"{'/'.join(str(v) for v in (e.get('group') or {}).values() if v)}: "
                f"{e.get('error')}")
    wanted = {str(j.get("workload")) for j in jobs}
    # a workload whose marked points are still to be measured again has not ended, whatever
    # its fit said meanwhile (without clean runs it has no model until then)
    remeasuring = {str(r.get("workload")) for r in status.get("remeasure") or []
                   if r.get("state") in ("waiting", "measuring")}
    done = bool(wanted) and all(w not in remeasuring and (w in final or w in reasons)
                                for w in wanted)
    return done, [r for w in sorted(reasons) for r in reasons[w]]


def _remeasure_note(status: dict[str, Any]) -> tuple[tuple, str] | None:
    """(a key that changes with each retry, what the demo waits for) while marked points are
    measured again, or None."""
    rows = [r for r in status.get("remeasure") or [] if r.get("state") in ("waiting",
                                                                         "measuring")]
    if not rows:
        return None
    r = rows[0]
    cores = ", ".join(str(p.get("cores")) for p in r.get("points") or [])
    when = (f"in {r['due_in_s']:.0f} s" if r.get("state") == "waiting" and r.get("due_in_s")
            else "now")
    return ((r.get("workload"), r.get("state"), r.get("retry")),
            f"{r.get('workload')}: runs at {cores} core(s) were marked (another process used "
            f"their cpus); measuring them again {when}, retry {r.get('retry')}")


def _workload_of(item: dict[str, Any]) -> str:
    group = item.get("group")
    if isinstance(group, dict):
        return str(group.get("workload"))
    if isinstance(group, (list, tuple)) and len(group) > 1:
        return str(group[1])
    return str(item.get("workload"))


def run_demo(args: argparse.Namespace) -> int:
    problem = check_args(args)
    if problem:
        # one plain line (rich would wrap it), before any directory or process exists
        print(f"opptune demo: {problem}", file=sys.stderr)
        return 2
    console = make_console(stderr=True)
    run_dir = Path(args.dir or f"opptune-demo-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if (run_dir / "opptune.db").exists():
        # A demo is one fresh run: reusing a store would print the old sweep's results under
        # the new options (and the old jobs count as done, so nothing would run).
        console.print(f"[red]opptune demo: {run_dir} already holds a demo's database "
                      "(opptune.db); name a new --dir, or remove that directory first[/red]")
        return 2
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, a read-only or missing parent
        why = ("a file of that name exists" if isinstance(exc, FileExistsError)
               else exc.strerror or str(exc))
        print(f"opptune demo: cannot make --dir {run_dir}: {why}; name another directory",
              file=sys.stderr)
        return 2
    console.print(f"opptune demo: everything goes to [bold]{run_dir}[/bold]")
    if args.virtual_board:
        console.print(f"[yellow]VIRTUAL BOARD '{args.virtual_board}': times and energies come "
                      "from a model, not from this machine's hardware; sweeping cores x up to "
                      f"{VIRTUAL_FREQUENCY_STEPS} frequencies of {', '.join(args.workload)} "
                      f"(size {args.size})[/yellow]")
    endpoint, daemon_toml, agent_toml = prepare(args, run_dir)
    py = sys.executable
    status: dict[str, Any] = {}
    energy_recs: dict[str, dict[str, Any]] = {}
    ok = False
    stopped_by: int | None = None
    procs: dict[str, subprocess.Popen] = {}
    previous = _trap_stop_signals()
    try:
        procs["daemon"] = _start([py, "-m", "opptune.daemon.service", "--config",
                                  str(daemon_toml)], run_dir / "daemon.log")
        procs["agent"] = _start([py, "-m", "opptune.agent", "--config", str(agent_toml)],
                                run_dir / "agent.log")
        ok, status = _follow(args, console, endpoint, procs["daemon"], procs["agent"], run_dir)
        if ok:
            energy_recs = energy_recommendations(endpoint, status, args.max_cores)
    except _Stopped as exc:
        stopped_by = exc.signum
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    finally:
        # The children lead their own sessions (a terminal's signals do not reach them), so
        # stopping them is the demo's job however it ends; a second signal must not cut the
        # cleanup short, which would orphan them.
        _ignore_stop_signals()
        if stopped_by is not None:
            console.print(f"[red]opptune demo: {signal.Signals(stopped_by).name} received; "
                          "stopping the daemon and the agent[/red]")
            if "daemon" in procs and procs["daemon"].poll() is None:
                status = _last_status(endpoint) or status
        rc_agent = _stop(procs["agent"]) if "agent" in procs else None
        rc_daemon = _stop(procs["daemon"]) if "daemon" in procs else None
        _restore_signals(previous)
    db = run_dir / "opptune.db"
    table = summarise(db, status, energy_recs, bool(getattr(args, "accept_load", False))) \
        if db.exists() else []
    (run_dir / "result.json").write_text(json.dumps(table, indent=2, sort_keys=True))
    if args.json:
        json.dump(table, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        print_table(table, make_console())
    if stopped_by is not None:
        console.print(f"[red]opptune demo: stopped by {signal.Signals(stopped_by).name} before "
                      f"the end; what was measured is in {run_dir}[/red]")
        return 128 + stopped_by
    if rc_agent not in (0, None) or rc_daemon not in (0, None):
        console.print(f"[red]agent exited {rc_agent}, daemon exited {rc_daemon}; logs in "
                      f"{run_dir}[/red]")
        return 1
    note = None if ok else closing_note(table, run_dir)
    if note:
        console.print(note, markup=False, soft_wrap=True)
    return 0 if ok else 1


def _follow(args: argparse.Namespace, console: Console, endpoint: str,
            daemon: subprocess.Popen, agent: subprocess.Popen,
            run_dir: Path) -> tuple[bool, dict[str, Any]]:
    deadline = time.monotonic() + args.timeout
    status: dict[str, Any] = {}
    reported_knobs = False
    done, reasons = False, []
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total} runs"), TimeElapsedColumn(),
                  console=console, disable=args.no_progress) as progress:
        task = progress.add_task("sweep", total=None)
        last_note: tuple | None = None
        while time.monotonic() < deadline:
            for name, proc in (("daemon", daemon), ("agent", agent)):
                if proc.poll() is not None:
                    console.print(f"[red]{name} exited with {proc.returncode}:[/red]\n"
                                  + _tail(run_dir / f"{name}.log"))
                    return False, status
            try:
                status = query(endpoint, "status", timeout_s=2.0)
            except (DaemonUnreachable, QueryFailed):
                continue  # still starting; the poll of the processes above catches a death
            if not reported_knobs and status.get("agents"):
                platform_id = status["agents"][0].get("platform")
                _report_knobs(console, (status.get("platforms") or {}).get(platform_id))
                reported_knobs = True
            jobs = status.get("jobs") or []
            expected = sum(int(j.get("expected") or 0) for j in jobs)
            received = sum(int(j.get("received") or 0) for j in jobs)
            verifying = [r for r in status.get("recommendations") or []
                         if r.get("state") not in FINAL_STATES]
            desc = "verifying recommendations" if verifying and received >= expected else "sweep"
            note = _remeasure_note(status)
            if note and note[0] != last_note:  # once per retry, not each second of its wait
                console.print(f"opptune demo: {note[1]}", markup=False, soft_wrap=True)
            last_note = note[0] if note else None
            progress.update(task, total=expected or None, completed=received, description=desc)
            done, reasons = _done(status)
            if done:
                break
            time.sleep(0.5)  # a polling interval for the display, not synchronisation
    if done:
        for reason in reasons:  # the daemon's own words, e.g. why no model fits
            console.print(f"opptune demo: {reason}", style="red", markup=False, soft_wrap=True)
        return not reasons, status
    console.print(f"[red]opptune demo: gave up after {args.timeout:g} s (--timeout); a longer "
                  f"--timeout lets it finish; logs in {run_dir}[/red]")
    return False, status


def _report_knobs(console: Console, platform: Any) -> None:
    if not isinstance(platform, dict):
        return
    console.print(f"platform {platform.get('id')}: {platform.get('model_name')}, "
                  f"{platform.get('n_cpus')} cpus")
    for knob in ("cpufreq", "perf", "energy"):
        info = platform.get(knob) or {}
        if not info.get("available"):
            console.print(f"  [yellow]{knob}: not available[/yellow] ({info.get('reason')})")


def _median(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def energy_recommendations(endpoint: str, status: dict[str, Any], max_cores: int = 0
                           ) -> dict[str, dict[str, Any]]:
    """Per swept workload, the daemon's recommendation for minimum energy (``recommend``
    query, nothing pushed): {"recommendation": ...} or {"error": why there is none}. Only
    on a board with an energy meter: elsewhere energy would be a guess. ``max_cores`` (the
    sweep's, 0 = all) caps it as it caps the time recommendation: 1-2 cores measured said
    nothing of the 32 that x86-2numa's was (predicted 0.0014 s there, measured 0.0069 s)."""
    agents = status.get("agents") or []
    if not agents:
        return {}
    platform = (status.get("platforms") or {}).get(agents[0].get("platform")) or {}
    if not (platform.get("energy") or {}).get("available"):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for job in status.get("jobs") or []:
        if job["workload"] in out or job["state"] != "done":
            continue
        try:
            out[job["workload"]] = {"recommendation": query(
                endpoint, "recommend", {"agent": agents[0]["id"], "workload": job["workload"],
                                        "size": job["size"], "objective": "energy",
                                        **({"max_cores": max_cores} if max_cores else {})},
                timeout_s=10.0)}
        except (DaemonUnreachable, QueryFailed) as exc:
            out[job["workload"]] = {"error": str(exc)}
    return out


def summarise(db_path: Path, status: dict[str, Any],
              energy_recs: dict[str, dict[str, Any]] | None = None,
              accept_load: bool = False) -> list[dict[str, Any]]:
    """Per workload (and cluster on a per-cluster sweep): median time, speedup (over one core
    at the same frequency) and median energy per (cores, frequency); the fit; the
    recommendation (for time, and for energy where the board has a meter); whether the
    records are virtual. A point's medians rest on its clean runs where it has any, as the
    fit does (marked runs count in ``runs`` and ``marked``; all of them with
    ``accept_load``); a point with marked runs only keeps their medians, ``clean`` false."""
    from .store import open_store
    store = open_store(str(db_path))
    try:
        groups = store.run_points()
    finally:
        store.close()
    fits = {_group_key(f): f for f in status.get("fits") or []}
    recs = {_group_key(r): r for r in status.get("recommendations") or []}
    platforms = status.get("platforms") or {}
    out = []
    for group, runs in sorted(groups.items()):
        by_point: dict[tuple[int, float | None], list[tuple]] = {}
        for cores, freq, time_s, energy_j, virtual, marked in runs:
            by_point.setdefault((cores, freq), []).append((time_s, energy_j, virtual, marked))
        points = []
        for (c, f), xs in sorted(by_point.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            clean = [x for x in xs if accept_load or not x[3]]
            use = clean or xs
            points.append({"cores": c, "freq_mhz": f,
                           "median_time_s": statistics.median(x[0] for x in use),
                           "median_energy_j": _median([x[1] for x in use]),
                           "runs": len(xs), "marked": sum(bool(x[3]) for x in xs),
                           "clean": bool(clean)})
        t1 = {p["freq_mhz"]: p["median_time_s"] for p in points if p["cores"] == 1}
        for p in points:
            base = t1.get(p["freq_mhz"])
            p["speedup"] = base / p["median_time_s"] if base and p["median_time_s"] else None
        key = (group.workload, group.variant)
        fit = fits.get(key, {})
        rec = recs.get(key, {})
        plat = platforms.get(group.platform) or {}
        virtual = any(bool(x[2]) for xs in by_point.values() for x in xs) or \
            bool(plat.get("virtual"))
        out.append({
            "workload": group.workload,
            "input": group.input,
            "variant": group.variant,
            "platform": group.platform,
            "virtual": virtual,
            "virtual_board": plat.get("virtual_board") if virtual else None,
            "points": points,
            "model": fit.get("model"),
            "model_params": fit.get("params"),
            "model_mape_pct": (fit.get("quality") or {}).get("mape"),
            "runners_up": fit.get("runners_up"),
            "recommended_cores": rec.get("cores"),
            "recommended_cpus": rec.get("cpus"),
            "recommended_freq_khz": rec.get("freq_khz"),
            # what its cpus run at where it sets no frequency (status' planner.workload_clock)
            "recommended_clock": rec.get("clock"),
            "predicted_time_s": rec.get("predicted_time_s"),
            "verified_time_s": rec.get("verified_time_s"),
            "recommendation_state": rec.get("state"),
            "recommendation_error": rec.get("error"),
            # what the recommendation rests on: clean runs, marked ones left out and by whom
            "rests_on": (rec.get("rests_on") or {}).get("text"),
            "energy_recommendation": (energy_recs or {}).get(group.workload, {}).get(
                "recommendation"),
            "energy_recommendation_error": (energy_recs or {}).get(group.workload, {}).get(
                "error"),
        })
    return out


def _group_key(item: dict[str, Any]) -> tuple[str, str]:
    group = item.get("group")
    variant = ""
    if isinstance(group, dict):
        variant = str(group.get("variant") or "")
    elif isinstance(group, (list, tuple)) and len(group) > 3:
        variant = str(group[3] or "")
    return _workload_of(item), variant


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


# what the tables' runs column and medians count, said once after them
RUNS_NOTE = ("runs: sweep and verification runs, all counted; the medians and the model leave "
             "out runs marked for interference (unless --accept-load; * a point measured only "
             "under interference) and the model outliers")


def print_table(table: list[dict[str, Any]], console: Console) -> None:
    for w in table:
        title = f"{w['workload']} (input {w['input']}"
        title += f", {w['variant']})" if w.get("variant") else ")"
        if w.get("virtual"):
            title += f" [VIRTUAL board {w.get('virtual_board') or '?'}]"
        t = Table(title=title)
        for col in ("cores", "freq MHz", "median time s", "speedup", "energy J", "runs"):
            t.add_column(col, justify="right")
        for p in w["points"]:
            runs = str(p["runs"]) + (f" ({p['marked']} marked)" if p.get("marked") else "")
            t.add_row(str(p["cores"]), _fmt(p["freq_mhz"], ".0f"),
                      f"{p['median_time_s']:.4f}" + ("" if p.get("clean", True) else " *"),
                      _fmt(p["speedup"], ".2f"), _fmt(p.get("median_energy_j"), ".4f"), runs)
        console.print(t)
        if w.get("virtual"):
            console.print("  records are VIRTUAL: times and energies follow the board's model "
                          "(docs/virtual-board.md), not this machine's hardware", markup=False)
        mape = w["model_mape_pct"]
        line = (f"  model: {w['model']} ({params_text(w['model'], w['model_params'])})"
                if w["model"] else "  model: none")
        if mape is not None:
            line += f"; training MAPE {mape:.2f} %"
        runners = [r.get("model") for r in w["runners_up"] or [] if isinstance(r, dict)]
        if runners:
            line += f"; runners-up: {', '.join(map(str, runners))}"
        console.print(line, markup=False)
        if w["recommended_cores"] is not None:
            pred = w["predicted_time_s"]
            ver = w["verified_time_s"]
            freq = w["recommended_freq_khz"]
            console.print(f"  recommended: {w['recommended_cores']} "
                          + ("core " if w["recommended_cores"] == 1 else "cores ")
                          + f"(cpus {format_cpu_list(w['recommended_cpus'] or [])})"
                          + f" at {clock_text(freq, w.get('recommended_clock'))}"
                          + f", predicted {pred:.4f} s, measured "
                          + (f"{ver:.4f} s" if ver is not None else "-")
                          + f" ({w['recommendation_state']})"
                          + (f" {w['recommendation_error']}" if w["recommendation_error"] else ""),
                          markup=False)
        else:
            console.print("  recommended: none")
        if w.get("rests_on") and "marked" in w["rests_on"]:
            console.print(f"  the board was busy: {w['rests_on']}", markup=False)
        e = w.get("energy_recommendation")
        if e:
            console.print("  " + energy_line(e, w), markup=False)
        elif w.get("energy_recommendation_error"):
            console.print(f"  for minimum energy: none ({w['energy_recommendation_error']})",
                          markup=False)
    if table:
        console.print(RUNS_NOTE, markup=False)


def closing_note(table: list[dict[str, Any]], run_dir: Path) -> str | None:
    """The demo's last word when it ends without a recommendation for some workload."""
    if not table:
        return f"opptune demo: nothing was measured; the logs are in {run_dir}"
    missing = [w for w in table if w.get("recommended_cores") is None]
    if not missing:
        return None
    # a point measured only under interference (its runs all marked, after every re-measure
    # the daemon makes) leaves its workload without a model: the machine was busy
    busy = [w["workload"] for w in missing
            if any(not p.get("clean", True) for p in w.get("points") or [])]
    other = [w["workload"] for w in missing if w["workload"] not in busy]
    parts = []
    if busy:
        retries = len(DaemonConfig().remeasure_backoff_s)
        parts.append(
            f"no recommendation for {', '.join(busy)}: other processes used this machine's "
            f"cpus through the sweep and its {retries} re-measurements (the points marked *), "
            "and the model leaves such runs out; run the demo again when the machine is "
            "quiet ('opptune doctor' shows its load), or with --accept-load (make demo "
            "DEMO_ARGS=--accept-load) to fit those runs too, for a recommendation that holds "
            "under that load")
    if other:
        parts.append(f"no recommendation for {', '.join(other)} (the notes above say why)")
    return (f"opptune demo: {'; '.join(parts)}; the logs and the database are in {run_dir}")


def energy_line(e: dict[str, Any], w: dict[str, Any]) -> str:
    """The energy recommendation beside the time one, with what the time one costs."""
    from .goal_cli import config_text, energy_text
    ej = e["energy_j"]
    line = (f"for minimum energy: {config_text(e)}, predicted {ej['value']:.4f} J "
            f"({ej['lower']:.4f}..{ej['upper']:.4f}) in {e['time_s']['value']:.4f} s; energy "
            f"{energy_text(e)}")
    by_point = {(p["cores"], p["freq_mhz"]): p.get("median_energy_j") for p in w["points"]}
    freq = w.get("recommended_freq_khz")
    t_energy = by_point.get((w.get("recommended_cores"), freq / 1000 if freq else None))
    if t_energy and ej["value"]:
        how = ("the time recommendation measured" if e.get("energy") == "measured"
               else "the time recommendation's runs report")
        line += f"; {how} {t_energy:.4f} J ({t_energy / ej['value']:.1f}x)"
    return line
