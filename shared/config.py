"""TOML configuration of the agent and the daemon. Errors name the file and the key.

Defaults live in ``/etc/opptune/agent.toml`` and ``/etc/opptune/daemon.toml``; every entry point
takes ``--config PATH`` to override. Missing files mean "all defaults", a missing key means its
default, an unknown key or a wrong type is an error (a typo must not silently do nothing).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_AGENT_CONFIG = Path("/etc/opptune/agent.toml")
DEFAULT_DAEMON_CONFIG = Path("/etc/opptune/daemon.toml")
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names file, key and the fix."""


# ZeroMQ transports an endpoint may name (zmq_connect(3)); "host:port" alone is not an endpoint
TRANSPORTS = ("tcp", "ipc", "inproc", "pgm", "epgm", "vmci")


def endpoint_problem(value: str) -> str | None:
    """Why ``value`` is not a ZeroMQ endpoint ("transport://address"), with the fix; None if
    it is one."""
    transport, sep, address = value.partition("://")
    if not sep:
        # a bare host names no port either: tcp://host alone cannot be bound or reached
        port = "" if ":" in value or "/" in value else ":5555"
        return (f"{value!r} lacks a transport; write it as \"tcp://{value}{port}\" "
                "(or ipc:///path/to/socket)")
    if transport not in TRANSPORTS:
        return (f"{value!r} names the unknown transport {transport!r}; use one of "
                f"{', '.join(t + '://' for t in TRANSPORTS)}")
    if not address:
        return f"{value!r} has no address after {transport}://"
    if transport == "tcp":
        return _tcp_port_problem(value, address)
    return None


def _tcp_port_problem(value: str, address: str) -> str | None:
    """Why a tcp endpoint's port is not one; libzmq takes a port above 65535 modulo 65536, so
    tcp://host:99999 would listen on (or reach) port 34463 with no word said."""
    host, sep, port = address.rpartition(":")
    if not sep:
        return (f"{value!r} names no port; write it as \"tcp://{address}:5555\" "
                "(the port the daemon listens on)")
    if not host:
        return f"{value!r} names no host; write it as \"tcp://HOST:{port}\""
    if port != "*" and not (port.isdigit() and int(port) <= 65535):
        return (f"{value!r} has the port {port!r}, not a number from 0 to 65535; "
                f"write it as \"tcp://{host}:5555\" with the daemon's port")
    return None


def metrics_problem(value: str) -> str | None:
    """Why ``value`` is not "HOST:PORT" for the metrics server, with the fix; None if it is."""
    host, sep, port = value.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # an IPv6 address
        host = host[1:-1].replace(":", "")
    if (not sep or not host or not host.replace(".", "").replace("-", "").isalnum()
            or not port.isdigit() or not 0 < int(port) < 65536):
        return (f"{value!r} is not HOST:PORT; write e.g. \"127.0.0.1:9464\" "
                "(an empty string turns metrics off)")
    return None


@dataclass
class CommandWorkload:
    """A real workload the agent may run: a command line, or a pyperf benchmark script;
    ``{threads}``, ``{size}`` and ``{cpus}`` are substituted. Only workloads defined in the
    agent's own configuration ever run."""
    name: str
    command: list[str] = field(default_factory=list)
    sizes: list[str] = field(default_factory=lambda: ["default"])
    env: dict[str, str] = field(default_factory=dict)
    threads_env: str = "OMP_NUM_THREADS"  # also exported with the thread count
    # a pyperf benchmark script (instead of command; a relative path is relative to the
    # configuration file): each run runs it once and its value is the run's time_s
    pyperf: str = ""
    pyperf_args: list[str] = field(default_factory=list)  # more options for the script
    # the directory its runs start in (a relative path is relative to the configuration
    # file); empty: a directory of its own under the agent's state directory (agent/workdir.py)
    cwd: str = ""


