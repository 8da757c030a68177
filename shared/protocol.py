"""The agent <-> daemon wire protocol: message types, msgpack encoding and validation.

Every message is a msgpack map (the envelope)::

    {"v": PROTOCOL_VERSION, "type": str, "id": str, "ts": float, "agent": str, "body": map}

``decode`` validates the envelope and the body of every known type before anything uses it and
raises :class:`ProtocolError` (never anything else) naming the problem. Server loops catch it,
answer with an ``error`` message and log it. Beyond each field's type: integer fields fit in
64 bits (the stores' columns), and the bodies kept as JSON (hello, job, config) hold only text
keys, no byte strings, and nest at most ``MAX_PLAIN_DEPTH`` deep (tests/test_fuzz_*.py and
benchmarks/fuzz.py feed the decoder and every handler hostile input).

Message types and who sends them:

=========  =========  ==============================================================
type       from       meaning
=========  =========  ==============================================================
hello      agent      platform description and the workloads this agent may run; again
                      when a workload's program changed while it runs (before that run's
                      result), so that the daemon records the drift
heartbeat  both       liveness (body may be empty)
job        daemon     a sweep: run these points of one workload, reps each
result     agent      one run record of a job (at least once; keyed by envelope id)
results    agent      up to MAX_RESULTS_ITEMS results in one frame: ``items`` = [[id, body],
                      ...], each the id and body its ``result`` message would have (the
                      envelope is the frame's): acks, idempotency and refusals stay per
                      result. Sent only to a daemon whose heartbeat carries ``results_max``
ack        daemon     these result message ids are committed to the store
config     daemon     apply this recommended configuration and verify it
cancel     daemon     stop job ``job_id`` for good: the agent kills the run under way (its
                      process group), skips the rest and records every run not run with
                      ``extra["stopped"] = {"cancelled": true, ...}``; a job it only queued
                      is dropped the same way; one it does not hold (unknown, ended) is
                      ignored. An older agent refuses the type (``unknown_type``, ``ref`` =
                      the cancel's id): the job then runs to its end there
applied    agent      outcome of a config: verified records, or why it was refused
resend     daemon     send again the results kept as refused for good with these ``codes``
                      (``opptune recover``: ``unknown_job``, after the daemon's store was
                      replaced). An older agent refuses the type (``unexpected_type`` or
                      ``unknown_type``, ``ref`` = the resend's id): they stay kept there
error      both       something received was refused; ``ref`` names its message id
query      operator   ask the daemon for its state (``opptune status``)
reply      daemon     answer to a query
=========  =========  ==============================================================

Refusal codes the daemon uses for who may send what (the agent keeps its results for the
transient ones and parks them for the permanent ones, see agent/link.py):

- ``unknown_job``: a result for a job the daemon did not issue to that agent (permanent;
  while ``opptune recover`` holds the agent's results open, the daemon stores a job its store
  does not know as ``recovered`` instead, see daemon/recovery.py);
  ``unknown_config``: an ``applied`` for a configuration not pushed to it (permanent).
- With CURVE on: ``key_pending`` (the operator has not accepted the sender's key yet),
  ``key_rejected``, ``key_revoked``, ``key_mismatch`` (the key was accepted for another agent
  id), ``not_operator`` (a query from a key that is not the operator's). Key refusals are
  transient: accepting the key lets the waiting results in.
- ``results`` frames: an item whose body fails a result's checks is refused alone (``ref`` =
  the item's id) and the frame's other items go in; a frame whose items are not a list of
  1..MAX_RESULTS_ITEMS [id, body] pairs is refused whole (``ref`` = the frame's id).
  An agent told ``unknown_type`` for a frame (an older daemon) sends those results singly.
- Per-agent limits (read before decoding): ``rate_limited`` (over the sender's token bucket;
  transient: the agent pauses and resends) and ``too_large`` (over the daemon's
  ``max_message_bytes``; permanent).

A ``query`` that changes something (sweep, characterize, tune, tune_stop, cancel, import,
recommend with ``apply``, keys accept/reject/revoke: daemon/recent_requests.py) is a request
whose id is its envelope id. The daemon remembers its answer (reply data or refusal) by (sender identity, id),
a bounded number for a bounded time. The same message again, or ``{"what": "again", "args":
{"request": ID}}`` from the same sender (the operator's retry after a timeout, on the same
connection), is answered with that answer (``ref`` = the asking message's id), or, while the
request is under way, not at all: the request's own reply follows. It is never carried out a
second time; one not remembered is refused ``unknown_request``. Older clients send neither and
are answered as before; an older daemon refuses ``again`` as ``unknown_query`` (nothing is
carried out twice there either).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import msgpack

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # 1 MiB: a run record is a few KiB; anything larger is hostile.
# A daemon's reply to an operator's query (status, report, export, mpet_data) carries the
# store's jobs, fits and runs, which grow with every sweep: a store of 837 jobs and 771 groups
# answered 'report' in 1.08 MB. Replies go only to the operator that asked, over its own
# (authenticated) connection, so they may be larger than what anyone may send to the daemon.
MAX_REPLY_BYTES = 64 << 20
MAX_ID_LEN = 64
# Error codes that say a message can never be accepted as sent (the daemon validated it and
# refused it): the agent keeps such a result in its outbox's rejected table instead of
# resending it, and 'opptune recover --also CODE' asks for those of one code again. Other
# codes (unknown_agent, store_failed, internal, agent_offline, rate_limited) are transient.
PERMANENT_REFUSALS = frozenset({
    "bad_record", "unknown_config", "malformed", "too_large", "bad_version", "unknown_type",
    "missing_field", "bad_type", "bad_value", "bad_id", "bad_agent", "unexpected_type",
    "unknown_job", "wrong_group",
})
# Integer fields are stored in 64-bit columns (SQLite, PostgreSQL bigint); msgpack carries up
# to 2**64-1, and one such value would fail a whole batch's insert.
MAX_INT = 2**63 - 1
INT32_MAX = 2**31 - 1  # seq is stored in an INTEGER column (PostgreSQL: 32 bits)
# items of one "results" frame: receiving and the envelope checks are paid once per frame;
# 64 keeps one frame's refusals (an error each) and its share of a batch small
MAX_RESULTS_ITEMS = 64


class ProtocolError(ValueError):
    """A message that must be refused. ``code`` is a stable machine-readable reason."""

    def __init__(self, code: str, message: str, ref: str | None = None):
        super().__init__(message)
        self.code = code
        self.ref = ref


# Body schemas: field -> (allowed types, required). Nested content (records, platform) is
# validated by its own module; here only its container type is checked.
_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_LIST = (list, tuple)
_MAP = (dict,)
_BOOL = (bool,)

BODY_SCHEMAS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "hello": {
        "platform": (_MAP, True),
        # each {"name", "kind", "sizes", "description", "definition", "program",
        # "program_core"?}; definition: a digest of what runs and its run_timeout_s, program:
        # of what runs only, program_core: program less the shared libraries where they are
        # part of it (the program as agents before 0.5 digested it: daemon/drift.py)
        # (agent/workloads.py; each absent from older agents)
        "workloads": (_LIST, True),
        "agent_version": (_STR, True),
        "pid": (_INT, False),
        # agent/doctor.py's report: {"checks": [...], "warnings": int, "summary": str}
        "doctor": (_MAP, False),
        # the configuration a user applied that is in force on the board now (agent/standing
        # .py): {"config_id", "workload", "size", "cpus", "freq_khz", "target"?}; nil: none;
        # absent: an older agent, which does not say
        "standing": ((dict, type(None)), False),
        # why the configuration in force before the agent restarted was dropped: 'CONFIG_ID:
        # why' (the daemon notes it on that recommendation); the first of standings_dropped
        "standing_dropped": (_OPT_STR, False),
        # every configuration in force, one per target (the board, each pid, each unit),
        # oldest first, each as ``standing`` says one (which is the newest of them, for a
        # daemon that knows one per board); absent: an agent that keeps one per board
        # (shared/standing.py)
        "standings": (_LIST, False),
        # why each configuration in force before the agent restarted was dropped, as
        # standing_dropped says one
        "standings_dropped": (_LIST, False),
        # the board's machine id and boot id, each made specific to opptune (agent/machine_id
        # .py): two boards of one agent id and platform are not one restarting; each absent
        # where the board has no such id, and from older agents
        "machine": (_STR, False),
        "boot": (_STR, False),
    },
    "heartbeat": {
        "outbox": (_INT, False),  # results waiting for an ack on the agent
        "instance": (_STR, False),  # the sender's process instance: a change means a restart
        "outbox_full": (_STR, False),  # why the agent's outbox takes no new runs now
    },
    "job": {
        "job_id": (_STR, True),
        "workload": (_STR, True),
        "size": (_STR, True),
        # each point: {"cpus": [int], "threads": int, "freq_khz": int | None}, optionally
        # "until": {"ci": float, "min_reps": int, "budget_s": float}: adaptive repetition,
        # reps is then the most runs; the agent ends the point once the relative 95 % interval
        # of its median is within ci (shared/point_stats.py). The point's last record says so
        # in extra["point"] = {"index", "runs", "done": true, "stop": ci|max_reps|budget}.
        # An agent that ignores it runs reps of every point, as for a fixed job.
        "points": (_LIST, True),
        "reps": (_INT, True),
        "warmup": (_INT, True),
    },
    "result": {
        "job_id": (_STR, True),
        "seq": (_INT, True),  # index of this run within the job
        "of": (_INT, True),  # number of runs the job will produce
        # shared.records.RunRecord.to_dict(); the runs an agent did not run because it stopped
        # the job for its timeouts carry the stop in extra["stopped"] (records.job_stop); each
        # run the program digest it measured in extra["program"] (the workload's "program" of
        # the hello when it ran: records.program_of; in extra, which an older daemon stores
        # as it is, where a field of the record's own would be refused as unknown)
        "record": (_MAP, True),
    },
    "results": {
        # [[id, body], ...]: each a result's message id and body (see check_item)
        "items": (_LIST, True),
    },
    "ack": {
        "ids": (_LIST, True),
    },
    "config": {
        "config_id": (_STR, True),
        "workload": (_STR, True),
        "size": (_STR, True),
        "cpus": (_LIST, True),
        "threads": (_INT, True),
        "freq_khz": (_OPT_INT, False),
        "reps": (_INT, True),
        "predicted_time_s": ((int, float, type(None)), False),
        # where to apply it: {"kind": "command"|"pid"|"unit", "pid": int, "unit": str,
        # "window_s": float}; absent = run the workload (agent/targets.py)
        "target": (_MAP, False),
        # true or absent: it stays in force (frequencies) until another config replaces it,
        # kept across agent restarts (agent/standing.py); false: verified, then the board
        # goes back to rest (the daemon's own verification of a recommendation after a
        # sweep, agent/apply.py)
        "keep": (_BOOL, False),
    },
    "cancel": {
        "job_id": (_STR, True),
    },
    "resend": {
        "codes": (_LIST, True),  # refusal codes, e.g. ["unknown_job"]
    },
    "applied": {
        "config_id": (_STR, True),
        "ok": (_BOOL, True),
        "error": (_OPT_STR, False),
        "records": (_LIST, False),
        "time_s": ((int, float, type(None)), False),  # median verified time
        # a pid/unit target's verification window: cpu time, frequencies, energy
        "measured": (_MAP, False),
    },
    "error": {
        "code": (_STR, True),
        "message": (_STR, True),
        "ref": (_OPT_STR, False),
    },
    "query": {
        "what": (_STR, True),  # "status", "sweep", ...
        "args": (_MAP, False),
    },
    "reply": {
        "ref": (_STR, True),
        "data": (_MAP, True),
    },
}

MESSAGE_TYPES = frozenset(BODY_SCHEMAS)
_ENVELOPE = (("v", _INT), ("type", _STR), ("id", _STR), ("ts", _NUM), ("agent", _STR),
             ("body", _MAP))


def new_id() -> str:
    """A unique message id: 32 hex digits laid out as a UUIDv7 (RFC 9562, section 5.7).

    The first 48 bits are the Unix time in ms, so ids sort by creation time. The daemon keys its
    runs table on the id: time-ordered keys land at the right edge of the unique index instead
    of on random pages (measured on the dev VM: 27 -> 9 us per stored result). 74 random bits
    keep ids made in the same millisecond distinct."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = ((ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (rand >> 68) << 64
             | 0b10 << 62 | rand & 0x3FFF_FFFF_FFFF_FFFF)
    return f"{value:032x}"


