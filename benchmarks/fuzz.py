"""Hostile input at volume: generated frames against a real daemon process and the agent's
message handler, then a real agent served.

The daemon (a subprocess, as ``opptune-daemon`` runs) and a real agent (a subprocess on
bench_suite kernels) start first. Several DEALER sockets then send ``--inputs`` generated
frames between them: random bytes, valid messages truncated or with bytes flipped, envelopes
and bodies with fields of the wrong type, missing, added, out of range (integers past 64 bits,
NaN, infinities), records of issued jobs with a field made wrong, deep nesting, containers that
claim 4 G elements, several frames in one message, frames over the size limit, unknown types,
``results`` frames with hostile item lists (valid items beside wrong ones, items that are no
[id, body] pair, bad ids, more items than allowed, items that are no list).
Every 200 frames each socket sends a sync query and waits for its answer: the daemon processed
everything before it; no answer within 10 s counts as a hang. Then the same generator's frames
for an agent (jobs, configs, acks, errors...) go through the agent's link handler in this
process, and the real agent is given a sweep that must be stored and acknowledged.

Printed: inputs/s, crashes (daemon exit; a handler's unexpected exception, i.e. an
``internal`` refusal or a traceback in its log; an exception out of the agent's handler),
hangs, the daemon's RSS at start, after warm-up (10 % of the inputs) and at the end, refusals
by reason with how many log lines they took, and whether the agent was served. Exit status 1
when any check fails.

    python3 benchmarks/fuzz.py                     # 100,000 inputs (about a minute or two)
    python3 benchmarks/fuzz.py --inputs 3000 --json  # the short run CI makes
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from ingest import issue_jobs, proc_mem_kb  # noqa: E402
from procs import Cluster, all_jobs_complete  # noqa: E402

from opptune.daemon.client import query  # noqa: E402
from opptune.shared import protocol as P  # noqa: E402
from opptune.shared.records import RunRecord  # noqa: E402

FUZZ_AGENTS = 8  # fuzzing sockets, each an agent with an issued job ("bench-agent-N")
CHUNK = 200  # frames between two syncs of one socket
HANG_S = 10.0


class Fuzzer:
    """Seeded generator of hostile frames; each input is (kind, frames)."""

    DAEMON_KINDS = (("garbage", 8), ("truncated", 8), ("bitflip", 10), ("body", 30),
                    ("record", 20), ("envelope", 10), ("unknown_type", 3), ("deep", 3),
                    ("huge_count", 3), ("multi_frame", 3), ("items", 12), ("too_large", 0.05))

    def __init__(self, seed: int, agent: str, job_id: str, kinds: list[str] | None = None):
        self.r = random.Random(seed)
        self.agent, self.job_id = agent, job_id
        rec = RunRecord(platform="bench-plat", workload="bench", input="s", cores=1, cpus=[0],
                        threads=1, rep=0, time_s=0.5, virtual=True).to_dict()
        self.record = rec
        self.daemon_bodies = {
            "hello": {"platform": {"id": "fuzz-plat"}, "workloads": ["bench"],
                      "agent_version": "fuzz"},
            "heartbeat": {"outbox": 1, "instance": "i"},
            "result": {"job_id": job_id, "seq": 0, "of": 4, "record": rec},
            "applied": {"config_id": "c", "ok": True, "time_s": 1.0, "records": [rec]},
            "error": {"code": "bad_job", "message": "m", "ref": None},
            "query": {"what": "nothing", "args": {}},
            "ack": {"ids": ["x"]},
        }
        self.agent_bodies = {
            "job": {"job_id": "j", "workload": "w", "size": "default", "reps": 1, "warmup": 0,
                    "points": [{"cpus": [0], "threads": 1, "freq_khz": None}]},
            "config": {"config_id": "c", "workload": "w", "size": "default", "cpus": [0],
                       "threads": 1, "freq_khz": None, "reps": 1},
            "ack": {"ids": ["x"]}, "error": {"code": "bad_record", "message": "m", "ref": "x"},
            "heartbeat": {"instance": "d", "results_max": 64, "max_message_bytes": 1 << 20},
            "reply": {"ref": "r", "data": {}},
            "results": {"items": [[P.new_id(), self.daemon_bodies["result"]]]},
        }
        chosen = [(k, w) for k, w in self.DAEMON_KINDS if not kinds or k in kinds]
        self._weights = [w for _, w in chosen]
        self._kinds = [k for k, _ in chosen]

    # -- values -----------------------------------------------------------------------------
    def value(self, depth: int = 0) -> Any:
        r = self.r
        pick = r.randrange(14 if depth < 3 else 11)
        if pick == 0:
            return None
        if pick == 1:
            return r.random() < 0.5
        if pick == 2:
            return r.choice([0, -1, 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, -2**63])
        if pick == 3:
            return r.randint(-10**6, 10**6)
        if pick == 4:
            return r.choice([math.nan, math.inf, -math.inf, -0.0, 1e308, -1.5])
        if pick == 5:
            return r.random() * 10**r.randint(-5, 12)
        if pick == 6:
            return "".join(chr(r.randint(1, 0x2FFF)) for _ in range(r.randint(0, 12)))
        if pick == 7:
            return r.randbytes(r.randint(0, 16))
        if pick == 8:
            return "x" * r.choice([0, 65, 1000, 70_000])
        if pick == 9:
            return r.choice(["", "status", "../../etc/passwd", "0", "null", "\x00"])
        if pick == 10:
            return self._nested(r.randint(1, 600))
        if pick in (11, 12):
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        return {self._key(): self.value(depth + 1) for _ in range(r.randint(0, 4))}

    def _key(self) -> Any:
        r = self.r.random()
        if r < 0.8:
            return self.r.choice(["id", "cpus", "kind", "name", "x", "", "time_s", "job_id"])
        return self.r.choice([1, b"k", 2**64 - 1])

    @staticmethod
    def _nested(n: int) -> Any:
        v: Any = 0
        for i in range(n):
            v = [v] if i % 2 else {"k": v}
        return v

    def mutate(self, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body)
        for _ in range(self.r.randint(1, 3)):
            how = self.r.random()
            if how < 0.25 and body:
                body.pop(self.r.choice(list(body)))
            elif how < 0.45:
                body[self._key() if self.r.random() < 0.5 else "extra"] = self.value()
            elif body:
                body[self.r.choice(list(body))] = self.value()
        return body

    def _pack(self, msg: Any) -> bytes:
        try:
            return msgpack.packb(msg, use_bin_type=True)
        except (ValueError, OverflowError, TypeError):  # nested past the packer's limit
            return msgpack.packb(None)

    def envelope(self, msg_type: Any, body: Any, agent: Any = None) -> dict[str, Any]:
        return {"v": 1, "type": msg_type, "id": P.new_id(), "ts": time.time(),
                "agent": self.agent if agent is None else agent, "body": body}

    # -- inputs -----------------------------------------------------------------------------
    def daemon_input(self) -> tuple[str, list[bytes]]:
        kind = self.r.choices(self._kinds, self._weights)[0]
        r = self.r
        valid_type = r.choice(sorted(self.daemon_bodies))
        valid = self._pack(self.envelope(valid_type, self.daemon_bodies[valid_type]))
        if kind == "garbage":
            return kind, [r.randbytes(r.randint(0, 300))]
        if kind == "truncated":
            return kind, [valid[:r.randrange(len(valid))]]
        if kind == "bitflip":
            data = bytearray(valid)
            for _ in range(r.randint(1, 4)):
                data[r.randrange(len(data))] = r.randrange(256)
            return kind, [bytes(data)]
        if kind == "body":
            return kind, [self._pack(self.envelope(
                valid_type, self.mutate(self.daemon_bodies[valid_type])))]
        if kind == "record":
            body = dict(self.daemon_bodies["result"], seq=r.randrange(4),
                        record=self.mutate(self.record))
            return kind, [self._pack(self.envelope("result", body))]
        if kind == "envelope":
            msg = self.mutate(self.envelope(valid_type, self.daemon_bodies[valid_type]))
            return kind, [self._pack(msg)]
        if kind == "unknown_type":
            return kind, [self._pack(self.envelope(self.value(), {}))]
        if kind == "deep":
            return kind, [b"\x91" * r.randint(500, 5000) + b"\xc0"]
        if kind == "huge_count":
            return kind, [r.choice([b"\xdd", b"\xdf", b"\xc6", b"\xdb"]) + b"\xff\xff\xff\xff"]
        if kind == "items":
            return kind, [self._pack(self.envelope("results", {"items": self.items()}))]
        if kind == "multi_frame":
            return kind, [valid, valid] + [b""] * r.randint(0, 2)
        return kind, [b"\x00" * (P.MAX_MESSAGE_BYTES + r.randint(1, 100_000))]

    def items(self) -> Any:
        """A hostile ``results`` item list: mostly [id, body] pairs of results of this
        agent's job, valid or with their body or record made wrong, beside pairs with a wrong
        id, whole result messages and values of any kind; now and then more items than
        allowed, or no list at all."""
        r = self.r
        roll = r.random()
        if roll < 0.05:
            return self.value()
        n = P.MAX_RESULTS_ITEMS + 1 if roll < 0.1 else r.randint(0, 20)
        out = []
        for _ in range(n):
            body = dict(self.daemon_bodies["result"], seq=r.randrange(4))
            how = r.random()
            if how < 0.35:
                item: Any = [P.new_id(), body]
            elif how < 0.55:
                item = [P.new_id(), self.mutate(body)]
            elif how < 0.7:
                item = [P.new_id(), dict(body, record=self.mutate(self.record))]
            elif how < 0.8:
                item = [self.value(), body]
            elif how < 0.85:
                item = self.envelope("result", body)  # a whole message, not a pair
            elif how < 0.9:
                item = [P.new_id(), body, self.value()]
            else:
                item = self.value()
            out.append(item)
        return out

    def agent_input(self, cpu: int) -> bytes:
        r = self.r
        msg_type = r.choice(sorted(self.agent_bodies))
        body = dict(self.agent_bodies[msg_type])
        if msg_type == "job":
            body["points"] = [{"cpus": [cpu], "threads": 1, "freq_khz": None}]
            body["job_id"] = f"j{r.randrange(10**9)}"
        msg = self.envelope(msg_type, body, agent="daemon")
        roll = r.random()
        if roll < 0.5:
            msg["body"] = self.mutate(body)
        elif roll < 0.6:
            msg = self.mutate(msg)
        data = self._pack(msg)
        if roll >= 0.9:
            data = bytearray(data)
            data[r.randrange(len(data))] = r.randrange(256)
            data = bytes(data)
        elif roll >= 0.8:
            data = data[:r.randrange(len(data))]
        return data


# -- the daemon -------------------------------------------------------------------------------
class Socket:
    """One fuzzing peer: a DEALER with its agent id, counting replies."""

    def __init__(self, ctx: zmq.Context, endpoint: str, i: int):
        self.agent = f"bench-agent-{i}"
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, self.agent.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.connect(endpoint)
        self.sync_id: str | None = None
        self.replies: dict[str, int] = {}

    def send(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def sync(self) -> None:
        self.sync_id = P.new_id()
        self.sock.send(P.encode(P.make("query", self.agent, {"what": "fuzz-sync"},
                                       msg_id=self.sync_id)))

    def drain(self) -> bool:
        """Read every waiting reply; True once the sync query's answer came."""
        done = False
        while True:
            try:
                data = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return done
            msg = P.decode(data)
            key = msg["type"] if msg["type"] != "error" else "error:" + msg["body"]["code"]
            self.replies[key] = self.replies.get(key, 0) + 1
            if msg["type"] == "error" and msg["body"].get("ref") == self.sync_id:
                done = True
            elif msg["type"] == "error" and msg["body"]["code"] == "rate_limited":
                self.sync()  # the sync itself may have been refused unread: ask again


