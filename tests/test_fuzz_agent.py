"""Hostile input to the agent, in process: every frame a daemon (or anything that reaches the
agent's socket) can send, fed to the link's handler. The agent must refuse what it cannot use
with a named reason (an ``error`` or an ``applied`` with ok false), never fail inside a handler
(``internal``, an ERROR log line), and keep its outbox intact."""

from __future__ import annotations

import sys
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opptune.agent.apply import Executor, Worker
from opptune.agent.link import Link
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner
from opptune.agent.workloads import Workloads
from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, CommandWorkload
from opptune.shared.records import RunRecord
from test_fuzz_handlers import errors, hostile, mutate  # noqa: F401 (errors: a fixture)

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """The agent's link and worker as the agent wires them, with a worker that never runs what
    it accepts (the handlers are under test, not the runs) and a daemon endpoint nobody
    listens on (what the link sends is queued by ZeroMQ and counted)."""
    tmp = tmp_path_factory.mktemp("agent")
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp), workloads=[
        CommandWorkload("w", [sys.executable, "-c", "print('{\"time_s\": 0.1}')"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    outbox = Outbox(str(tmp / "ob"))
    sent: list[dict[str, Any]] = []
    from opptune.agent.sysfs import SysFS
    from opptune.agent.targets import Targets
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"]), outbox, send=sent.append,
                  state_dir=str(tmp), targets=Targets(SysFS(str(tmp)), virtual=False))
    worker = Worker(ex)
    link = Link("a1", "tcp://127.0.0.1:9", {"platform": platform, "workloads": wl.describe()},
                outbox, worker.submit, heartbeat_s=60)
    link.start()
    # one result waiting for an ack: hostile acks and errors must not lose it
    rec = RunRecord(platform=platform["id"], workload="w", input="default", cores=1, cpus=[0],
                    threads=1, rep=0, time_s=0.1)
    outbox.add_result("j0", 0, P.make("result", "a1", {"job_id": "j0", "seq": 0, "of": 1,
                                                       "record": rec.to_dict()}))
    yield link, outbox, platform, sent
    link.close()
    outbox.close()


def waiting_result(outbox: Outbox) -> bool:
    """Whether the fixture's result (job j0, seq 0) still waits in the outbox."""
    return any(m["type"] == "result" and m["body"]["job_id"] == "j0"
               for m in (P.decode(data) for _, data in outbox.pending()))


def wire(msg_type: str, body: Any) -> bytes:
    return msgpack.packb({"v": 1, "type": msg_type, "id": P.new_id(), "ts": 1.0,
                          "agent": "daemon", "body": body}, use_bin_type=True)


def daemon_bodies(platform: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cpu = platform["cpus_online"][0]
    return {
        "job": {"job_id": "j1", "workload": "w", "size": "default", "reps": 1, "warmup": 0,
                "points": [{"cpus": [cpu], "threads": 1, "freq_khz": None}]},
        "config": {"config_id": "c1", "workload": "w", "size": "default", "cpus": [cpu],
                   "threads": 1, "freq_khz": None, "reps": 1,
                   "target": {"kind": "command"}},
        "ack": {"ids": ["x"]},
        "error": {"code": "bad_record", "message": "m", "ref": "x"},
        # what the daemon takes: results frames of up to results_max within its message size
        "heartbeat": {"instance": "d1", "results_max": 64, "max_message_bytes": 1 << 20},
        "results": {"items": [["x", {"job_id": "j", "seq": 0, "of": 1, "record": {}}]]},
        "reply": {"ref": "r", "data": {}},
        "hello": {"platform": {}, "workloads": [], "agent_version": "x"},
    }


@SETTINGS
@given(st.data())
def test_agent_handlers_refuse_hostile_bodies_cleanly(agent, errors, data):
    link, outbox, platform, _ = agent
    bodies = daemon_bodies(platform)
    msg_type = data.draw(st.sampled_from(sorted(bodies)))
    body = mutate(data, bodies[msg_type])
    if msg_type == "job" and data.draw(st.booleans()):  # hostile points too
        body["points"] = data.draw(st.lists(st.fixed_dictionaries(
            {"cpus": st.lists(st.integers(-1, 70000), max_size=3) | hostile,
             "threads": st.integers(-2, 2**63) | hostile,
             "freq_khz": st.none() | st.integers(0, 2**64 - 1) | hostile}), max_size=3)
            | hostile)
    if msg_type == "config" and data.draw(st.booleans()):  # a hostile pid or unit target
        body["target"] = mutate(data, data.draw(st.sampled_from([
            {"kind": "pid", "pid": 1, "window_s": 1.0}, {"kind": "unit", "unit": "web"}])))
    link._on_frames([wire(msg_type, body)])
    assert errors.lines == []
    # whatever a heartbeat claimed, frames stay within what the protocol allows
    assert 0 <= link._frames_max <= P.MAX_RESULTS_ITEMS
    assert 1024 <= link._frame_bytes <= P.MAX_MESSAGE_BYTES
    # the result waiting for its ack is still there (no ack named it); a refused config's
    # ``applied`` reply may join it, durably, as the agent keeps every reply
    assert waiting_result(outbox)


@SETTINGS
@given(st.binary(max_size=200) | st.dictionaries(
    st.sampled_from(["v", "type", "id", "ts", "agent", "body"]), hostile, max_size=6).map(
        lambda m: msgpack.packb(m, use_bin_type=True)))
def test_agent_refuses_garbage_frames(agent, errors, data):
    link, outbox, _, _ = agent
    refused = link.stats["refused"]
    link._on_frames([data])
    assert errors.lines == []
    try:
        P.decode(data)
    except P.ProtocolError:
        assert link.stats["refused"] == refused + 1  # counted, and answered with an error
    assert waiting_result(outbox)


def test_the_harness_reaches_the_handlers(agent, errors):
    """The fuzzed path is the real one: a valid job is saved, a wrong one refused by name."""
    link, outbox, platform, sent = agent
    body = daemon_bodies(platform)["job"]
    link._on_frames([wire("job", {**body, "job_id": "ok-1"})])
    assert outbox.job("ok-1") is not None
    link._on_frames([wire("job", {**body, "job_id": "bad-1", "workload": "rm -rf"})])
    assert outbox.job("bad-1") is None
    assert sent[-1]["type"] == "error" and sent[-1]["body"]["code"] == "bad_job"
    assert errors.lines == []


@pytest.mark.parametrize("change", [
    {"extra": b"\x00"},  # json.dumps of the body into the outbox failed: "internal"
    {"points": None},
    {"note": {b"k": 1}},
])
def test_found_by_fuzzing_jobs_are_refused_by_name(agent, errors, change):
    link, outbox, platform, _ = agent
    body = {**daemon_bodies(platform)["job"], "job_id": "found-1", **change}
    refused = link.stats["refused"]
    link._on_frames([wire("job", body)])
    assert errors.lines == [] and outbox.job("found-1") is None
    assert link.stats["refused"] == refused + 1


@pytest.mark.parametrize("unit", ["web\x00.service", "x" * 300, "tab\there"])
def test_unit_target_names_are_checked_before_systemctl_sees_them(tmp_path, unit):
    """A NUL in a unit name raised ValueError in subprocess (not TargetError): the agent's
    handler failed with "internal" where systemd runs."""
    from opptune.agent.sysfs import SysFS
    from opptune.agent.targets import TargetError, Targets
    with pytest.raises(TargetError, match="must be a systemd unit name"):
        Targets(SysFS(str(tmp_path)), virtual=False).check({"kind": "unit", "unit": unit})