@dataclass
class AgentConfig:
    agent_id: str = field(default_factory=socket.gethostname)
    daemon: str = DEFAULT_ENDPOINT
    # more daemons sharing the first one's PostgreSQL database: the agent talks to one at a
    # time, in the order daemon, failover_daemons..., and moves to the next when one stops
    # answering (3 heartbeats), resending every unacknowledged result there
    failover_daemons: list[str] = field(default_factory=list)
    state_dir: str = "/var/lib/opptune-agent"
    # bound on the results waiting for the daemon's ack (MiB); at it, no new run starts until
    # acks make room (nothing is dropped)
    outbox_max_mb: float = 256.0
    sysfs_root: str = "/"  # tests point this at a fake tree
    heartbeat_s: float = 2.0
    # bench_suite kernels this agent offers ("all" = the whole catalogue)
    bench_kernels: list[str] = field(default_factory=lambda: ["all"])
    workloads: list[CommandWorkload] = field(default_factory=list)
    virtual_board: str = ""  # name of a virtual board (tests and demos only)
    run_timeout_s: float = 600.0
    # a job stops after this many of its points in a row had a run that timed out (a program
    # that hangs would wait run_timeout_s at every point); its other runs are recorded not
    # run with the reason. 0: never stop
    stop_after_timeouts: int = 2
    # a run whose cpu set other processes used for more than this share of its capacity is
    # marked (stored, left out of fits)
    interference_max_share: float = 0.05
    # the unprivileged user the workloads run as when the agent runs as root (it needs root
    # for the frequencies, the workloads do not); empty: "opptune-run" (agent/cli.py's
    # DEFAULT_RUN_AS); "root": as root, on purpose. An agent that is not root runs them as
    # its own user.
    run_as: str = ""
    log_level: str = "INFO"
    # CURVE encryption and authentication of the link: "auto" (on unless the daemon endpoint
    # is loopback), "on" or "off"; with it on, the daemon's public key (Z85 text or a file's
    # path; 'opptune keys server' prints it) is needed
    curve: str = "auto"
    daemon_public_key: str = ""
    # bounds on the jobs and configurations this agent accepts from a daemon (a hostile or
    # buggy one could otherwise keep the board busy practically forever); over them the job
    # is refused and the daemon told why. Each run is bounded by run_timeout_s.
    max_reps: int = 1000  # repetitions of a point (a job's adaptive max_reps included)
    max_warmup: int = 100  # unrecorded runs before a point's repetitions
    max_points: int = 10_000  # points of one job
    max_threads_per_cpu: int = 8  # a point's threads per cpu of its cpu set
    max_job_runs: int = 100_000  # runs of one job, warm-ups included: points x (reps + warmup)
    # results sent together in one "results" frame when several are due (a backlog), to a
    # daemon that takes them; 1 = always one result per message
    results_per_frame: int = 16

    def daemon_endpoints(self) -> list[str]:
        """Every daemon endpoint, in the order the agent tries them."""
        return list(dict.fromkeys([self.daemon, *self.failover_daemons]))


