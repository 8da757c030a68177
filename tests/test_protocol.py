"""Wire protocol: round trips, and refusal of everything malformed with a named reason."""

import uuid

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opptune.shared import protocol as P


def _job_body(**kw):
    body = {"job_id": "j1", "workload": "compute", "size": "small",
            "points": [{"cpus": [0], "threads": 1, "freq_khz": None}], "reps": 3, "warmup": 1}
    body.update(kw)
    return body


BODIES = {
    "hello": {"platform": {"id": "p"}, "workloads": ["compute"], "agent_version": "0.1"},
    "heartbeat": {},
    "job": _job_body(),
    "result": {"job_id": "j1", "seq": 0, "of": 2, "record": {"time_s": 1.0}},
    "ack": {"ids": ["a", "b"]},
    "config": {"config_id": "c", "workload": "compute", "size": "small", "cpus": [0, 1],
               "threads": 2, "freq_khz": None, "reps": 3},
    "cancel": {"job_id": "job-1"},
    "resend": {"codes": ["unknown_job"]},
    "applied": {"config_id": "c", "ok": False, "error": "too many cores"},
    "error": {"code": "bad", "message": "x", "ref": None},
    "query": {"what": "status"},
    "reply": {"ref": "abc", "data": {}},
    "results": {"items": [[f"id-{i}", {"job_id": "j1", "seq": i, "of": 2,
                                       "record": {"time_s": 1.0}}] for i in range(2)]},
}


def test_every_type_has_a_round_trip_case():
    assert set(BODIES) == P.MESSAGE_TYPES


@pytest.mark.parametrize("msg_type", sorted(BODIES))
def test_round_trip(msg_type):
    msg = P.make(msg_type, "agent-1", BODIES[msg_type])
    out = P.decode(P.encode(msg))
    assert out == msg
    assert out["v"] == P.PROTOCOL_VERSION and len(out["id"]) == 32


def test_ids_are_unique():
    assert len({P.make("heartbeat", "a")["id"] for _ in range(1000)}) == 1000


def test_ids_are_uuid7_and_sort_by_creation_time(monkeypatch):
    clock = iter(range(1_700_000_000_000, 1_700_000_000_000 + 50))
    monkeypatch.setattr(P.time, "time_ns", lambda: next(clock) * 1_000_000)
    ids = [P.new_id() for _ in range(50)]
    assert ids == sorted(ids) and len(set(ids)) == 50
    for i, ms in zip(ids, range(1_700_000_000_000, 1_700_000_000_050)):
        u = uuid.UUID(i)
        assert u.version == 7 and u.variant == uuid.RFC_4122
        assert int(i[:12], 16) == ms  # the first 48 bits are the creation time in ms


def _raw(**overrides):
    msg = {"v": P.PROTOCOL_VERSION, "type": "heartbeat", "id": "x1", "ts": 1.0, "agent": "a",
           "body": {}}
    msg.update(overrides)
    return msgpack.packb(msg, use_bin_type=True)


@pytest.mark.parametrize("data, code", [
    (b"\xc1\xc1\xc1", "malformed"),
    (msgpack.packb([1, 2, 3]), "malformed"),
    (_raw(v=99), "bad_version"),
    (_raw(type="launch_missiles"), "unknown_type"),
    (_raw(body="nope"), "bad_type"),
    (_raw(ts="yesterday"), "bad_type"),
    (_raw(id=""), "bad_id"),
    (_raw(id="x" * 200), "bad_id"),
    (_raw(type="ack", body={}), "missing_field"),
    (_raw(type="ack", body={"ids": [1, 2]}), "bad_type"),
    (_raw(type="job", body=_job_body(reps=0)), "bad_value"),
    (_raw(type="job", body=_job_body(points=[{"cpus": [], "threads": 1}])), "bad_value"),
    (_raw(type="job", body=_job_body(points=[{"cpus": [0, 0], "threads": 1}])), "bad_value"),
    (_raw(type="config", body={**BODIES["config"], "cpus": [-1]}), "bad_value"),
    (_raw(type="result", body={**BODIES["result"], "seq": 5}), "bad_value"),
    (_raw(type="applied", body={"config_id": "c", "ok": "yes"}), "bad_type"),
])
def test_refusals_name_the_problem(data, code):
    with pytest.raises(P.ProtocolError) as exc:
        P.decode(data)
    assert exc.value.code == code
    assert str(exc.value)


