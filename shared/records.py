"""The run record: one measured execution of a workload in one configuration.

Units are in the field names (``_s`` seconds, ``_mhz``, ``_j`` joules, ``_kb``). A value the
platform cannot give is ``None`` (invalid), never zero; ``invalid`` maps the field or counter
name to the reason, so a reader can tell "not measured" from "measured zero".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# an INTEGER column of PostgreSQL: a count past it failed every batch it came in (store_failed
# for every agent in the batch, again at each resend)
from .protocol import INT32_MAX


# Counters a record derives from the raw hardware events (agent/meters/perf.py): name ->
# (numerator, denominator). Relative values, comparable between runs of different lengths and
# boards, so MPET's sc takes them (seed 000 eq. 8-9, "pc").
DERIVED_COUNTERS = {
    "ipc": ("instructions", "cycles"),
    "cache_miss_rate": ("cache-misses", "cache-references"),
    "branch_miss_rate": ("branch-misses", "branches"),
    "branches_per_instruction": ("branches", "instructions"),
    "l1d_miss_rate": ("L1-dcache-load-misses", "L1-dcache-loads"),
    "l1d_misses_per_instruction": ("L1-dcache-load-misses", "instructions"),
    "llc_miss_rate": ("LLC-load-misses", "LLC-loads"),
}


# the error text of a run the agent skipped after an earlier run of its point timed out
# ("not run: warmup 0 of this point timed out after 5 s"): a follow-on, not a cause
NOT_RUN = "not run: "
# what follows NOT_RUN in the runs the agent skipped when it stopped a job whose points timed
# out in a row (agent configuration stop_after_timeouts): the job's reason, done or failed
JOB_STOPPED = "the job stopped after "
# what follows NOT_RUN in the runs the agent skipped when the daemon cancelled the job
# (opptune cancel, tune --stop); their extra["stopped"] is {"cancelled": true, ...}
JOB_CANCELLED = "the job was cancelled "


def job_stop(error: Any, extra: Any = None) -> dict[str, Any] | None:
    """The stop of a job a 'not run' record carries: ``extra["stopped"]`` as the agent sends
    it (``{"after_timeouts": n, "points_not_run": k, "points": m, "definition": d}``), else,
    from an agent that sent only the text (or a job stored before the field), what its text
    says: ``{"after_timeouts": n}``; None for any other record or text. ``error`` may be a
    job's reason, which holds the agent's text after other causes."""
    stop = extra.get("stopped") if isinstance(extra, dict) else None
    if isinstance(stop, dict) and type(stop.get("after_timeouts")) is int:
        return stop
    text = error if isinstance(error, str) else ""
    at = text.find(JOB_STOPPED)
    if at < 0:
        return None
    n = text[at + len(JOB_STOPPED):].split(" ", 1)[0]
    return {"after_timeouts": int(n) if n.isdigit() else None}


class RecordError(ValueError):
    """A record that cannot be accepted; the message names the field."""


@dataclass
class RunRecord:
    platform: str  # platform id (agent's platform fingerprint)
    workload: str
    input: str  # input size class or value, as text
    cores: int  # number of cpus in the cpu set
    cpus: list[int]
    threads: int
    # repetition index, 0-based; warmups are not recorded, but for one that timed out: it
    # takes the place of the point's first repetition (not run), extra["warmup"] its index
    rep: int
    ok: bool = True
    error: str | None = None
    variant: str = ""  # categorical knobs, "k=v;k=v"
    freq_mhz: float | None = None  # frequency that was set (None: not set / not settable)
    freq_observed_mhz: dict[str, float] | None = None  # per cpufreq policy, read before the run
    time_s: float | None = None  # the workload's own timed region (or wall when it has none)
    # the child's wall time: from its last step before exec (the agent's fork and set-up
    # left out, extra["start_cost_s"] their time) to its reaping; without start_cost_s (older
    # agents, or the child said nothing) from before the fork
    wall_s: float | None = None
    user_s: float | None = None
    sys_s: float | None = None
    ctx_voluntary: int | None = None
    ctx_involuntary: int | None = None
    max_rss_kb: int | None = None
    counters: dict[str, float | None] = field(default_factory=dict)
    energy_j: float | None = None
    energy_source: str | None = None
    thread_stats: list[dict[str, float]] = field(default_factory=list)  # per-thread busy/wait
    invalid: dict[str, str] = field(default_factory=dict)  # field/counter -> reason
    virtual: bool = False  # measured on a virtual board (tests, demos): never real hardware
    started_at: float | None = None  # unix time
    extra: dict[str, Any] = field(default_factory=dict)
    # thermal zones before/after/max during the run, throttle counter increases, and why the
    # run counts as throttled (agent/meters/thermal.py); None: not recorded (older agents)
    thermal: dict[str, Any] | None = None
    throttled: bool = False  # kept in the store, left out of fits
    # what else used the run's cpus (agent/meters/interference.py): share of the cpu set's
    # capacity others used, per cpu, the top offender, the load average; None: not recorded
    interference: dict[str, Any] | None = None
    # why the run does not measure the configuration alone (interference beyond the agent's
    # interference_max_share, throttling); None: clean. Kept in the store, left out of fits
    marked: str | None = None

    def to_dict(self, compact: bool = True) -> dict[str, Any]:
        """A plain map for the wire and the store. ``compact`` leaves out fields that hold their
        default (nil, empty, false): about half of a typical record, and the ingest path pays
        per byte. ``from_dict`` restores them."""
        out = {}
        for name in _FIELD_ORDER:
            value = getattr(self, name)
            if compact and name in _DEFAULTS and value == _DEFAULTS[name]:
                continue
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        """Build from a decoded map; raises RecordError naming the offending field.

        Runs once per result on the daemon's ingest path: the defaults and ``data`` are merged
        into the new record's ``__dict__`` and checked there, without the generated
        ``__init__`` (30 keyword arguments: 2.1 us of 3.7 per record)."""
        if not isinstance(data, dict):
            raise RecordError("record must be a map")
        # fresh containers for the defaults a caller may fill in (mark_invalid)
        d = {**_PLAIN_DEFAULTS, "counters": {}, "thread_stats": [], "invalid": {}, "extra": {},
             **data}
        # with every required field present, one field more than the record has is unknown
        if len(d) != _N_FIELDS or not _REQUIRED <= data.keys():
            if not data.keys() <= _FIELD_NAMES:
                unknown = sorted(map(str, data.keys() - _FIELD_NAMES))
                raise RecordError(f"record has unknown fields: {', '.join(unknown)}")
            missing = sorted(_REQUIRED - data.keys())
            raise RecordError(f"record is incomplete: lacks {', '.join(missing)}")
        _validate(d)
        rec = cls.__new__(cls)
        rec.__dict__ = d
        return rec

    def validate(self) -> None:
        """Raise RecordError naming the first field that is wrong."""
        _validate(self.__dict__)


_TEXT_FIELDS = ("platform", "workload", "input", "variant")
# They name a group: every status and report lists them (a 1 MB input name made the status
# reply too large to send).
MAX_NAME_LEN = 1024
_COUNT_FIELDS = ("cores", "threads", "rep")
_NUMBER_FIELDS = ("freq_mhz", "time_s", "wall_s", "user_s", "sys_s", "energy_j")
_NUMBER_TYPES = (int, float)  # exact types: bool is refused
_INT_TYPE = {int}
_INT64_MAX = 2**63 - 1  # the widest integer SQLite stores (a REAL column's int too)


_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(RunRecord))
_FIELD_NAMES = frozenset(_FIELD_ORDER)
_REQUIRED = frozenset(f.name for f in dataclasses.fields(RunRecord)
                      if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING)
_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
             for f in dataclasses.fields(RunRecord)
             if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
_N_FIELDS = len(_FIELD_ORDER)
# the defaults that are not containers, in field order (from_dict adds fresh containers)
_PLAIN_DEFAULTS = {k: v for k, v in _DEFAULTS.items() if not isinstance(v, (dict, list))}
assert {k for k in _DEFAULTS if k not in _PLAIN_DEFAULTS} == {
    "counters", "thread_stats", "invalid", "extra"}, "from_dict's fresh containers"


def _validate(d: dict[str, Any]) -> None:
    """Raise RecordError naming the first field of a record's ``__dict__`` that is wrong. Runs
    once per result on the daemon's ingest path, hence exact type tests, no generic loops."""
    for name in _TEXT_FIELDS:
        if type(d[name]) is not str or len(d[name]) > MAX_NAME_LEN:
            raise RecordError(f"record field '{name}' must be text of at most "
                              f"{MAX_NAME_LEN} characters")
    for name in _COUNT_FIELDS:
        v = d[name]
        if type(v) is not int or not 0 <= v <= INT32_MAX:
            raise RecordError(f"record field '{name}' must be an integer from 0 to 2**31-1")
    if d["cores"] < 1 or d["threads"] < 1:
        raise RecordError("record needs cores >= 1 and threads >= 1")
    cpus = d["cpus"]
    if (type(cpus) not in (list, tuple) or len(cpus) != d["cores"]
            or not set(map(type, cpus)) <= _INT_TYPE):
        raise RecordError("record field 'cpus' must list exactly 'cores' cpu numbers")
    for name in _NUMBER_FIELDS:
        v = d[name]
        # an int past 64 bits is finite but no database column holds it
        if v is not None and (type(v) not in _NUMBER_TYPES or not 0 <= v < math.inf
                              or type(v) is int and v > _INT64_MAX):
            raise RecordError(f"record field '{name}' must be a finite number >= 0 or nil")
    if d["ok"] and d["time_s"] is None:
        raise RecordError("a successful record needs time_s")
    if type(d["counters"]) is not dict or type(d["invalid"]) is not dict:
        raise RecordError("record fields 'counters' and 'invalid' must be maps")
    for name in ("ok", "virtual", "throttled"):  # stored as 0/1 columns
        if type(d[name]) is not bool:
            raise RecordError(f"record field '{name}' must be true or false")
    if d["thermal"] is not None and type(d["thermal"]) is not dict:
        raise RecordError("record field 'thermal' must be a map or nil")
    if d["interference"] is not None and type(d["interference"]) is not dict:
        raise RecordError("record field 'interference' must be a map or nil")
    if d["marked"] is not None and type(d["marked"]) is not str:
        raise RecordError("record field 'marked' must be text or nil")


