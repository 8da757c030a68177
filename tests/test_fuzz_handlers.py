"""Hostile input, in process: the decoder and every message handler of the daemon and of the
agent fed structured-but-wrong bodies (wrong types, missing and unknown keys, huge integers,
NaN, deep nesting, byte strings). Each must end in a clean refusal with a named code, never in
an ``internal`` error, an escaped exception, an error log line or a stored row."""

from __future__ import annotations

import logging
import math
import sqlite3
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opptune.daemon.service import Daemon
from opptune.shared import protocol as P
from opptune.shared.config import DaemonConfig, SweepDefaults
from opptune.shared.records import RunRecord

PLATFORM = {"id": "plat-fuzz", "sweep_order": [0, 1], "cpus_online": [0, 1]}
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# Values a hostile peer can put anywhere msgpack lets it: every scalar type at its edges, byte
# strings, and containers nested deeper than any real message.
scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30)
           | st.binary(max_size=30) | st.sampled_from([2**63, 2**64 - 1, -2**63, math.nan]))


def _deep(n: int) -> Any:
    v: Any = 0
    for i in range(n):
        v = [v] if i % 2 else {"k": v}
    return v


hostile = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6) | st.binary(
        max_size=4) | st.integers(-2**63, 2**64 - 1), kids, max_size=4),
    max_leaves=12) | st.integers(1, 400).map(_deep)


class ErrorLines(logging.Handler):
    """Counts ERROR (and worse) lines of opptune's loggers: an exception a handler did not
    expect is logged with log.exception."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture
def errors():
    h = ErrorLines()
    logger = logging.getLogger("opptune")
    logger.addHandler(h)
    yield h
    logger.removeHandler(h)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A daemon (not serving: batches are handed to it directly) that knows agent a1 and
    issued it one job."""
    tmp = tmp_path_factory.mktemp("fuzz")
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp / "d.db"), auto_sweep=True,
                       agent_timeout_s=30, sweep=SweepDefaults(size="small", reps=2, warmup=0))
    d = Daemon(cfg)
    d.handle_batch([(b"a1", P.make("hello", "a1", {"platform": PLATFORM, "workloads": ["wl"],
                                                   "agent_version": "test"}))])
    (job,) = d.store.jobs()
    yield d, job["job_id"]
    d.close()


def stored_seq(d: Daemon, job_id: Any, seq: Any) -> bool:
    """Whether a result of ``job_id`` with ``seq`` is already stored."""
    if not isinstance(job_id, str) or type(seq) is not int:
        return False
    con = sqlite3.connect(d.config.database)
    try:
        return con.execute("SELECT 1 FROM runs WHERE job_id = ? AND seq = ?",
                           (job_id, seq)).fetchone() is not None
    except OverflowError:
        return False
    finally:
        con.close()


def runs(d: Daemon) -> int:
    con = sqlite3.connect(d.config.database)
    try:
        return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        con.close()


def record(**kw) -> dict[str, Any]:
    return {**RunRecord(platform="plat-fuzz", workload="wl", input="small", cores=1, cpus=[0],
                        threads=1, rep=0, time_s=1.0, virtual=True).to_dict(), **kw}


def wire(msg_type: str, body: Any, agent: Any = "a1", msg_id: Any = None) -> bytes:
    return msgpack.packb({"v": 1, "type": msg_type, "id": msg_id or P.new_id(), "ts": 1.0,
                          "agent": agent, "body": body}, use_bin_type=True)


def mutate(data: st.DataObject, body: dict[str, Any]) -> dict[str, Any]:
    """One to three of: a field replaced by a hostile value, a field dropped, a key added."""
    body = dict(body)
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["set", "drop", "add"]))
        if how == "drop" and body:
            body.pop(data.draw(st.sampled_from(list(body))))
        elif how == "add":
            body[data.draw(st.text(max_size=8))] = data.draw(hostile)
        elif body:
            body[data.draw(st.sampled_from(list(body)))] = data.draw(hostile)
    return body


def feed(d: Daemon, data: bytes) -> str | None:
    """Decode as the link does and hand the message to the daemon; the refusal code, or None
    when it was accepted."""
    before = dict(d.link.refusals.by_code)
    try:
        msg = P.decode(data)
    except P.ProtocolError as exc:
        assert exc.code in DECODER_CODES and str(exc)
        return exc.code
    d.handle_batch([(b"a1", msg)])
    new = {c for c, n in d.link.refusals.by_code.items() if n > before.get(c, 0)}
    assert "internal" not in new, d.link.refusals.by_code
    assert len(new) <= 1
    return new.pop() if new else None


