"""``opptune-agent``: run the agent on a board (or restore cpufreq state with --restore, or
forget the configuration a user applied with --forget-applied).

Threads: the link (ZeroMQ, heartbeats, outbox resends) runs in the main thread; accepted jobs
and configs run one by one in a worker thread, so heartbeats go on during long runs.
SIGTERM/SIGINT stop cleanly: abort the current run (it resumes after a restart), restore the
knobs, close the socket and the outbox, exit 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from .. import __version__
from ..shared.config import DEFAULT_AGENT_CONFIG, ConfigError, load_agent_config

log = logging.getLogger("opptune.agent")

EXIT_CONFIG = 2
EXIT_BUSY = 1  # another agent runs on the state directory
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# the user the workloads of an agent running as root run as, unless run_as says otherwise
# (the README's install creates it)
# a user of the workloads' own: not "opptune", whom the daemon's unit runs as, since a workload
# (any command of the configuration) could then read and rewrite the daemon's store and keys
DEFAULT_RUN_AS = "opptune-run"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="opptune-agent",
        description="Run the opptune agent on this board: it connects to the daemon, runs the "
                    "benchmarks and workloads of its configuration at the core counts and CPU "
                    "frequencies the daemon asks for, sends every result and applies the "
                    "configuration the daemon recommends; those a user applied (one per target: the "
                    "board, a process, a unit) are kept in the state directory and applied again "
                    "at the next start (--forget-applied ends one). With --restore it puts back the CPU frequency settings and cpu sets "
                    "it saved, then exits.")
    ap.add_argument("--version", action="version", version=f"opptune-agent {__version__}")
    ap.add_argument("--config", metavar="FILE.toml",
                    help="agent configuration (default /etc/opptune/agent.toml; etc/agent.toml "
                         "is an example)")
    ap.add_argument("--daemon", metavar="ENDPOINT",
                    help="where the daemon listens, e.g. tcp://10.0.0.1:5555")
    ap.add_argument("--agent-id", metavar="NAME", help="name of this board (default: hostname)")
    ap.add_argument("--state-dir", metavar="DIR",
                    help="directory for unsent results, the saved CPU frequency settings "
                         "and cpu sets, the configuration applied to stay in force, and the "
                         "directory each workload without a cwd runs in (work/NAME)")
    ap.add_argument("--sysfs-root", metavar="DIR",
                    help="read /sys and /proc under this directory instead (for testing)")
    ap.add_argument("--virtual-board", metavar="NAME",
                    help="pretend to be a simulated board (demos and tests, clearly labelled "
                         "virtual)")
    ap.add_argument("--heartbeat", type=float, dest="heartbeat_s", metavar="SECONDS",
                    help="how often to tell the daemon the agent is alive")
    ap.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                    help="how much to log on stderr (default INFO)")
    ap.add_argument("--run-as", metavar="USER",
                    help="the user the workloads run as when the agent runs as root (default "
                         f"{DEFAULT_RUN_AS!r}; \"root\": as root, on purpose)")
    once = ap.add_mutually_exclusive_group()
    once.add_argument("--restore", action="store_true",
                    help="put back the CPU frequency settings and cpu sets saved in the state "
                         "directory, then exit")
    once.add_argument("--forget-applied", nargs="?", const="", default=None,
                      metavar="TARGET",
                    help="end a configuration a user applied (recommend --apply, --pid, "
                         "--unit, tune): forget it, so the next start leaves its target at its "
                         "original settings; one stands per target: TARGET is board, pid:N, "
                         "unit:NAME or all (needed where several stand); the agent must be "
                         "stopped (it puts the originals back when it stops), then exit")
    return ap.parse_args(argv)


def _forget_applied(config, target: str = "") -> int:
    """Remove a configuration kept in force (agent/standing.py), that of ``target`` ('board',
    'pid:N', 'unit:NAME', 'all'; '' where one stands), while no agent runs on the state
    directory: a running one holds them in memory and would keep applying them."""
    from ..shared.standing import key_of
    from .standing import StandingFile, describe, parse_target
    from .state_lock import StateDirBusy
    from .state_lock import hold as hold_state_dir
    try:
        key = parse_target(target) if target else None
    except ValueError as exc:
        print(f"opptune-agent: --forget-applied got {target!r}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not os.path.isdir(config.state_dir):
        print(f"opptune-agent: no applied configuration is kept in {config.state_dir} (no such "
              "directory); nothing to forget", file=sys.stderr)
        return 0
    try:
        lock = hold_state_dir(config.state_dir)
    except StateDirBusy as exc:
        by = f"pid {exc.pid}" if exc.pid else "another process"
        print(f"opptune-agent: the agent on {config.state_dir} is running ({by}) and holds "
              "the applied configurations; stop it (it puts the board's original settings "
              "back), then run --forget-applied; nothing forgotten", file=sys.stderr)
        return EXIT_BUSY
    except OSError as exc:
        print(f"opptune-agent: the state directory {config.state_dir} is not usable: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        file = StandingFile(config.state_dir)
        saved = file.load()  # a damaged record is said and removed by load itself
        if not saved:
            print(f"opptune-agent: no applied configuration is kept in {config.state_dir}; "
                  "nothing to forget", file=sys.stderr)
            return 0
        keys = [(key_of(e["config"]), e["config"]) for e in saved]
        listed = "; ".join(f"{k}: {describe(c)}" for k, c in keys)
        if key is None and len(saved) > 1:
            print(f"opptune-agent: {len(saved)} applied configurations are kept in "
                  f"{config.state_dir}, one per target ({listed}); say which with "
                  "--forget-applied TARGET (board, pid:N, unit:NAME, or all); nothing "
                  "forgotten", file=sys.stderr)
            return EXIT_CONFIG
        chosen = [c for k, c in keys if key in (None, "all", k)]
        if not chosen:
            print(f"opptune-agent: no applied configuration stands on {key} (kept: {listed}); "
                  "nothing forgotten", file=sys.stderr)
            return EXIT_CONFIG
        try:
            if key in (None, "all"):
                file.end()
            else:
                file.forget(key)
        except OSError as exc:
            print(f"opptune-agent: cannot rewrite {file.path}: {exc.strerror or exc}; nothing "
                  "forgotten", file=sys.stderr)
            return EXIT_CONFIG
        for c in chosen:
            t = c.get("target") or {}
            what = ("the board" if key_of(c) == "board" else f"process {t.get('pid')}"
                    if t.get("kind") == "pid" else f"unit {t.get('unit')}")
            print(f"opptune-agent: forgot the applied configuration {describe(c)}: the "
                  f"agent's next start leaves {what} at its original settings",
                  file=sys.stderr)
        left = len(saved) - len(chosen)
        if left:
            print(f"opptune-agent: {left} other applied configuration{'s' if left > 1 else ''} "
                  "stand" + ("" if left > 1 else "s"), file=sys.stderr)
        return 0
    finally:
        lock.close()


def _running_agent(paths: list[str]) -> tuple[int, str] | None:
    """(pid, path) of a state file whose recorder, an opptune agent, still runs: it holds the
    settings the file records, and puts them back itself when it stops."""
    import psutil
    for path in paths:
        try:
            with open(path) as fh:
                pid = json.load(fh).get("pid")
        except (OSError, ValueError, AttributeError):
            continue  # the restore below says what is wrong with the file
        if not isinstance(pid, int) or pid == os.getpid():
            continue
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())
        except (psutil.Error, OSError):
            continue
        if "opptune-agent" in cmd or "opptune.agent" in cmd:
            return pid, path
    return None


def _restore(config) -> int:
    try:
        from .knobs.state import (CPUSET_FILENAME, STATE_FILENAME, UnreadableRecord,
                                  restore_cpusets_from_file, restore_from_state_file)
    except ImportError as exc:
        print(f"opptune-agent: no cpufreq state module ({exc}); nothing to restore",
              file=sys.stderr)
        return 0
    running = _running_agent([os.path.join(config.state_dir, name)
                              for name in (STATE_FILENAME, CPUSET_FILENAME)])
    if running:
        # restoring under a running agent would change the frequencies of its measurement and
        # delete the record it relies on after a crash
        print(f"opptune-agent: the agent that saved {running[1]} (pid {running[0]}) is still "
              f"running and holds these settings; stop it (it puts them back itself) and run "
              f"--restore only if it was killed; nothing restored", file=sys.stderr)
        return 1
    path = os.path.join(config.state_dir, STATE_FILENAME)
    try:
        res = restore_from_state_file(path, config.sysfs_root)
    except UnreadableRecord as exc:
        print(f"opptune-agent: nothing restored: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"opptune-agent: restoring from {path} failed: {exc}", file=sys.stderr)
        return 1
    cpath = os.path.join(config.state_dir, CPUSET_FILENAME)
    try:
        cres = restore_cpusets_from_file(cpath, config.sysfs_root)
    except UnreadableRecord as exc:
        print(f"opptune-agent: cpu sets not restored: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"opptune-agent: restoring from {cpath} failed: {exc}", file=sys.stderr)
        return 1
    problems = (res.get("problems") or []) + cres["problems"]
    if problems:
        print(f"opptune-agent: restore problems: {'; '.join(problems)}", file=sys.stderr)
        return 1
    print(f"opptune-agent: restored {', '.join(res.get('restored') or []) or 'nothing'} "
          f"({res.get('note') or path})", file=sys.stderr)
    if cres["restored"]:
        print(f"opptune-agent: restored cpu sets: {', '.join(cres['restored'])}",
              file=sys.stderr)
    return 0


def build_knobs(config, platform: dict) -> list:
    """The knobs this board supports (cpufreq when its policies are writable)."""
    if not (platform.get("cpufreq") or {}).get("available"):
        return []
    from .knobs.state import UnreadableRecord
    try:
        from .knobs.cpufreq import CpuFreq, CpuFreqKnob
        cf = CpuFreq(config.sysfs_root, state_dir=config.state_dir, install_handlers=False)
    except Exception as exc:
        if not isinstance(exc, UnreadableRecord):  # a damaged record: restore_at_start said it
            log.warning("cpufreq knob unavailable: %s", exc)
        platform["cpufreq"] = {"available": False, "reason": f"cpufreq knob failed: {exc}"}
        return []
    return [CpuFreqKnob(cf)]


def build_meters(config, platform: dict) -> list:
    """Meters beyond rusage: perf counters and energy where the platform has them; thermal."""
    from .meters.energy import EnergyRunMeter
    from .meters.perf import PerfMeter
    meters = []
    for name, make in (("perf", lambda: PerfMeter()),
                       ("energy", lambda: EnergyRunMeter(config.sysfs_root))):
        facts = platform.get(name) or {}
        if not (facts.get("available") or facts.get("software_only")):
            continue
        try:
            meters.append(make())
        except Exception as exc:
            log.warning("%s meter unavailable: %s", name, exc)
            platform[name] = {"available": False, "reason": f"meter failed: {exc}"}
    try:  # thermal zones and throttling: a board without zones records them as unavailable
        from .meters.thermal import ThermalMeter
        meters.append(ThermalMeter(config.sysfs_root))
    except Exception as exc:
        log.warning("thermal meter unavailable: %s", exc)
    try:  # what else used the run's cpus
        from .meters.interference import InterferenceMeter
        meters.append(InterferenceMeter(config.sysfs_root, config.interference_max_share))
    except Exception as exc:
        log.warning("interference meter unavailable: %s", exc)
    return meters


def _attach_virtual_board(config, config_path: str | None, option: bool) -> None:
    """A configured virtual board: its tree's kernel emulation serves this process's writes.
    Without a ``sysfs_root`` of its own, the board's tree is made (once) in the state
    directory, so ``opptune-agent --virtual-board NAME`` alone is enough. ``option``: the
    board was named by --virtual-board (an error names that, not the file's key)."""
    where = "--virtual-board" if option else f"{config_path or 'configuration'}: key " \
                                             "'virtual_board'"
    from .virtual_board import FAKE_MARKER, attach, board_spec, load_spec, make_tree
    if os.path.abspath(config.sysfs_root or "/") == "/":
        try:
            board_spec(config.virtual_board)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        root = os.path.join(os.path.abspath(config.state_dir),
                            f"virtual-board-{config.virtual_board}")
        try:
            fresh = not os.path.isfile(os.path.join(root, FAKE_MARKER))
            if not fresh and load_spec(root).get("name") != config.virtual_board:
                raise ConfigError(f"{root} holds another virtual board's tree; remove it or "
                                  "choose another --state-dir")
            if fresh:
                make_tree(config.virtual_board, root)
        except OSError as exc:
            raise ConfigError(f"cannot make the virtual board's tree in {root}: {exc}; "
                              "choose a writable --state-dir") from None
        config.sysfs_root = root
    try:
        attach(config.sysfs_root)
    except ValueError as exc:
        raise ConfigError(f"{where} ({config.virtual_board}) needs 'sysfs_root' to be its "
                          f"tree: {exc}") from None


# Ctrl-C before run_agent's handlers took SIGINT (its imports, the board's discovery)
START_INTERRUPTED = ("opptune-agent: interrupted while starting, before it connected to the "
                     "daemon: no workload was started and no knob set; start it again")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # once the agent runs, SIGINT stops it through its handler: this is its start only
        print(START_INTERRUPTED, file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    overrides = {"daemon": args.daemon, "agent_id": args.agent_id, "state_dir": args.state_dir,
                 "sysfs_root": args.sysfs_root, "virtual_board": args.virtual_board,
                 "log_level": args.log_level, "heartbeat_s": args.heartbeat_s,
                 "run_as": args.run_as}
    try:
        config = load_agent_config(args.config, **overrides)  # checks every value
        if config.virtual_board:
            _attach_virtual_board(config, args.config, bool(args.virtual_board))
        if not os.path.isdir(config.sysfs_root or "/"):
            # read as an empty board (0 cpus, no knobs), it would say hello as such
            where = ("--sysfs-root" if args.sysfs_root else
                     f"{args.config or DEFAULT_AGENT_CONFIG}: key 'sysfs_root'")
            raise ConfigError(f"{where} ({config.sysfs_root}): no such directory; give the "
                              f"root of a sysfs/procfs tree (tests), or leave it out for /")
    except ConfigError as exc:
        print(f"opptune-agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=getattr(logging, config.log_level.upper(), logging.INFO),
                        format=LOG_FORMAT, stream=sys.stderr)
    if args.restore:
        return _restore(config)
    if args.forget_applied is not None:
        return _forget_applied(config, args.forget_applied)
    return run_agent(config, config_path=args.config,
                     state_dir_option=args.state_dir is not None,
                     run_as_option=args.run_as is not None)


def workload_user(config, where: str, python_workloads: list[str] | None = None,
                  option: bool = False):
    """The user the workloads run as: for an agent running as root, ``run_as`` (unset: the
    unprivileged DEFAULT_RUN_AS; "root": root, on purpose, said once in the log). None: the
    agent's own user, as for an agent that is not root. ConfigError names an unknown or
    privileged user, and a user that cannot run this agent's Python while
    ``python_workloads`` (the workloads that run it) are offered; ``option``: run_as came
    from --run-as (an error names that). A virtual board's workloads run as the agent's own
    user (their runs use the board's tree); run_as set beside one is refused."""
    from .child import interpreter_refused, resolve_run_as
    if os.geteuid() != 0:
        if config.run_as:
            log.warning("run_as = %r ignored: the agent is not root, so workloads run as its "
                        "own user (uid %d)", config.run_as, os.geteuid())
        return None
    if config.run_as == "root":
        log.warning("workloads run as root (run_as = \"root\"): every command of this "
                    "configuration runs with the agent's privileges; set run_as to an "
                    "unprivileged user unless they need root")
        return None
    if config.virtual_board:
        # a virtual board's runs read and write its emulated tree (the board's energy
        # counters among them), which the agent made for itself, in its state directory
        if config.run_as:
            raise ConfigError(
                f"{'--run-as' if option else where + ': key ' + repr('run_as')}: a virtual "
                f"board ({config.virtual_board}) cannot run its workloads as "
                f"{config.run_as!r}: their runs use the board's tree, which is the agent's "
                "own; leave run_as unset (they run as the agent's user) or use a real board")
        log.info("a virtual board: workloads run as the agent's own user (uid %d), since "
                 "their runs use the board's tree", os.geteuid())
        return None
    name = config.run_as or DEFAULT_RUN_AS
    # one line says which key, whether it was set, and how to opt in to root
    key = "--run-as" if option else f"{where}: key 'run_as'" if config.run_as else \
        f"{where}: key 'run_as' (not set: an agent running as root runs its workloads as " \
        f"{name!r})"
    try:
        user = resolve_run_as(name)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}; or set run_as (--run-as) to another unprivileged "
                          "user, or to \"root\" to run the workloads as root") from None
    if python_workloads:
        why = interpreter_refused(user)
        if why:
            shown = ", ".join(python_workloads[:3]) + (", ..." if len(python_workloads) > 3
                                                       else "")
            raise ConfigError(
                f"{key}: user {name!r} cannot run this agent's Python ({sys.executable}: "
                f"{why}), which the kernels and pyperf workloads ({shown}) run with: install "
                "the agent where that user may read it (/opt/opptune, as in the README), or "
                "set run_as to a user who may")
    log.info("workloads run as %s (uid %d, gid %d)", user.name, user.uid, user.gid)
    return user