class RecordColumns(NamedTuple):
    """What a store keeps of a record in columns of their own (the record itself is stored
    whole beside them), as :func:`record_columns` reads it from a decoded map."""
    platform: str
    workload: str
    input: str
    variant: str
    cores: int
    cpus: list[int]
    threads: int
    freq_mhz: float | None
    rep: int
    time_s: float | None
    wall_s: float | None
    user_s: float | None
    sys_s: float | None
    energy_j: float | None
    ok: bool
    virtual: bool
    throttled: bool
    marked: str | None


_new_columns = tuple.__new__
_INF = math.inf
_EMPTY: dict[str, Any] = {}  # a default looked at, never changed


def record_columns(data: Any) -> RecordColumns | None:
    """The stored columns of a decoded record that :meth:`RunRecord.from_dict` accepts, read
    without building the record; None where the record needs the full path: one whose
    ``extra`` holds ``point`` (an adaptive point's last record says there that it closes the
    point) or is not a map, and any record that fails one of these checks, so that
    ``from_dict`` refuses it with its message. The rest of ``extra`` is stored as it came
    (every run of an agent since 2026-11-27 has ``start_cost_s`` and its ``program`` digest
    there: the full path took 2.7 times as long for a command's record).

    The daemon's ingest path runs this once per result (500 agents: 1.3 of 3.0 us per record,
    and no 32-entry ``__dict__`` with four fresh containers to build and free). Its checks are
    ``_validate``'s, narrower where that is simpler (exact dict and list types): it accepts
    only what ``from_dict`` accepts (tests/test_config_records.py checks both on the same
    inputs), so a record refused here is refused by ``from_dict`` or accepted by it."""
    if (type(data) is not dict or not data.keys() <= _FIELD_NAMES
            or not _REQUIRED <= data.keys()):
        return None
    get = data.get
    platform, workload, inp = data["platform"], data["workload"], data["input"]
    variant = get("variant", "")
    cores, cpus, threads, rep = data["cores"], data["cpus"], data["threads"], data["rep"]
    freq, time_s = get("freq_mhz"), get("time_s")
    wall, user, sys_, energy = get("wall_s"), get("user_s"), get("sys_s"), get("energy_j")
    ok, virtual, throttled = get("ok", True), get("virtual", False), get("throttled", False)
    marked, thermal, interf = get("marked"), get("thermal"), get("interference")
    extra = get("extra")
    if (extra and (type(extra) is not dict or "point" in extra)
            or type(platform) is not str or len(platform) > MAX_NAME_LEN
            or type(workload) is not str or len(workload) > MAX_NAME_LEN
            or type(inp) is not str or len(inp) > MAX_NAME_LEN
            or type(variant) is not str or len(variant) > MAX_NAME_LEN
            or type(cores) is not int or not 1 <= cores <= INT32_MAX
            or type(threads) is not int or not 1 <= threads <= INT32_MAX
            or type(rep) is not int or not 0 <= rep <= INT32_MAX
            or type(cpus) is not list or len(cpus) != cores
            or not set(map(type, cpus)) <= _INT_TYPE
            or type(ok) is not bool or type(virtual) is not bool or type(throttled) is not bool
            or (ok and time_s is None)
            or type(get("counters", _EMPTY)) is not dict
            or type(get("invalid", _EMPTY)) is not dict
            or (thermal is not None and type(thermal) is not dict)
            or (interf is not None and type(interf) is not dict)
            or (marked is not None and type(marked) is not str)):
        return None
    for v in (freq, time_s, wall, user, sys_, energy):
        if v is not None and not (type(v) is float and 0.0 <= v < _INF
                                  or type(v) is int and 0 <= v <= _INT64_MAX):
            return None
    return _new_columns(RecordColumns, (platform, workload, inp, variant, cores, cpus, threads,
                                        freq, rep, time_s, wall, user, sys_, energy, ok,
                                        virtual, throttled, marked))


def program_of(data: Any) -> str | None:
    """The program digest a decoded record's run measured (``extra["program"]``, the
    workload's ``program`` of the agent's hello when it ran; agent/runner.py); None where it
    does not say (an older agent, a record of no workload's run)."""
    extra = data.get("extra") if type(data) is dict else None
    program = extra.get("program") if type(extra) is dict else None
    return program if type(program) is str and program else None


def columns_of(rec: RunRecord) -> RecordColumns:
    """The stored columns of a built record (as :func:`record_columns` reads them)."""
    return _new_columns(RecordColumns, tuple(getattr(rec, f) for f in RecordColumns._fields))


def mark_invalid(record: RunRecord, name: str, reason: str) -> None:
    """Record that ``name`` (a field or counter) could not be measured, and why."""
    record.invalid[name] = reason
    if name in record.counters or name.startswith("counter:"):
        record.counters[name.removeprefix("counter:")] = None
    elif hasattr(record, name):
        setattr(record, name, None)