DECODER_CODES = {"malformed", "bad_type", "missing_field", "bad_version", "unknown_type",
                 "bad_id", "bad_agent", "bad_value", "too_large"}


def valid_bodies(job_id: str) -> dict[str, dict[str, Any]]:
    return {
        "hello": {"platform": PLATFORM, "workloads": ["wl"], "agent_version": "test"},
        "heartbeat": {"outbox": 1, "instance": "i"},
        "error": {"code": "bad_job", "message": "m", "ref": None},
        "applied": {"config_id": "nope", "ok": True, "time_s": 1.0, "records": [record()]},
        "query": {"what": "status"},
        "result": {"job_id": job_id, "seq": 0, "of": 4, "record": record()},
    }


@SETTINGS
@given(st.data())
def test_daemon_handlers_refuse_hostile_bodies_cleanly(world, errors, data):
    d, job_id = world
    msg_type = data.draw(st.sampled_from(sorted(valid_bodies(job_id))))
    body = mutate(data, valid_bodies(job_id)[msg_type])
    if msg_type == "hello" and data.draw(st.booleans()):  # a hostile platform description
        body["platform"] = mutate(data, PLATFORM)
    stored = runs(d)
    seen = msg_type == "result" and isinstance(body, dict) and stored_seq(
        d, body.get("job_id"), body.get("seq"))
    code = feed(d, wire(msg_type, body))
    assert errors.lines == []
    if msg_type == "result" and code is None:
        # a job's sequence number is stored once: sent again under a new id it is acked only
        assert runs(d) == stored + (0 if seen else 1)
    else:
        assert runs(d) == stored
    # the agent is still known with a platform the status can show
    assert "a1" in d.registry and d.status()["daemon"]["instance"] == d.instance


@SETTINGS
@given(st.data())
def test_daemon_refuses_hostile_records_without_storing(world, errors, data):
    d, job_id = world
    rec = mutate(data, record())
    stored = runs(d)
    seq = data.draw(st.integers(0, 3))
    seen = stored_seq(d, job_id, seq)  # then accepted (acked) but not stored again
    code = feed(d, wire("result", {"job_id": job_id, "seq": seq, "of": 4, "record": rec}))
    assert errors.lines == []
    assert runs(d) == stored + (code is None and not seen)


@SETTINGS
@given(st.data())
def test_daemon_query_args_are_checked(world, errors, data):
    d, _ = world
    what = data.draw(st.sampled_from(["status", "sweep", "fit", "report", "recommend",
                                      "tune_status", "tune_stop", "keys", "characterize",
                                      "mpet_data"])
                     | st.text(max_size=20))
    args = data.draw(st.dictionaries(st.sampled_from(
        ["agent", "workloads", "workload", "reps", "warmup", "max_cores", "platform", "goal",
         "id", "action", "session", "frequencies", "frequency_grid", "size", "input",
         "tune_id"])
        | st.text(max_size=6), hostile, max_size=4))
    feed(d, wire("query", {"what": what, "args": args}))
    assert errors.lines == []


@SETTINGS
@given(envelope=st.dictionaries(st.sampled_from(["v", "type", "id", "ts", "agent", "body"])
                                | st.text(max_size=4), hostile, max_size=7))
def test_daemon_refuses_hostile_envelopes(world, errors, envelope):
    d, _ = world
    feed(d, msgpack.packb(envelope, use_bin_type=True))
    assert errors.lines == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256) | st.builds(lambda h, t: h + t, st.sampled_from(
    [wire("heartbeat", {}), wire("result", {"job_id": "j", "seq": 0, "of": 1, "record": {}})]),
    st.binary(max_size=16)) | st.builds(lambda b, i: b[:i], st.just(wire("hello", {
        "platform": PLATFORM, "workloads": ["wl"], "agent_version": "t"})), st.integers(0, 90)))
def test_decoder_raises_only_protocol_errors(data):
    try:
        P.decode(data)
    except P.ProtocolError as exc:
        assert exc.code in DECODER_CODES