def link_keys(config, where: str) -> tuple[str, str, str] | None:
    """(daemon public, own public, own secret) when the link uses CURVE, the agent's key pair
    made in state_dir on first start; None when it is plain. ConfigError says what to fix."""
    from ..shared.curve import KeyFileError, curve_enabled, ensure_keypair, fingerprint, \
        read_public_key
    if not any(curve_enabled(config.curve, e) for e in config.daemon_endpoints()):
        if config.daemon_public_key and config.curve == "auto":
            # A daemon bound to a non-loopback address uses CURVE on every connection, its
            # loopback ones too, and drops a plain one without a word: the agent would only
            # ever say that the daemon does not answer.
            log.warning("CURVE off: the daemon endpoint %s is loopback (curve = \"auto\"), so "
                        "daemon_public_key is not used; a daemon that binds a non-loopback "
                        "address (CURVE on) never answers a plain agent: set curve = \"on\" "
                        "here to use the key", config.daemon)
        return None
    if not config.daemon_public_key:
        raise ConfigError(f"{where}: key 'daemon_public_key' is needed with CURVE on (curve = "
                          f"{config.curve!r}, daemon {config.daemon}): set it to the key that "
                          "'opptune keys server' prints on the daemon's host (or the path of "
                          "its server.pub)")
    try:
        server = read_public_key(config.daemon_public_key, f"{where}: key 'daemon_public_key'")
        public, secret = ensure_keypair(os.path.join(config.state_dir, "agent.key"))
    except KeyFileError as exc:
        raise ConfigError(str(exc)) from None
    # the key only: a key that waits is said by the daemon's refusal, with the command that
    # accepts it (logged once per refusal); an accepted key needs no word to the operator
    log.info("CURVE on: this agent's key is %s (%s)", fingerprint(public),
             os.path.join(config.state_dir, "agent.key"))
    return server, public, secret