def test_missing_envelope_field_is_named():
    msg = {"v": 1, "type": "heartbeat", "ts": 1.0, "agent": "a", "body": {}}
    with pytest.raises(P.ProtocolError, match="'id'"):
        P.decode(msgpack.packb(msg))


def test_error_refers_to_refused_message_id():
    with pytest.raises(P.ProtocolError) as exc:
        P.decode(_raw(v=2, id="abc"))
    assert exc.value.ref == "abc"


def test_oversized_message_is_refused_before_unpacking():
    with pytest.raises(P.ProtocolError) as exc:
        P.decode(b"\x00" * (P.MAX_MESSAGE_BYTES + 1))
    assert exc.value.code == "too_large"


def test_encode_refuses_oversized_body():
    msg = P.make("reply", "d", {"ref": "r", "data": {"blob": "x" * P.MAX_MESSAGE_BYTES}})
    with pytest.raises(P.ProtocolError) as exc:
        P.encode(msg)
    assert exc.value.code == "too_large"


def test_truncated_messages_are_refused():
    data = P.encode(P.make("job", "a", _job_body()))
    for cut in range(1, len(data)):
        with pytest.raises(P.ProtocolError):
            P.decode(data[:cut])


def test_non_bytes_frame_is_refused():
    with pytest.raises(P.ProtocolError) as exc:
        P.decode("text")  # type: ignore[arg-type]
    assert exc.value.code == "bad_frame"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_never_raise_anything_but_protocol_error(data):
    try:
        P.decode(data)
    except P.ProtocolError:
        pass


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                      children, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(P.MESSAGE_TYPES)), st.dictionaries(st.text(max_size=10), json_like,
                                                                  max_size=6))
def test_random_bodies_are_validated_not_crashed(msg_type, body):
    data = msgpack.packb({"v": 1, "type": msg_type, "id": "i", "ts": 0.0, "agent": "a",
                          "body": body}, use_bin_type=True)
    try:
        out = P.decode(data)
    except P.ProtocolError:
        return
    # Whatever passes must satisfy its schema's required fields.
    for field, (_types, required) in P.BODY_SCHEMAS[msg_type].items():
        if required:
            assert field in out["body"]


def test_counts_past_a_32_bit_column_are_refused_not_a_failed_batch():
    """PostgreSQL's INTEGER holds 2**31-1: a seq, cores, threads or rep past it would fail the
    whole batch it came in (every agent's results refused as store_failed, at each resend)."""
    from opptune.shared.records import RecordError, RunRecord
    body = {"job_id": "j", "seq": 2**31, "of": 2**40, "record": {}}
    with pytest.raises(P.ProtocolError, match="seq < 2"):
        P.decode(P.encode(P.make("result", "a", body)))
    base = {"platform": "p", "workload": "w", "input": "s", "cores": 1, "cpus": [0],
            "threads": 1, "rep": 0, "time_s": 1.0}
    RunRecord.from_dict(base)
    for field in ("threads", "rep"):
        with pytest.raises(RecordError, match=f"'{field}' must be an integer from 0 to 2"):
            RunRecord.from_dict({**base, field: 2**31})


_ODD = [None, True, False, 0, 1, -1, 2, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, 0.5,
        float("nan"), "", "x", "x" * 65, b"x", [], {}, {"time_s": 1.0}]


@given(st.dictionaries(st.sampled_from(["v", "id", "ts", "agent", "body"]),
                       st.sampled_from(_ODD), max_size=2),
       st.dictionaries(st.sampled_from(["job_id", "seq", "of", "record", "other"]),
                       st.sampled_from(_ODD), max_size=3),
       st.lists(st.sampled_from(["v", "id", "ts", "agent", "body"]), max_size=1),
       st.lists(st.sampled_from(["job_id", "seq", "of", "record"]), max_size=1))