def make(msg_type: str, agent: str, body: dict[str, Any] | None = None, msg_id: str | None = None,
         ts: float | None = None) -> dict[str, Any]:
    """Build and validate an envelope. Raises ProtocolError when the body does not fit its type."""
    msg = {
        "v": PROTOCOL_VERSION,
        "type": msg_type,
        "id": msg_id or new_id(),
        "ts": time.time() if ts is None else ts,
        "agent": agent,
        "body": body or {},
    }
    validate(msg)
    return msg


def encode(msg: dict[str, Any], limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """Validate and pack one message (``limit``: MAX_REPLY_BYTES for a query's reply)."""
    validate(msg)
    data = msgpack.packb(msg, use_bin_type=True)
    if len(data) > limit:
        raise ProtocolError("too_large", f"message of {len(data)} bytes exceeds the limit of "
                                         f"{limit} bytes", msg.get("id"))
    return data


def decode(data: bytes, limit: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """Unpack and validate one message; raises ProtocolError for anything that must be refused
    (``limit``: MAX_REPLY_BYTES for a query's reply)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError("bad_frame", f"expected bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise ProtocolError("too_large", f"message of {len(data)} bytes exceeds the limit of "
                                         f"{limit} bytes")
    try:
        msg = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for corrupt input
        raise ProtocolError("malformed", f"not a valid msgpack message: {exc}") from None
    validate(msg)
    return msg


def validate(msg: Any) -> None:
    """Check the envelope and the body of a message; raise ProtocolError naming the problem."""
    if type(msg) is dict and msg.get("type") == "result" and _plain_result(msg):
        return
    _check_all(msg)


def _check_all(msg: Any) -> None:
    """``validate``'s checks of every field, naming the first problem found."""
    if not isinstance(msg, dict):
        raise ProtocolError("malformed", f"message must be a map, got {type(msg).__name__}")
    ref = msg.get("id") if isinstance(msg.get("id"), str) else None
    for key, types in _ENVELOPE:
        if key not in msg:
            raise ProtocolError("missing_field", f"envelope lacks required field '{key}'", ref)
        if type(msg[key]) not in types:  # exact types: bool is not an int here
            raise ProtocolError("bad_type", f"envelope field '{key}' must be "
                                            f"{'/'.join(t.__name__ for t in types)}, "
                                            f"got {type(msg[key]).__name__}", ref)
    if msg["v"] != PROTOCOL_VERSION:
        raise ProtocolError("bad_version", f"protocol version {msg['v']} is not supported "
                                           f"(this side speaks {PROTOCOL_VERSION})", ref)
    if msg["type"] not in MESSAGE_TYPES:
        raise ProtocolError("unknown_type", f"unknown message type '{msg['type'][:40]}'", ref)
    if not msg["id"] or len(msg["id"]) > MAX_ID_LEN:
        raise ProtocolError("bad_id", f"message id must be 1..{MAX_ID_LEN} characters", ref)
    if len(msg["agent"]) > MAX_ID_LEN:
        raise ProtocolError("bad_agent", f"agent id longer than {MAX_ID_LEN} characters", ref)
    schema = BODY_SCHEMAS[msg["type"]]
    body = msg["body"]
    for field, (types, required) in schema.items():
        if field not in body:
            if required:
                raise ProtocolError("missing_field", f"{msg['type']} body lacks required field "
                                                     f"'{field}'", ref)
            continue
        value = body[field]
        if type(value) not in types and not (isinstance(value, types) and type(value) is not bool):
            raise ProtocolError("bad_type", f"{msg['type']} field '{field}' must be "
                                            f"{'/'.join(t.__name__ for t in types)}, "
                                            f"got {type(value).__name__}", ref)
        if type(value) is int and not -MAX_INT <= value <= MAX_INT:
            raise ProtocolError("bad_value", f"{msg['type']} field '{field}' is out of the "
                                             f"64-bit range", ref)
    _check_body(msg["type"], body, ref)
    if msg["type"] == "results":
        _check_items(body["items"], ref)


def _check_items(items: Any, ref: str | None) -> None:
    """What makes a ``results`` frame one: 1..MAX_RESULTS_ITEMS [id, body] pairs, each id
    1..MAX_ID_LEN characters (its refusal's ref). Each body's checks are ``check_item``'s."""
    if not 0 < len(items) <= MAX_RESULTS_ITEMS:
        raise ProtocolError("bad_value", f"results holds {len(items)} items; 1.."
                                         f"{MAX_RESULTS_ITEMS} are allowed", ref)
    for i, item in enumerate(items):
        if type(item) is not list or len(item) != 2:
            raise ProtocolError("malformed", f"results item {i} is not an [id, body] pair", ref)
        mid = item[0]
        if type(mid) is not str or not 0 < len(mid) <= MAX_ID_LEN:
            raise ProtocolError("bad_id", f"results item {i} needs an id of 1..{MAX_ID_LEN} "
                                          "characters", ref)


def check_item(frame: dict[str, Any], msg_id: str, body: Any) -> None:
    """Check one item of a validated ``results`` frame as the result message it stands for
    (the frame's envelope, this id and body); ProtocolError with ``ref`` = its id when it is
    refused."""
    if _plain_body(body):
        return
    if type(body) is not dict:
        raise ProtocolError("bad_type", f"results item body must be a map, got "
                                        f"{type(body).__name__}", msg_id)
    _check_all({"v": frame["v"], "type": "result", "id": msg_id, "ts": frame["ts"],
                "agent": frame["agent"], "body": body})


def pack_item(msg_id: str, body: dict[str, Any]) -> bytes:
    """One item of a ``results`` frame: a result's id and body (a validated result's)."""
    return msgpack.packb([msg_id, body], use_bin_type=True)


def pack_results(agent: str, items: list[bytes], msg_id: str | None = None,
                 ts: float | None = None) -> bytes:
    """A ``results`` frame around ``items`` as ``pack_item`` packed them: their bytes are
    spliced in, not packed again (a msgpack array is its header and its elements' bytes one
    after another). The caller bounds the count and the frame's size."""
    head = msgpack.packb({"v": PROTOCOL_VERSION, "type": "results", "id": msg_id or new_id(),
                          "ts": time.time() if ts is None else ts, "agent": agent,
                          "body": {"items": []}}, use_bin_type=True)
    # the empty array (0x90) is the frame's last byte: body is the last key, items its only one
    return head[:-1] + _array_header(len(items)) + b"".join(items)


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    return b"\xdc" + n.to_bytes(2, "big") if n < 1 << 16 else b"\xdd" + n.to_bytes(4, "big")


def _plain_result(msg: dict[str, Any]) -> bool:
    """Whether ``validate`` accepts ``msg``, a result message, on a few exact tests (the
    daemon's ingest runs this once per result: 0.4 us against 0.9 for the generic checks).
    False where it cannot tell quickly: the generic checks then refuse it naming why, or
    accept it. Never True where they would refuse."""
    v, mid, ts, agent = msg.get("v"), msg.get("id"), msg.get("ts"), msg.get("agent")
    return (type(v) is int and v == PROTOCOL_VERSION and type(mid) is str
            and 0 < len(mid) <= MAX_ID_LEN and (type(ts) is float or type(ts) is int)
            and type(agent) is str and len(agent) <= MAX_ID_LEN and _plain_body(msg.get("body")))


def _plain_body(body: Any) -> bool:
    """``_plain_result``'s tests of a result's body (a ``results`` item's: 0.2 us)."""
    if type(body) is not dict:
        return False
    seq, of, job_id = body.get("seq"), body.get("of"), body.get("job_id")
    return (type(job_id) is str and type(body.get("record")) is dict and type(seq) is int
            and type(of) is int and 0 <= seq <= INT32_MAX and seq < of <= MAX_INT)


def _check_body(msg_type: str, body: dict[str, Any], ref: str | None) -> None:
    """Checks beyond field types: counts and list contents."""
    if msg_type == "job":
        if body["reps"] < 1 or body["warmup"] < 0:
            raise ProtocolError("bad_value", "job needs reps >= 1 and warmup >= 0", ref)
        for i, point in enumerate(body["points"]):
            if not isinstance(point, dict):
                raise ProtocolError("bad_type", f"job point {i} must be a map", ref)
            _check_cpus(point.get("cpus"), f"job point {i}", ref)
            if not isinstance(point.get("threads"), int) or point["threads"] < 1:
                raise ProtocolError("bad_value", f"job point {i} needs threads >= 1", ref)
            if not isinstance(point.get("freq_khz"), (int, type(None))):
                raise ProtocolError("bad_type", f"job point {i} freq_khz must be int or nil", ref)
            if "until" in point:
                _check_until(point["until"], f"job point {i}", ref)
    elif msg_type == "config":
        _check_cpus(body["cpus"], "config", ref)
        if body["threads"] < 1 or body["reps"] < 1:
            raise ProtocolError("bad_value", "config needs threads >= 1 and reps >= 1", ref)
        if "target" in body and not isinstance(body["target"].get("kind", "command"), str):
            raise ProtocolError("bad_type", "config target kind must be text", ref)
    elif msg_type == "ack":
        if not all(isinstance(i, str) for i in body["ids"]):
            raise ProtocolError("bad_type", "ack ids must be strings", ref)
    elif msg_type == "result":
        if not 0 <= body["seq"] < body["of"] or body["seq"] > INT32_MAX:
            raise ProtocolError("bad_value", "result needs 0 <= seq < of and seq < 2**31",
                                ref)
    elif msg_type == "applied":
        _check_applied(body, ref)
    elif msg_type == "hello":
        for key in ("machine", "boot"):
            if key in body and not 0 < len(body[key]) <= MAX_ID_LEN:
                raise ProtocolError("bad_value", f"hello {key} must be 1..{MAX_ID_LEN} "
                                                 "characters", ref)
    if msg_type in _KEPT_AS_JSON:
        # the daemon keeps a hello's platform and workloads as JSON, the agent a job's and a
        # config's body: text keys, no byte strings, bounded depth
        problem = _plain_problem(body, MAX_PLAIN_DEPTH)
        if problem:
            raise ProtocolError("bad_value", f"{msg_type} body: {problem}", ref)


def _check_until(until: Any, where: str, ref: str | None) -> None:
    """A point's adaptive-repetition rule: ci in (0, 1), min_reps >= 1, budget_s >= 0."""
    if not isinstance(until, dict):
        raise ProtocolError("bad_type", f"{where} until must be a map", ref)
    ci, mn, budget = until.get("ci", 0.02), until.get("min_reps", 1), until.get("budget_s", 0)
    if type(ci) not in (int, float) or not 0 < ci < 1:
        raise ProtocolError("bad_value", f"{where} until.ci must be a number in (0, 1)", ref)
    if type(mn) is not int or not 1 <= mn <= MAX_INT:
        raise ProtocolError("bad_value", f"{where} until.min_reps must be an integer >= 1", ref)
    if not _number(budget):
        raise ProtocolError("bad_value", f"{where} until.budget_s must be a number >= 0", ref)


def _number(v: Any) -> bool:
    """A finite number >= 0 (not a bool), as measured times, rates and energies are."""
    return type(v) in (int, float) and 0 <= v < math.inf and (type(v) is float or v <= MAX_INT)


def _check_applied(body: dict[str, Any], ref: str | None) -> None:
    """The verified time and a pid/unit target's measured window, which the daemon judges
    and describes: each known field of its type (agent/targets.py writes them)."""
    if body.get("time_s") is not None and not _number(body["time_s"]):
        raise ProtocolError("bad_value", "applied time_s must be a finite number >= 0 or nil",
                            ref)
    m = body.get("measured")
    if m is None:
        return
    target = m.get("target", {})
    if not isinstance(target, dict) or ("pid" in target and type(target["pid"]) is not int) \
            or not isinstance(target.get("unit", ""), str):
        raise ProtocolError("bad_value", "applied measured.target must be a map with an int "
                                         "pid or a text unit", ref)
    for key in ("cpus_busy", "window_s", "energy_j"):
        if m.get(key) is not None and not _number(m[key]):
            raise ProtocolError("bad_value", f"applied measured.{key} must be a finite number "
                                             ">= 0 or nil", ref)
    freqs = m.get("freq_mhz")
    if freqs is not None and not (isinstance(freqs, dict) and all(
            type(k) is str and _number(f) for k, f in freqs.items())):
        raise ProtocolError("bad_value", "applied measured.freq_mhz must map policy names to "
                                         "frequencies", ref)


_KEPT_AS_JSON = frozenset({"hello", "job", "config"})
MAX_PLAIN_DEPTH = 16  # a platform description nests 5 deep; msgpack allows 1024, json ~1000


def _plain_problem(value: Any, depth: int) -> str | None:
    """Why ``value`` cannot be stored as JSON (a map key that is not text, a byte string,
    nesting deeper than ``depth``); None if it can."""
    if isinstance(value, dict):
        if depth <= 0:
            return f"nested deeper than {MAX_PLAIN_DEPTH} levels"
        for k, v in value.items():
            if type(k) is not str:
                return f"map key {k!r:.40} is not text"
            problem = _plain_problem(v, depth - 1)
            if problem:
                return problem
    elif isinstance(value, (list, tuple)):
        if depth <= 0:
            return f"nested deeper than {MAX_PLAIN_DEPTH} levels"
        for v in value:
            problem = _plain_problem(v, depth - 1)
            if problem:
                return problem
    elif isinstance(value, (bytes, bytearray)):
        return "holds a byte string where text or numbers belong"
    return None


def _check_cpus(cpus: Any, where: str, ref: str | None) -> None:
    if not isinstance(cpus, (list, tuple)) or not cpus:
        raise ProtocolError("bad_value", f"{where}: cpus must be a non-empty list of cpu numbers",
                            ref)
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 65536 for c in cpus):
        raise ProtocolError("bad_value", f"{where}: cpus must be cpu numbers 0..65535", ref)
    if len(set(cpus)) != len(cpus):
        raise ProtocolError("bad_value", f"{where}: cpus lists a cpu twice", ref)


def error_reply(agent: str, code: str, message: str, ref: str | None = None) -> dict[str, Any]:
    """An ``error`` message answering a refused one."""
    return make("error", agent, {"code": code, "message": message[:1000], "ref": ref})