@dataclass
class SweepDefaults:
    size: str = "default"
    reps: int = 3
    warmup: int = 1
    max_cores: int = 0  # 0 = all cores the agent reports
    frequencies: list[int] = field(default_factory=list)  # kHz, for frequency_grid = "list"
    # Which frequencies each core count is measured at (only ones the points' cpufreq policies
    # offer are planned):
    #   "list" (default): the ``frequencies`` list; an empty list = leave the frequency alone
    #   "none": leave the frequency alone (the board's own governor)
    #   "all":  every frequency the platform offers (a policy without a table, intel_pstate:
    #           its range at 100 MHz steps)
    #   "N" (a whole number >= 1, e.g. "3"): N frequencies evenly spread over the offered
    #           table (or range), lowest and highest included ("1" = the highest only)
    frequency_grid: str = "list"
    # Sweep each cluster (frequency domain) of a heterogeneous board on its own: each point's
    # cpus lie in one cluster, with that cluster's frequency table.
    per_cluster: bool = False
    # Adaptive repetition (shared/point_stats.py): each point runs until the relative 95 %
    # interval of its median is within target_ci, or max_reps runs, or point_budget_s seconds
    # of runs (0: no budget); reps is then unused. At least min_reps runs (3 or more: fewer
    # values have no 95 % interval).
    adaptive: bool = False
    target_ci: float = 0.02
    max_reps: int = 20
    min_reps: int = 3
    point_budget_s: float = 0.0

    GRID_WORDS = ("none", "all", "list")

    @staticmethod
    def parse_grid(value: Any, key: str = "sweep.frequency_grid") -> str | int:
        """"none", "all", "list" or a step count (int >= 1); ConfigError naming ``key``."""
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        if isinstance(value, str):
            v = value.strip().lower()
            if v in SweepDefaults.GRID_WORDS:
                return v
            if v.isdigit() and int(v) >= 1:
                return int(v)
        raise ConfigError(f"'{key}' must be \"none\", \"all\", \"list\" or a number of "
                          f"evenly spread frequencies >= 1 (e.g. \"3\"), got {value!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "frequency_grid":
            self.parse_grid(value)  # fail at load time, naming the key
        super().__setattr__(name, value)


@dataclass
class DaemonConfig:
    bind: str = DEFAULT_ENDPOINT
    # an SQLite file's path, or a PostgreSQL database's URL (postgresql://user@host/dbname),
    # which several daemons may share
    database: str = "/var/lib/opptune/opptune.db"
    heartbeat_s: float = 2.0
    agent_timeout_s: float = 10.0
    # a queued, sent or running job expires when its agent has not been seen for this long;
    # 0: jobs for an offline agent wait for it (never expire)
    job_expiry_s: float = 60.0
    # a daemon of the fleet (sharing the database) with no heartbeat for this long is gone for
    # good: its row is dropped from the store (and from 'opptune status'); 0: kept until a
    # daemon starts at its endpoint
    fleet_forget_s: float = 86400.0
    tolerance: float = 0.05  # recommend the fewest cores within this of the best predicted time
    auto_sweep: bool = False  # send a sweep to every agent that says hello
    auto_recommend: bool = True  # push a config once a sweep is complete and fitted
    verify_reps: int = 3
    # this many consecutive verifications of a group outside the prediction interval
    # ("off") make the daemon re-characterise it (a new sweep) and recommend again; 0: never
    drift_off_count: int = 2
    # where Prometheus metrics are served over HTTP ("HOST:PORT"); empty: no metrics
    metrics_endpoint: str = ""
    sweep: SweepDefaults = field(default_factory=SweepDefaults)
    log_level: str = "INFO"
    # CURVE on the bound endpoint: "auto" (on unless it is loopback), "on" or "off"
    curve: str = "auto"
    # the daemon's key pair, the operator's and the agents' keys; empty: "keys" beside the
    # database
    keys_dir: str = ""
    # Per-agent limits, so that one misbehaving agent cannot starve the others: frames larger
    # than max_message_bytes are refused unread; each agent may send rate_limit_per_s messages
    # a second on average and rate_limit_burst at once (over it: "rate_limited", the agent
    # resends later); at most max_outstanding_jobs jobs are out with an agent at a time, the
    # rest wait queued in the daemon.
    max_message_bytes: int = 1 << 20
    rate_limit_per_s: float = 20000.0
    rate_limit_burst: int = 20000
    max_outstanding_jobs: int = 8
    # Points whose runs were all marked (interference, throttling) are measured again by a job
    # of those points only, after each of these waits in seconds in turn (so at most as many
    # retries as entries; empty: never); a point still marked after the last is reported as
    # never measured clean (daemon/remeasure.py).
    remeasure_backoff_s: list[float] = field(default_factory=lambda: [10.0, 30.0, 90.0])
    # fit marked runs too: the recommendation then holds for the board under that load
    accept_load: bool = False

    def keys_path(self) -> Path:
        if self.keys_dir:
            return Path(self.keys_dir)
        if is_database_url(self.database):
            return Path(DEFAULT_KEYS_DIR)
        return Path(self.database).parent / "keys"


DEFAULT_KEYS_DIR = "/var/lib/opptune/keys"  # with a PostgreSQL database and no keys_dir


def is_database_url(value: str) -> bool:
    """Whether ``database`` names a PostgreSQL database rather than an SQLite file."""
    return value.startswith(("postgresql://", "postgres://"))


def database_problem(value: str) -> str | None:
    """Why ``value`` is not a usable ``database`` (with the fix); None if it is."""
    if not value.strip():
        return "must be an SQLite file's path or a postgresql://user@host/dbname URL"
    if not is_database_url(value):
        if "://" in value:
            return (f"{value.split('://', 1)[0]}:// is not a database this daemon knows: give "
                    "an SQLite file's path or a postgresql://user@host/dbname URL")
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        return f"not a valid URL ({exc}): write postgresql://user@host:port/dbname"
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        return "names no database: write postgresql://user@host/dbname"
    return None


def redact_url(value: str) -> str:
    """``database`` as it may be shown: a URL's password replaced by ***."""
    if "://" not in value:
        return value
    try:
        parts = urlsplit(value)
        if parts.password is None:
            return value
    except ValueError:
        return value.split("://", 1)[0] + "://(a URL that cannot be read)"
    user, host = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def _coerce(path: Path, key: str, value: Any, default: Any, tp: Any) -> Any:
    """Check one value against the type of its default."""
    if dataclasses.is_dataclass(default):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: [{key}] must be a table")
        return _build(type(default), value, path, prefix=f"{key}.")
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        # a key that checks itself takes a whole number too (frequency_grid = 3)
        ok = isinstance(value, str) or (key in SELF_CHECKED and isinstance(value, int)
                                        and not isinstance(value, bool))
    elif isinstance(default, list):
        ok = isinstance(value, list)
    else:
        ok = True
    if not ok:
        raise ConfigError(f"{path}: key '{key}' must be {form_of(key, default)}, "
                          f"got {_show(value)}")
    return value


# keys whose value its dataclass checks when it is set (SweepDefaults.parse_grid)
SELF_CHECKED = ("sweep.frequency_grid",)


# What a key's value must look like, in the words of the error messages (keys not listed get
# their type's words). Durations and sizes are plain numbers: "2s" or "1MiB" are refused.
FORMS = {
    "heartbeat_s": "a number of seconds > 0, e.g. 2.0",
    "agent_timeout_s": "a number of seconds > 0, e.g. 10.0",
    "run_timeout_s": "a number of seconds > 0, e.g. 600.0",
    "job_expiry_s": "a number of seconds >= 0 (0: jobs for an offline agent wait for it)",
    "fleet_forget_s": "a number of seconds >= 0 (0: a silent daemon's row is kept)",
    "tolerance": "a fraction of the best time from 0 to 1, e.g. 0.05 for 5 %",
    "verify_reps": "a whole number >= 1",
    "drift_off_count": "a whole number >= 0 (consecutive off verifications before "
                       "re-characterising; 0 = never)",
    "sweep.reps": "a whole number >= 1",
    "sweep.warmup": "a whole number >= 0",
    "sweep.max_cores": "a whole number >= 0 (0 = all cores the agent reports)",
    "sweep.size": "a size name, e.g. \"small\"",
    "sweep.frequencies": "an array of frequencies in kHz, e.g. [1200000, 1800000]",
    "sweep.frequency_grid": "\"none\", \"all\", \"list\" or a number of evenly spread "
                            "frequencies >= 1, e.g. 3",
    "sweep.target_ci": "a fraction of the median between 0 and 1, e.g. 0.02 for +-2 %",
    "sweep.max_reps": "a whole number >= 3 (the most runs of an adaptive point)",
    "sweep.min_reps": "a whole number >= 3 (fewer values have no 95 % interval)",
    "sweep.point_budget_s": "a number of seconds >= 0 (0: no time budget per point)",
    "bench_kernels": "an array of kernel names, e.g. [\"triad\"] or [\"all\"]",
    "failover_daemons": "an array of endpoints, e.g. [\"tcp://host2:5555\"]",
    "agent_id": "1 to 64 characters, e.g. the host name",
    "log_level": "one of \"DEBUG\", \"INFO\", \"WARNING\", \"ERROR\"",
    "daemon": "an endpoint, e.g. \"tcp://daemon-host:5555\"",
    "bind": "an endpoint, e.g. \"tcp://0.0.0.0:5555\"",
    "run_as": "a user name, e.g. \"opptune-run\" (\"root\": workloads as root)",
    "max_message_bytes": "a byte count from 1024 to 1048576 (1 MiB)",
    "rate_limit_per_s": "a rate from 1 to 10000000 messages per second",
    "rate_limit_burst": "a message count from 1 to 10000000",
    "max_outstanding_jobs": "a job count from 1 to 100000",
    "outbox_max_mb": "a size in MiB from 0.001 to 1000000, e.g. 256",
    "remeasure_backoff_s": "an array of at most 10 waits in seconds > 0, e.g. [10, 30, 90] "
                           "([] = never re-measure)",
    "interference_max_share": "a fraction of the cpu set's capacity from 0 to below 1, e.g. "
                              "0.05 for 5 %",
    "max_reps": "a repetition count from 1 to 1000000, e.g. 1000",
    "max_warmup": "a warm-up run count from 0 to 1000000, e.g. 100",
    "stop_after_timeouts": "a point count from 0 to 1000000, e.g. 2 (0: never stop a job "
                           "for its timeouts)",
    "max_points": "a point count from 1 to 1000000, e.g. 10000",
    "max_threads_per_cpu": "a thread count per cpu from 1 to 4096, e.g. 8",
    "max_job_runs": "a run count from 1 to 1000000000, e.g. 100000",
    "results_per_frame": "a result count from 1 to 64, e.g. 16 (1: one result per message)",
}
_TYPE_WORDS = {bool: "true or false", float: "a number", int: "a whole number", str: "text",
               list: "an array"}


def form_of(key: str, default: Any = None) -> str:
    """How the value of ``key`` must be written."""
    return FORMS.get(key) or _TYPE_WORDS.get(type(default), "a value of another type")


def _show(value: Any) -> str:
    """A value as an error message quotes it: its TOML type and at most 60 characters."""
    text = repr(value)
    kind = {bool: "boolean", int: "integer", float: "number", str: "text", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)
    return f"{kind} {text[:60]}{'...' if len(text) > 60 else ''}"


def _build(cls: type, data: dict[str, Any], path: Path, prefix: str = "") -> Any:
    inst = cls()
    names = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), list(names), n=1, cutoff=0.6)
            hint = f"did you mean '{prefix}{close[0]}'? " if close else ""
            raise ConfigError(f"{path}: unknown key '{prefix}{key}'; {hint}known keys"
                              f"{f' of [{prefix[:-1]}]' if prefix else ''}: "
                              f"{', '.join(sorted(names))}")
        if cls is AgentConfig and key == "workloads":
            value = [_workload(path, i, w) for i, w in enumerate(_list(path, key, value))]
        else:
            value = _coerce(path, prefix + key, value, getattr(inst, key), names[key].type)
        try:
            setattr(inst, key, value)
        except ConfigError as exc:  # a field that checks itself (frequency_grid)
            raise ConfigError(f"{path}: key {exc}") from None
    return inst