# how long a run whose program changed waits for the link to say so in a hello (the link's
# thread sends it within a step; the bound only keeps a stuck link from stopping the work)
HELLO_WAIT_S = 10.0


def program_changed(link, workloads, name: str) -> None:
    """Workload ``name``'s program changed while the agent runs: say hello again, so that the
    daemon records the drift before the first run of the new program reaches it (the link
    sends the hello before any result stored after it)."""
    files = workloads.get(name).changed
    log.warning("workload %s: its program changed (%s replaced, edited or found anew): "
                "telling the daemon, which leaves the runs of the old one out of its fits",
                name, ", ".join(files) or "a file it runs")
    if not link.hello_again().wait(HELLO_WAIT_S):
        log.warning("the hello saying that the program of %s changed was not sent within "
                    "%g s; its runs go on", name, HELLO_WAIT_S)


def run_agent(config, config_path: str | None = None, state_dir_option: bool = False,
              run_as_option: bool = False) -> int:
    """Run the agent until stopped; ``state_dir_option``, ``run_as_option``: the state
    directory, the workloads' user came from --state-dir, --run-as (an error about it names
    the option, not a key)."""
    from .apply import Executor, JobLimits, Worker
    from .doctor import collect as doctor_report
    from .link import Link
    from .machine_id import machine_identity
    from .outbox import Outbox
    from .platform import discover
    from .runner import Runner
    from .state_lock import StateDirBusy
    from .state_lock import hold as hold_state_dir
    from .sysfs import SysFS
    from .targets import Targets
    from .program_id import CACHE_FILENAME, FileIds
    from .workloads import WorkloadError, Workloads

    where = config_path or "configuration"
    # read only here: the digests are kept once the state directory is held (below)
    file_ids = FileIds(os.path.join(config.state_dir, CACHE_FILENAME))
    try:
        workloads = Workloads(config, file_ids=file_ids)
    except WorkloadError as exc:
        print(f"opptune-agent: configuration error: {where}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # before anything is written to the state directory: a refused configuration leaves none
    try:
        run_as = workload_user(config, where, workloads.run_by_python(), run_as_option)
    except ConfigError as exc:
        print(f"opptune-agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    named = "--state-dir" if state_dir_option else f"{where}: key 'state_dir'"
    state_lock = None
    try:
        state_lock = hold_state_dir(config.state_dir)
        outbox = Outbox(config.state_dir, max_bytes=int(config.outbox_max_mb * (1 << 20)))
    except StateDirBusy as exc:
        by = f"pid {exc.pid}" if exc.pid else "another process"
        print(f"opptune-agent: the state directory {config.state_dir} ({named}) is in use by "
              f"another agent ({by}): its outbox and saved cpufreq settings are that agent's; "
              "stop it first, or give this agent a state directory of its own",
              file=sys.stderr)
        return EXIT_BUSY
    except Exception as exc:
        if state_lock is not None:
            state_lock.close()
        if getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
            # the directory is fine (the generic advice said to fix it); the file is not
            box = os.path.join(config.state_dir, "outbox.db")
            print(f"opptune-agent: the outbox {box} is damaged ({exc}) and was left as it is: "
                  "the results in it that the daemon had not acknowledged cannot be read; move "
                  f"it aside (mv {box} {box}.damaged) and start the agent again, which makes "
                  "a new one", file=sys.stderr)
            return EXIT_CONFIG
        print(f"opptune-agent: configuration error: {named} ({config.state_dir}) is not usable: "
              f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}; give a "
              f"directory the agent may create and write", file=sys.stderr)
        return EXIT_CONFIG
    # where each workload runs and what it executes, as its user: a directory it cannot
    # enter would fail every run (workload_check.py)
    from .workdir import WorkDirs
    from .workload_check import Refused, check_workloads
    try:
        for warning in check_workloads(workloads, WorkDirs(config.state_dir, run_as), run_as):
            log.warning("%s", warning)
    except Refused as exc:
        outbox.close()
        state_lock.close()
        print(f"opptune-agent: configuration error: {where}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # the same id on another state directory of this machine is the same board twice; a
    # virtual board is not this machine (tests run several of one id side by side)
    id_lock = None
    if not config.virtual_board:
        from .state_lock import AgentIdBusy, hold_id
        try:
            id_lock = hold_id(config.agent_id, config.daemon)
        except AgentIdBusy as exc:
            state_lock.close()
            by = f"pid {exc.pid}" if exc.pid else "another process"
            print(f"opptune-agent: an agent with agent_id '{config.agent_id}' for the daemon "
                  f"at {config.daemon} already runs on this machine ({by}): two agents of one id are one board twice and would "
                  f"run the same jobs on the same cpus at once; stop that one first, or give "
                  f"this one an agent_id of its own", file=sys.stderr)
            return EXIT_BUSY
        except OSError as exc:
            log.warning("cannot hold the agent id on this machine (%s): a second agent of "
                        "the same id would not be refused", exc.strerror or exc)
    file_ids.save()
    try:
        curve = link_keys(config, where)
    except ConfigError as exc:
        print(f"opptune-agent: configuration error: {exc}", file=sys.stderr)
        state_lock.close()
        return EXIT_CONFIG
    # Before anything is measured: a previous agent killed during a run left the workload's
    # own children running (the child itself died with it), which would skew every run.
    from .leftover import kill_leftovers
    try:
        leftovers = kill_leftovers(config.state_dir)
    except OSError as exc:
        log.warning("cannot check for the processes of a run a killed agent left: %s", exc)
        leftovers = []
    if leftovers:
        log.warning("killed %d process(es) left running by the run a killed agent did not "
                    "finish: pid %s", len(leftovers), ", ".join(map(str, leftovers)))
    # Before reading the platform: a previous agent killed with knobs changed left records of
    # the originals; put them back so nothing pinned is measured or saved as original.
    from .knobs.state import CPUSET_FILENAME, CpusetRecord, restore_at_start
    restore_at_start(config.state_dir, config.sysfs_root)
    platform = discover(config)
    knobs = build_knobs(config, platform)
    meters = build_meters(config, platform)
    invalid = {}
    if not (platform.get("energy") or {}).get("available"):
        invalid["energy_j"] = (platform.get("energy") or {}).get("reason") or "no energy meter"
    runner = Runner(workloads, platform["id"], timeout_s=config.run_timeout_s,
                    virtual=bool(config.virtual_board), knobs=knobs, meters=meters,
                    invalid_defaults=invalid, run_as=run_as, state_dir=config.state_dir)
    targets = Targets(SysFS(config.sysfs_root), virtual=bool(config.virtual_board),
                      record=CpusetRecord(os.path.join(config.state_dir, CPUSET_FILENAME),
                                          config.sysfs_root or "/"))
    # each hello describes the workloads as they are then: a program changed since the last
    # (Runner.on_program_change) is said in a hello of its own
    # which machine and boot: another board of this id and platform is not this one restarting
    machine = machine_identity(config.sysfs_root)
    hello = {"platform": platform, "workloads": workloads.describe,
             "agent_version": __version__, "pid": os.getpid(),
             "doctor": lambda: doctor_report(SysFS(config.sysfs_root), platform), **machine}

    link_holder: dict = {}
    executor = Executor(config.agent_id, platform, workloads, runner, outbox,
                        send=lambda m: link_holder["link"].send(m),
                        notify=lambda: link_holder["link"].notify_outbox(),
                        state_dir=config.state_dir, targets=targets,
                        limits=JobLimits.of(config))
    # the configuration a user applied before the agent stopped: in force again (or dropped,
    # saying why) before the hello, which tells the daemon what stands
    executor.stand_again()
    hello.update(standing=executor.standing_wire, standings=executor.standings_wire,
                 standing_dropped=lambda: (executor.standing_dropped or [None])[0],
                 standings_dropped=lambda: list(executor.standing_dropped))
    worker = Worker(executor)
    link = Link(config.agent_id, config.daemon_endpoints(), hello, outbox, worker.submit,
                heartbeat_s=config.heartbeat_s, curve=curve,
                per_frame=config.results_per_frame, on_heartbeat=worker.watch)
    link_holder["link"] = link
    # a confined process that exited: its configuration dropped, and the daemon told
    executor.say_standings = link.hello_again
    runner.on_program_change = lambda name: program_changed(link, workloads, name)

    stop = threading.Event()

    def on_signal(signum, frame):
        log.info("%s received: stopping", signal.Signals(signum).name)
        stop.set()
        worker.stop(abort=True)
        link.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # the machine's hashed id, as the daemon's line on an id two boards use names it
    log.info("agent %s on platform %s (%s, %d cpus%s%s); opptune %s; workloads: %s; outbox: "
             "%d pending", config.agent_id, platform["id"], platform["model_name"],
             platform["n_cpus"],
             f", virtual board {config.virtual_board}" if config.virtual_board else "",
             "".join(f", {k} {machine[k][:8]}" for k in ("machine", "boot") if k in machine),
             __version__, ", ".join(workloads.names()) or "(none)", outbox.count())
    outbox.other_platforms(platform["id"])
    kept = outbox.rejected_counts()
    if kept:
        log.warning("the outbox keeps %d results the daemon refused for good (%s), not sent "
                    "again%s", sum(kept.values()),
                    ", ".join(f"{n} as {code}" for code, n in kept.items()),
                    "; those refused as unknown_job (jobs its store does not know: a store "
                    "replaced or restored from a backup) are stored by 'opptune recover "
                    f"--agent {config.agent_id}' on the daemon's host"
                    if "unknown_job" in kept else "")
    try:
        link.start()
        worker.start()
        resumed = worker.resume()
        if resumed:
            log.info("resuming %d unfinished job(s) and config(s)", resumed)
        link.run(stop)
    finally:
        worker.stop(abort=True)
        worker.join(timeout=max(5.0, config.heartbeat_s * 2))
        if worker.is_alive():
            log.warning("worker did not stop in time")
        runner.close()  # restores knobs
        for problem in targets.restore():
            log.error("%s", problem)
        link.close()
        executor.close()  # a look at systemd under way (agent/target_watch.py) ends
        outbox.close()
        log.info("agent stopped")
        state_lock.close()
        if id_lock is not None:
            id_lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