# What the fuzzing found (benchmarks/fuzz.py and the tests above): each was an exception inside
# a handler ("internal") or a failed insert of a whole batch (every agent in it told
# "store_failed"); each is now refused where it is read, by name, and nothing is stored.
@pytest.mark.parametrize("msg_type, change, code", [
    ("result", {"record": record(rep=2**63)}, "bad_record"),  # past SQLite's INTEGER
    ("result", {"record": record(freq_mhz=2**64 - 1)}, "bad_record"),
    ("result", {"record": record(ok="yes")}, "bad_record"),  # int("yes") at insert
    ("result", {"record": record(virtual={})}, "bad_record"),
    ("result", {"seq": 2**63, "of": 2**64 - 1}, "bad_value"),
    ("heartbeat", {"outbox": 2**64 - 1}, "bad_value"),
    ("hello", {"platform": {"id": "p", b"k": 1}}, "bad_value"),  # json.dumps at save
    ("hello", {"platform": {"id": "p", "x": b"\x00"}}, "bad_value"),  # json.dumps at save
    ("hello", {"platform": {"id": "p", "x": _deep(999)}}, "bad_value"),  # RecursionError
    ("hello", {"workloads": [{"name": "wl", "sizes": [b"s"]}]}, "bad_value"),
])
def test_found_by_fuzzing_is_refused_by_name(world, errors, msg_type, change, code):
    d, job_id = world
    body = {**valid_bodies(job_id)[msg_type], **change}
    stored = runs(d)
    assert feed(d, wire(msg_type, body)) == code
    assert errors.lines == [] and runs(d) == stored


def test_a_huge_name_in_a_record_is_refused(world, errors):
    """A record's platform, workload, input and variant name its group, which every status
    lists: a 100 kB input name, stored, made the status reply too large to send."""
    d, job_id = world
    stored = runs(d)
    assert feed(d, wire("result", {**valid_bodies(job_id)["result"],
                                   "record": record(input="x" * 100_000)})) == "bad_record"
    assert runs(d) == stored and errors.lines == []


def test_a_reply_too_large_to_send_is_refused_by_name(world, errors, monkeypatch):
    """A reply beyond MAX_REPLY_BYTES is refused by name; one beyond what the daemon takes in
    (MAX_MESSAGE_BYTES) but within it is sent: a store of 837 jobs and 771 groups answered
    'report' in 1.08 MB, and 'opptune report' failed."""
    d, _ = world
    from opptune.daemon import queries
    monkeypatch.setattr(P, "MAX_REPLY_BYTES", 2 * P.MAX_MESSAGE_BYTES)  # a test-sized limit
    monkeypatch.setattr(queries, "status", lambda _d, _a=None: {"blob": "x" * (P.MAX_REPLY_BYTES + 1)})
    assert feed(d, wire("query", {"what": "status"})) == "too_large"
    sent = []
    monkeypatch.setattr(d.link, "send_encoded", lambda _i, data, _w: sent.append(data))
    monkeypatch.setattr(queries, "status", lambda _d, _a=None: {"blob": "x" * (P.MAX_MESSAGE_BYTES + 1)})
    assert feed(d, wire("query", {"what": "status"})) is None
    reply = P.decode(sent[-1], P.MAX_REPLY_BYTES)
    assert len(reply["body"]["data"]["blob"]) == P.MAX_MESSAGE_BYTES + 1
    with pytest.raises(P.ProtocolError, match="exceeds the limit"):
        P.decode(sent[-1])  # what anyone may send the daemon stays 1 MiB
    assert errors.lines == []


def test_refusals_to_a_vanished_peer_do_not_log_a_line_each(world, caplog):
    """A peer that floods and hangs up: its refusals are logged at the bounded rate only,
    not once more per frame for the answer that cannot be delivered."""
    d, _ = world
    caplog.set_level(logging.DEBUG, logger="opptune")
    for _ in range(50):
        feed(d, wire("query", {"what": "nothing-known"}))
        d.link._refuse(b"gone-peer", P.ProtocolError("malformed", "not msgpack"))
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 2