def _list(path: Path, key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{path}: '{key}' must be an array of tables ([[{key}]])")
    return value


def _workload(path: Path, i: int, data: Any) -> CommandWorkload:
    where = f"{path}: [[workloads]] entry {i + 1}"
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a table")
    # first: a misspelt 'command' was reported as a missing one, the typo never named
    known = [f.name for f in dataclasses.fields(CommandWorkload)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), known, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'; {hint}known keys: "
                          f"{', '.join(sorted(known))}")
    if "command" not in data and "pyperf" not in data:
        raise ConfigError(f"{where} lacks 'command' (an argv array) or 'pyperf' (a pyperf "
                          "benchmark script's path)")
    if "command" in data and "pyperf" in data:
        raise ConfigError(f"{where} has both 'command' and 'pyperf': keep one (a pyperf "
                          "script's options go in 'pyperf_args')")
    if "command" in data and (not isinstance(data["command"], list)
                              or not all(isinstance(a, str) for a in data["command"])):
        raise ConfigError(f"{where}: 'command' must be an array of strings "
                          "(argv, no shell), e.g. [\"./app\", \"--threads\", \"{threads}\"]")
    if "pyperf" in data:
        script = _pyperf_script(path, where, data["pyperf"])
        # a script's workload is named after it unless the entry names it
        data = {"name": Path(script).stem, **data, "pyperf": script}
    if "name" not in data:
        raise ConfigError(f"{where} lacks 'name'")
    if not isinstance(data["name"], str) or not data["name"].strip():
        raise ConfigError(f"{where}: 'name' must be a non-empty name, got {_show(data['name'])}")
    sizes = data.get("sizes", ["default"])
    if not isinstance(sizes, list) or not sizes or not all(isinstance(x, str) for x in sizes):
        raise ConfigError(f"{where}: 'sizes' must be a non-empty array of size names, e.g. "
                          f"[\"small\", \"large\"], got {_show(sizes)}")
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{where}: 'env' must be a table of text values, e.g. "
                          f"{{ OMP_PROC_BIND = \"true\" }}, got {_show(env)}")
    if not isinstance(data.get("threads_env", ""), str):
        raise ConfigError(f"{where}: 'threads_env' must be an environment variable's name, "
                          f"got {_show(data['threads_env'])}")
    args = data.get("pyperf_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: 'pyperf_args' must be an array of strings, e.g. "
                          f"[\"--loops\", \"1000\"], got {_show(args)}")
    if "cwd" in data:
        data = {**data, "cwd": _workload_dir(path, where, data["cwd"])}
    return CommandWorkload(**data)