def fuzz_daemon(c: Cluster, endpoint: str, inputs: int, seed: int, pid: int,
                kinds: list[str] | None = None) -> dict[str, Any]:
    ctx = zmq.Context()
    socks = [Socket(ctx, endpoint, i) for i in range(FUZZ_AGENTS)]
    fuzzers = [Fuzzer(seed + i, s.agent, f"job-{s.agent}", kinds) for i, s in enumerate(socks)]
    for s, f in zip(socks, fuzzers):  # known agents: their results reach the record checks
        s.send([P.encode(P.make("hello", s.agent, f.daemon_bodies["hello"]))])
    kinds: dict[str, int] = {}
    rss: dict[str, Any] = {}
    hangs = sent = 0
    warm_at = max(inputs // 10, 1)
    trace: list[int] = []  # MiB after each tenth of the inputs
    next_sample = warm_at
    t0 = time.perf_counter()
    while sent < inputs:
        for s, f in zip(socks, fuzzers):
            for _ in range(min(CHUNK, inputs - sent)):
                kind, frames = f.daemon_input()
                kinds[kind] = kinds.get(kind, 0) + 1
                s.send(frames)
                sent += 1
            s.sync()
            if sent >= inputs:
                break
        poller = zmq.Poller()
        waiting = [s for s in socks if s.sync_id is not None]
        for s in waiting:
            poller.register(s.sock, zmq.POLLIN)
        deadline = time.monotonic() + HANG_S
        while waiting:
            if c.daemon.poll() is not None:
                raise SystemExit(f"the daemon exited ({c.daemon.returncode}):\n{c.logs()}")
            left = deadline - time.monotonic()
            if left <= 0:
                hangs += len(waiting)
                break
            for sock, _ in poller.poll(int(left * 1000) + 1):
                s = next(x for x in waiting if x.sock is sock)
                if s.drain():
                    s.sync_id = None
                    poller.unregister(sock)
                    waiting.remove(s)
        if "warm_kb" not in rss and sent >= warm_at:
            rss["warm_kb"] = proc_mem_kb(pid)["VmRSS"]
        if sent >= next_sample:
            trace.append(proc_mem_kb(pid)["VmRSS"] // 1024)
            next_sample += max(inputs // 10, 1)
    elapsed = time.perf_counter() - t0
    rss["end_kb"] = proc_mem_kb(pid)["VmRSS"]
    rss["trace_mib"] = trace
    replies: dict[str, int] = {}
    for s in socks:
        s.drain()
        for k, n in s.replies.items():
            replies[k] = replies.get(k, 0) + n
        s.sock.close(0)
    ctx.term()
    return {"inputs": sent, "seconds": round(elapsed, 2), "inputs_per_s": round(sent / elapsed),
            "hangs": hangs, "rss": rss, "kinds": kinds, "replies": replies}


# -- the agent's handler ----------------------------------------------------------------------
class _ErrorLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


def fuzz_agent(inputs: int, seed: int, tmp: Path) -> dict[str, Any]:
    """The agent's link handler as the agent wires it (a worker that does not run what it
    accepts) fed ``inputs`` generated frames."""
    from opptune.agent.apply import Executor, Worker
    from opptune.agent.link import Link
    from opptune.agent.outbox import Outbox
    from opptune.agent.platform import discover
    from opptune.agent.runner import Runner
    from opptune.agent.workloads import Workloads
    from opptune.shared.config import AgentConfig, CommandWorkload
    logging.getLogger("opptune").setLevel(logging.CRITICAL + 1)  # counted, not printed
    errors = _ErrorLines()
    errors.setLevel(logging.ERROR)
    logging.getLogger("opptune").addHandler(errors)
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp), workloads=[
        CommandWorkload("w", [sys.executable, "-c", "print('{\"time_s\": 0.1}')"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    outbox = Outbox(str(tmp / "agent-outbox"))
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"]), outbox,
                  send=lambda m: None, state_dir=str(tmp))
    link = Link("a1", "tcp://127.0.0.1:9", {"platform": platform, "workloads": wl.describe()},
                outbox, Worker(ex).submit, heartbeat_s=60)
    link.start()
    fz = Fuzzer(seed, "daemon", "j")
    cpu = platform["cpus_online"][0]
    # the handler's unexpected exceptions are logged at ERROR by the link: counted as crashes
    logging.getLogger("opptune").setLevel(logging.ERROR)
    logging.getLogger("opptune").handlers = [errors]
    escaped = 0
    t0 = time.perf_counter()
    for _ in range(inputs):
        try:
            link._on_frames([fz.agent_input(cpu)])
        except Exception:
            escaped += 1
    elapsed = time.perf_counter() - t0
    stats = dict(link.stats)
    link.close()
    outbox.close()
    return {"inputs": inputs, "inputs_per_s": round(inputs / elapsed), "crashes": escaped,
            "error_log_lines": errors.n, "refused": stats["refused"]}


# -- the whole run ----------------------------------------------------------------------------
def served(c: Cluster, n: int) -> dict[str, Any]:
    """Start a sweep of the real agent and wait until its ``n`` sweeps are stored and acked
    (its outbox empty); the status then."""
    query(c.endpoint, "sweep", {"agent": "test-agent"}, timeout_s=10)
    return c.wait_for(lambda s: all_jobs_complete(
        {**s, "jobs": [j for j in s["jobs"] if j["agent"] == "test-agent"]}, n)
        and any(a["id"] == "test-agent" and a["outbox"] == 0 for a in s["agents"]),
        timeout=120, what=f"the real agent's sweep {n} stored and acked")


def run(inputs: int, agent_inputs: int, seed: int, kinds: list[str] | None = None
        ) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="opptune-fuzz-"))
    # rate limits as deployed; jobs issued to the fuzzing agents so that their results reach
    # the record checks (not only "unknown_job")
    c = Cluster(tmp, kernels=("pi_integrate",), reps=2, max_cores=2, auto_sweep=False)
    issue_jobs(c.db, FUZZ_AGENTS)
    c.start_daemon()
    c.start_agent()
    out: dict[str, Any] = {}
    try:
        c.wait_for(lambda s: any(a["id"] == "test-agent" and a["alive"] for a in s["agents"]),
                   timeout=60, what="the real agent's hello")
        start_kb = proc_mem_kb(c.daemon.pid)["VmRSS"]
        # Warm-up: the real agent served once, its sweep fitted (the fit loads the model
        # code: about 60 MiB of the daemon's memory, once), before the first RSS reading.
        served(c, 1)
        c.wait_for(lambda s: s["fits"] or s["fit_errors"], timeout=120, what="a fit")
        out["daemon"] = fuzz_daemon(c, c.endpoint, inputs, seed, c.daemon.pid, kinds)
        out["daemon"]["rss"]["start_kb"] = start_kb
        st = served(c, 2)
        job = max((j for j in st["jobs"] if j["agent"] == "test-agent"),
                  key=lambda j: j["created"])
        stored = c.rows("SELECT COUNT(*) FROM runs WHERE job_id=?", job["job_id"])[0][0]
        out["agent_served"] = {"results_stored": stored, "expected": job["expected"]}
        ref = st["daemon"]["refusals"]
        out["refusals"] = ref
        out["daemon_alive"] = c.daemon.poll() is None
    finally:
        codes = c.stop()
    log = (tmp / "daemon.log").read_text(errors="replace")
    out["daemon_exit"] = codes.get("daemon")
    out["daemon"]["refusal_log_lines"] = log.count("refused a message from")
    out["daemon"]["tracebacks"] = log.count("Traceback")
    out["daemon"]["internal"] = out["refusals"]["by_code"].get("internal", 0)
    out["daemon"]["crashes"] = (int(not out["daemon_alive"]) + out["daemon"]["tracebacks"]
                                + out["daemon"]["internal"])
    out["agent_handler"] = fuzz_agent(agent_inputs, seed, tmp)
    d = out["daemon"]
    logged = out["refusals"]["total"] - out["refusals"]["unlogged"]
    out["checks"] = {
        "no_daemon_crash": d["crashes"] == 0 and out["daemon_exit"] == 0,
        "no_hang": d["hangs"] == 0,
        "memory_flat": d["rss"]["end_kb"] - d["rss"]["warm_kb"] <= max(
            8192, d["rss"]["warm_kb"] // 10),
        "every_refusal_counted_lines_bounded": d["refusal_log_lines"] == logged
        and logged <= out["refusals"]["total"],
        "no_agent_handler_crash": out["agent_handler"]["crashes"] == 0
        and out["agent_handler"]["error_log_lines"] == 0,
        "agent_served": out["agent_served"]["results_stored"] == out["agent_served"]["expected"]
        > 0,
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=100_000, help="frames sent to the daemon")
    ap.add_argument("--agent-inputs", type=int, default=None,
                    help="frames fed to the agent's handler (default: --inputs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", help="only these kinds of input, comma-separated (of: "
                    + ", ".join(k for k, _ in Fuzzer.DAEMON_KINDS) + ")")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    a = ap.parse_args()
    out = run(a.inputs, a.agent_inputs if a.agent_inputs is not None else a.inputs, a.seed,
              a.kinds.split(",") if a.kinds else None)
    ok = all(out["checks"].values())
    if a.json:
        print(json.dumps(out))
        return 0 if ok else 1
    d, ag = out["daemon"], out["agent_handler"]
    rss = d["rss"]
    print(f"daemon: {d['inputs']} inputs in {d['seconds']} s = {d['inputs_per_s']} inputs/s; "
          f"crashes {d['crashes']} (internal {d['internal']}, tracebacks {d['tracebacks']}, "
          f"exit {out['daemon_exit']}); hangs {d['hangs']}")
    print(f"daemon RSS: start {rss['start_kb'] / 1024:.1f} MiB, after warm-up (a sweep fitted, "
          f"10 % of the inputs) "
          f"{rss['warm_kb'] / 1024:.1f} MiB, end {rss['end_kb'] / 1024:.1f} MiB (each tenth: "
          f"{', '.join(map(str, rss['trace_mib']))} MiB)")
    ref = out["refusals"]
    print(f"refusals: {ref['total']} in {d['refusal_log_lines']} log lines "
          f"({ref['unlogged']} counted without a line of their own); by reason:")
    for code, n in sorted(ref["by_code"].items(), key=lambda kv: -kv[1]):
        print(f"  {code:16s} {n}")
    print("inputs by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(d["kinds"].items())))
    print(f"agent handler: {ag['inputs']} inputs, {ag['inputs_per_s']} inputs/s; crashes "
          f"{ag['crashes']}, error lines {ag['error_log_lines']}, refused {ag['refused']}")
    s = out["agent_served"]
    print(f"real agent afterwards: {s['results_stored']} of {s['expected']} results stored "
          f"and acked")
    for name, passed in out["checks"].items():
        print(f"{'ok  ' if passed else 'FAIL'} {name}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