@SETTINGS
@given(st.data())
def test_daemon_refuses_hostile_applied_for_a_pushed_config(world, errors, data):
    """An ``applied`` for a configuration really pushed to the agent reaches the verdict and
    the store: its time, records and measured window must be refused by name when wrong."""
    d, _ = world
    if d.store.recommendation("cfg-fuzz") is None:
        d.store.save_recommendation({
            "config_id": "cfg-fuzz", "agent": "a1", "platform": "plat-fuzz", "workload": "wl",
            "input": "small", "variant": "", "cores": 1, "cpus": [0], "threads": 1,
            "predicted_time_s": 1.0, "predicted_lower_s": 0.9, "predicted_upper_s": 1.1},
            1.0)
    measured = {"target": {"kind": "pid", "pid": 1}, "cpus_busy": 1.0, "window_s": 2.0,
                "freq_mhz": {"policy0": 1800.0}, "energy_j": 3.0}
    body = {"config_id": "cfg-fuzz", "ok": True, "time_s": None, "records": [],
            "measured": mutate(data, measured) if data.draw(st.booleans()) else measured}
    body = {**mutate(data, body), "config_id": "cfg-fuzz"}
    if data.draw(st.booleans()) and isinstance(body.get("measured"), dict):
        t = body["measured"].get("target")
        body["measured"]["target"] = mutate(data, t) if isinstance(t, dict) else t
    feed(d, wire("applied", body))
    assert errors.lines == []


@pytest.mark.parametrize("change", [
    {"measured": {"target": "pid 1"}},  # .get on a str in measured_text: "internal"
    {"measured": {"cpus_busy": "all"}},  # format of a str with :.2f
    {"measured": {"freq_mhz": [1800]}},  # .items() of a list
    {"measured": {"energy_j": b"\x00"}},
    {"time_s": math.nan},  # judged "off by nan %"
    {"time_s": -1.0},
])
def test_found_by_fuzzing_applied_is_refused_by_name(world, errors, change):
    d, _ = world
    d.store.save_recommendation({
        "config_id": "cfg-found", "agent": "a1", "platform": "plat-fuzz", "workload": "wl",
        "input": "small", "variant": "", "cores": 1, "cpus": [0], "threads": 1,
        "predicted_time_s": 1.0, "predicted_lower_s": 0.9, "predicted_upper_s": 1.1}, 1.0)
    body = {"config_id": "cfg-found", "ok": True, "time_s": None, "records": [], **change}
    assert feed(d, wire("applied", body)) == "bad_value"
    assert errors.lines == [] and d.store.recommendation("cfg-found")["state"] == "pushed"


def _item(data: st.DataObject, job_id: str) -> Any:
    """One item of a hostile ``results`` list: an [id, body] pair of a result of job_id,
    valid or with its body or record made wrong, a pair with a wrong or repeated id or of
    another size, or any value at all."""
    body = {"job_id": job_id, "seq": data.draw(st.integers(0, 3)), "of": 4, "record": record()}
    how = data.draw(st.sampled_from(["valid", "body", "record", "id", "same_id", "pair",
                                     "hostile"]))
    if how == "same_id":  # one id for several items: stored once, acked each time
        return ["one-id-for-all", body]
    if how == "body":
        return [P.new_id(), mutate(data, body)]
    if how == "record":
        return [P.new_id(), {**body, "record": mutate(data, record())}]
    if how == "id":
        return [data.draw(hostile), body]
    if how == "pair":
        return data.draw(st.lists(hostile, max_size=3))
    if how == "hostile":
        return data.draw(hostile)
    return [P.new_id(), body]


@SETTINGS
@given(st.data())
def test_daemon_takes_hostile_item_lists_item_by_item(world, errors, data):
    """A ``results`` frame is refused whole (one named refusal, nothing stored) or each of its
    items is either taken or refused by name, alone: never an ``internal`` error, an error log
    line, or a row stored twice."""
    d, job_id = world
    if data.draw(st.booleans()):
        items = [_item(data, job_id) for _ in range(data.draw(st.integers(0, 70)))]
    else:
        items = data.draw(hostile)
    stored = runs(d)
    taken, before = d.stats["results"], dict(d.link.refusals.by_code)
    try:
        msg = P.decode(wire("results", {"items": items}))
    except P.ProtocolError as exc:  # refused whole, as the link refuses it
        assert exc.code in DECODER_CODES and str(exc)
        assert runs(d) == stored
        return
    d.handle_batch([(b"a1", msg)])
    refused = {c: n - before.get(c, 0) for c, n in d.link.refusals.by_code.items()
               if n > before.get(c, 0)}
    assert "internal" not in refused and errors.lines == []
    # every item answered once: taken (acked) or refused on its own
    assert d.stats["results"] - taken + sum(refused.values()) == len(msg["body"]["items"])
    con = sqlite3.connect(d.config.database)
    try:  # a job's sequence number stored once, whatever the frame held
        assert con.execute("SELECT COUNT(*) FROM runs WHERE job_id = ?", (job_id,)
                           ).fetchone()[0] <= 4
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()