def _workload_dir(path: Path, where: str, value: Any) -> str:
    """The absolute path of a workload's ``cwd`` (relative: from the configuration's folder);
    ConfigError unless it is an existing directory."""
    leave = ("or leave 'cwd' out: the workload then runs in a directory of its own under the "
             "agent's state directory")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: 'cwd' must be the path of a directory, e.g. "
                          f"\"/srv/work\", got {_show(value)}; {leave}")
    d = Path(value).expanduser()
    if not d.is_absolute():
        d = path.parent.absolute() / d
    if not d.exists():
        raise ConfigError(f"{where}: 'cwd' {d} does not exist; create it (writable by the "
                          f"user the workloads run as, run_as) {leave}")
    if not d.is_dir():
        raise ConfigError(f"{where}: 'cwd' {d} is not a directory; give a directory the "
                          f"workload runs in, {leave}")
    # absolute but not resolved: a cwd that is a link (/srv/bench/current -> release-12) is
    # entered through the link at each run, and the program digest looks there too; resolved
    # here, a link re-pointed later ran the new release while the digest read the old one
    return str(d)


def _pyperf_script(path: Path, where: str, value: Any) -> str:
    """The pyperf script's absolute path (a relative one is taken from the configuration's
    folder, so the agent's working directory does not matter); ConfigError when missing."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: 'pyperf' must be the path of a pyperf benchmark script, "
                          "e.g. \"bench.py\"")
    script = Path(value).expanduser()
    if not script.is_absolute():
        script = path.parent / script
    if not script.is_file():
        raise ConfigError(f"{where}: pyperf script {script} does not exist; give the path of "
                          "a script that runs pyperf.Runner (relative to this file)")
    return str(script.resolve())


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the whole file first
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text (byte {exc.start}); give "
                          "a TOML text file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def load_agent_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> AgentConfig:
    """Load the agent configuration; ``overrides`` (from the command line) win over the file.

    An explicitly named file must exist; the default path may be absent (all defaults)."""
    return _load(AgentConfig, path, DEFAULT_AGENT_CONFIG, overrides)


def load_daemon_config(path: str | os.PathLike[str] | None = None,
                       **overrides: Any) -> DaemonConfig:
    """Load the daemon configuration; ``overrides`` win over the file."""
    return _load(DaemonConfig, path, DEFAULT_DAEMON_CONFIG, overrides)


# keys holding a ZeroMQ endpoint, and keys that must not be negative
ENDPOINT_KEYS = ("daemon", "bind")
NON_NEGATIVE_KEYS = ("tolerance",)
# the daemon's per-agent limits: (key, lowest, highest, expected form)
LIMIT_KEYS = (
    ("max_message_bytes", 1024, 1 << 20, "a byte count from 1024 to 1048576 (1 MiB)"),
    ("rate_limit_per_s", 1.0, 1e7, "a rate from 1 to 10000000 messages per second"),
    ("rate_limit_burst", 1, 10_000_000, "a message count from 1 to 10000000"),
    ("max_outstanding_jobs", 1, 100_000, "a job count from 1 to 100000"),
    # the agent's bounds on the jobs it accepts
    ("max_reps", 1, 1_000_000, FORMS["max_reps"]),
    ("max_warmup", 0, 1_000_000, FORMS["max_warmup"]),
    ("stop_after_timeouts", 0, 1_000_000, FORMS["stop_after_timeouts"]),
    ("max_points", 1, 1_000_000, FORMS["max_points"]),
    ("max_threads_per_cpu", 1, 4096, FORMS["max_threads_per_cpu"]),
    ("max_job_runs", 1, 1_000_000_000, FORMS["max_job_runs"]),
    ("results_per_frame", 1, 64, FORMS["results_per_frame"]),  # 64: MAX_RESULTS_ITEMS
)


def _option(key: str) -> str:
    """The command-line option that sets ``key``."""
    return "--heartbeat" if key == "heartbeat_s" else f"--{key.replace('_', '-')}"


def _seconds(v: Any) -> bool:
    return math.isfinite(v) and v > 0


# (key, test of its value) beyond its type, each key's expected form in FORMS
VALUE_CHECKS: tuple[tuple[str, Any], ...] = (
    ("agent_id", lambda v: 0 < len(v) <= 64 and v.strip() == v),
    ("heartbeat_s", _seconds), ("agent_timeout_s", _seconds), ("run_timeout_s", _seconds),
    ("verify_reps", lambda v: v >= 1),
    ("log_level", lambda v: v.upper() in ("DEBUG", "INFO", "WARNING", "ERROR")),
    ("bench_kernels", lambda v: all(isinstance(k, str) and k for k in v)),
    ("sweep.reps", lambda v: v >= 1), ("sweep.warmup", lambda v: v >= 0),
    ("sweep.max_cores", lambda v: v >= 0), ("sweep.size", lambda v: bool(v.strip())),
    ("sweep.frequencies", lambda v: all(type(f) is int and f > 0 for f in v)),
    ("sweep.target_ci", lambda v: math.isfinite(v) and 0 < v < 1),
    ("sweep.max_reps", lambda v: v >= 3), ("sweep.min_reps", lambda v: v >= 3),
    ("sweep.point_budget_s", lambda v: math.isfinite(v) and v >= 0),
    ("outbox_max_mb", lambda v: 0.001 <= v <= 1_000_000),
    ("interference_max_share", lambda v: 0 <= v < 1),
    ("remeasure_backoff_s", lambda v: len(v) <= 10 and all(
        type(x) in (int, float) and math.isfinite(x) and x > 0 for x in v)),
)


# keys naming a file or directory: a relative one in a file is taken from the file's directory
# (as a pyperf script is), not from wherever the program was started (/ under systemd)
PATH_KEYS = ("state_dir", "sysfs_root", "database", "keys_dir")


def _load(cls: type, path: Any, default: Path, overrides: dict[str, Any]) -> Any:
    p = Path(path) if path else default
    if path and not p.exists():
        raise ConfigError(f"{p}: configuration file not found; create it or drop --config")
    data = _read(p)
    for key in PATH_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute() \
                and "://" not in value:  # a URL (or a wrong one, which the checks name)
            data[key] = os.path.normpath(p.parent.absolute() / value)
    given = {k: v for k, v in overrides.items() if v is not None}
    data.update(given)
    config = _build(cls, data, p)
    for key in ENDPOINT_KEYS:
        value = getattr(config, key, None)
        problem = endpoint_problem(value) if isinstance(value, str) else None
        if problem:
            where = (_option(key) if key in given
                     else f"{p}: key '{key}'" if key in data else f"default '{key}'")
            raise ConfigError(f"{where}: {problem}")
    for i, value in enumerate(getattr(config, "failover_daemons", [])):
        problem = (endpoint_problem(value) if isinstance(value, str)
                   else "must be an endpoint string such as tcp://host:5555")
        if problem:
            raise ConfigError(f"{p}: key 'failover_daemons' entry {i + 1} ({value!r}): "
                              f"{problem}")
    database = getattr(config, "database", None)
    if isinstance(database, str) and database_problem(database):
        where = "--database" if "database" in given else f"{p}: key 'database'"
        raise ConfigError(f"{where} ({redact_url(database)}): {database_problem(database)}")
    metrics = getattr(config, "metrics_endpoint", "")
    if metrics and metrics_problem(metrics):
        where = ("--metrics-endpoint" if "metrics_endpoint" in given
                 else f"{p}: key 'metrics_endpoint'")
        raise ConfigError(f"{where}: {metrics_problem(metrics)}")
    curve = getattr(config, "curve", "auto")
    if curve not in ("auto", "on", "off"):
        raise ConfigError(f"{p}: key 'curve' must be \"auto\" (encrypt unless loopback), "
                          f"\"on\" or \"off\", got {curve!r}")
    for key in ("job_expiry_s", "fleet_forget_s"):  # 0 means never: no lower bound above 0
        value = getattr(config, key, None)
        if value is not None and not value >= 0:
            raise ConfigError(f"{p}: key '{key}' must be {FORMS[key]}, got {value!r}")
    for key in NON_NEGATIVE_KEYS:
        value = getattr(config, key, None)
        if value is not None and not 0 <= value <= 1:
            raise ConfigError(f"{p}: key '{key}' must be >= 0 and <= 1 (a fraction of the "
                              f"best time, e.g. 0.05 for 5 %), got {value!r}")
    for key, ok in VALUE_CHECKS:
        section, _, name = key.rpartition(".")
        holder = getattr(config, section, None) if section else config
        if holder is None or not hasattr(holder, name):
            continue  # a key of the other program's configuration
        value = getattr(holder, name)
        if not ok(value):
            where = (_option(name) if not section and name in given
                     else f"{p}: key '{key}'")
            raise ConfigError(f"{where} must be {form_of(key)}, got {_show(value)}")
    for key, low, high, form in LIMIT_KEYS:
        value = getattr(config, key, None)
        if value is not None and not low <= value <= high:
            raise ConfigError(f"{p}: key '{key}' must be {form}, got {value!r}")
    if getattr(config, "drift_off_count", 0) < 0:
        raise ConfigError(f"{p}: key 'drift_off_count' must be >= 0 (consecutive off "
                          f"verifications before re-characterising; 0 = never), got "
                          f"{config.drift_off_count!r}")
    return config