@settings(max_examples=3000, deadline=None)
def test_the_fast_result_check_accepts_only_what_every_check_accepts(env, body, env_drop,
                                                                     body_drop):
    """validate's quick path for results (the daemon's ingest) never accepts a message that
    the full checks refuse."""
    msg = P.make("result", "a", dict(BODIES["result"]))
    msg["body"] = {**msg["body"], **body}
    msg.update(env)
    for k in env_drop:
        msg.pop(k)
    if isinstance(msg.get("body"), dict):
        for k in body_drop:
            msg["body"].pop(k, None)
    try:
        P._check_all(msg)
    except P.ProtocolError:
        assert not P._plain_result(msg)


def test_a_plain_result_takes_the_fast_check():
    assert P._plain_result(P.make("result", "a", dict(BODIES["result"])))


# -- "results" frames -------------------------------------------------------------------------
def _items(n, **body):
    return [P.pack_item(f"id-{i}", {"job_id": "j", "seq": i, "of": n + 1,
                                    "record": {"time_s": 1.0}, **body}) for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 15, 16, P.MAX_RESULTS_ITEMS])
def test_pack_results_splices_the_items_bytes_into_a_valid_frame(n):
    items = _items(n)
    frame = P.pack_results("a1", items, msg_id="f" * 32, ts=5.0)
    msg = P.decode(frame)
    assert (msg["type"], msg["id"], msg["ts"], msg["agent"]) == ("results", "f" * 32, 5.0, "a1")
    assert msg["body"]["items"] == [msgpack.unpackb(i) for i in items]
    # the same bytes as packing the decoded frame again: nothing was encoded twice
    assert msgpack.packb(msg, use_bin_type=True) == frame


@pytest.mark.parametrize("items, code", [
    ([], "bad_value"),  # empty
    (_items(P.MAX_RESULTS_ITEMS + 1), "bad_value"),  # too many
    ([msgpack.packb({"id": "x", "body": {}})], "malformed"),  # not an [id, body] pair
    ([msgpack.packb(["x", {}, 1])], "malformed"),
    ([msgpack.packb([7, {}])], "bad_id"),
    ([msgpack.packb(["x" * 65, {}])], "bad_id"),
])
def test_a_malformed_frame_is_refused_whole_naming_the_frame(items, code):
    frame = P.pack_results("a1", items, msg_id="frame-1")
    with pytest.raises(P.ProtocolError) as exc:
        P.decode(frame)
    assert exc.value.code == code and exc.value.ref == "frame-1"


def test_items_are_not_a_list_is_refused():
    msg = {"v": 1, "type": "results", "id": "f", "ts": 1.0, "agent": "a1",
           "body": {"items": {"0": 1}}}
    with pytest.raises(P.ProtocolError) as exc:
        P.decode(msgpack.packb(msg))
    assert exc.value.code == "bad_type"


@pytest.mark.parametrize("body, code", [
    ({"job_id": "j", "seq": 3, "of": 2, "record": {}}, "bad_value"),
    ({"job_id": "j", "seq": 0, "of": 2}, "missing_field"),
    ({"job_id": 5, "seq": 0, "of": 2, "record": {}}, "bad_type"),
    ({"job_id": "j", "seq": 0, "of": 2**64 - 1, "record": {}}, "bad_value"),
    ("not a map", "bad_type"),
])
def test_check_item_refuses_one_item_naming_it(body, code):
    frame = P.decode(P.pack_results("a1", _items(1)))
    with pytest.raises(P.ProtocolError) as exc:
        P.check_item(frame, "item-1", body)
    assert exc.value.code == code and exc.value.ref == "item-1"


def test_check_item_accepts_what_a_single_result_passes():
    frame = P.decode(P.pack_results("a1", _items(3)))
    for mid, body in frame["body"]["items"]:
        P.check_item(frame, mid, body)
        P.validate(P.make("result", "a1", body, msg_id=mid))


def test_a_hello_may_say_what_stands_and_an_older_one_need_not():
    base = {"platform": {}, "workloads": [], "agent_version": "t"}
    P.make("hello", "a1", base)
    P.make("hello", "a1", {**base, "standing": None, "standing_dropped": "c1: gone"})
    P.make("hello", "a1", {**base, "standing": {"config_id": "c1", "cpus": [0]}})
    with pytest.raises(P.ProtocolError, match="hello field 'standing' must be"):
        P.make("hello", "a1", {**base, "standing": "c1"})
