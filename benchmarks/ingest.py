"""Ingest throughput of opptune-daemon: results/s stored and acknowledged.

Starts the daemon as a real subprocess on a fresh SQLite file and several simulated agent
processes. Each agent says hello, then streams pre-encoded results (in ``results`` frames,
``--per-frame``) through a DEALER
socket keeping at most ``--window`` unacknowledged (as an agent's outbox would), and counts the
acks. Throughput is the total acked over the span from the first send to the last ack. At the end
the stored row count is checked and the daemon's resident memory (current and peak) is read
from /proc. ``--full-records`` sends records as a board with every meter fills them (perf
counters, energy, frequencies, per-thread times): 1.1 kB per message against 0.28 kB.

``--curve`` runs the link encrypted and authenticated (the agents' keys accepted beforehand).

    python3 benchmarks/ingest.py --agents 4 --results 50000 [--full-records] [--curve]

``--duration S`` streams for S seconds instead (a fleet: ``--agents 500 --duration 600``);
several simulated agents share a client process, each on its own DEALER socket with its own
identity and hello. Printed beside the rate: the send-to-ack latency of every result (p50,
p99), the daemon's resident memory after warm-up and at the end, and sent/acked/stored counts
(zero loss: all three equal).

    python3 benchmarks/ingest.py --agents 500 --duration 600

``--postgres`` runs the daemon on a throwaway PostgreSQL server (tests/pgserver.py's: started
with fsync off, as for the tests), ``--database URL`` on an empty database of a running one;
``--daemons 2`` starts two daemons sharing it, the agents split between them; the server's CPU
time is printed beside the daemons'. ``--compare`` makes three runs, SQLite, PostgreSQL and
PostgreSQL with two daemons, and prints them side by side:

    python3 benchmarks/ingest.py --agents 500 --duration 600 --compare

Measured 2026-11-26 05:00-05:11, 500 agents, 600 s, frames of 16 (the default), batches of
at most 4,096, nothing else running: 60,672 results/s, p50 / p99 / max 125 / 228 / 330 ms,
36,409,920 sent = acked = stored, daemon RSS 120 MiB after warm-up, 133.4 sampled each minute
to the end, 15.1 us per result on the daemon's main thread, 17.3 for the whole daemon, 4.5 in
the client processes; again 05:23-05:33: 61,922 results/s, p99 225 ms, 37,158,016 stored, RSS
133.2-133.3 MiB each minute, 14.8 us. `--compare` (05:35-05:40, 60 s): SQLite 64,374,
PostgreSQL 43,767, two daemons on it 50,946 results/s, p99 199 / 227 / 252 ms, nothing lost.
With batches of 8,192 (04:23-04:34, same command): 54,658 results/s,
p99 217 ms, 15.9 us: each batch took every result in flight (500 x 16), so the loop idled
while the agents, all waiting for acks, sent the next ones (45 s alternating, 04:53-05:00,
8,192: 60,600-61,000, 4,096 64,300-69,200, 2,048 68,400-69,600
results/s, 13.3-14.6 us per result on the main thread for all three). `--compare` at 8,192
(04:36-04:40, 60 s): SQLite 57,726, PostgreSQL 40,915, two daemons on it 49,660 results/s. Before frames (one result per message, 01:42-01:53): 46,885
results/s, p99 231 ms, 19.1 us on the main thread.

Measured 2026-11-25 23:04 (2 cores shared with other jobs, load average 1.6), 500 agents, 30 s:
SQLite 39,124 results/s, p50 / p99 204 / 256 ms, 26.0 us of daemon CPU per result, nothing lost
(the code before that day's per-result cuts, at load 1.1-1.5: 36,600-39,900 at 25.4-27.7 us).
Earlier, 22:11-22:20 at load 4.5-5.9: SQLite 21,700-28,000 results/s, p99 556-591 ms, 27.4-28.4
us per result; PostgreSQL 14,800 (521 / 868 ms), two daemons on it 24,700 (310 / 642 ms). The
60,000 results/s and 250 ms p99 of issue 20 are not met here: one core acks about 1 / 26 us.
A writer thread committing beside the loop was slower in every alternating pair (32-41 us per
result; README, "Measured figures") and was not kept; so were 16 KiB pages (each batch writes
about a thousand index leaves whole to the WAL). Dropping the index ``runs_job``, which the
unique ``runs_job_seq`` duplicates, measured 24.2-24.3 us against 26.5-28.3: schema 10.

``daemon_main_thread_cpu_us_per_result`` is the loop's thread alone (it does all of ingest; the
store's checkpoint thread and ZeroMQ's I/O thread can use the other core): the figure that
bounds results/s, less noisy than results/s on a shared machine. 2026-11-26 00:56-00:58, 30 s
each, alternating the daemon of ff135e6 with this one (load 3.1-5.6, other work running):
main thread 22.5 / 23.0 -> 19.2 / 19.6 us per result, whole daemon 24.5 / 24.9 -> 21.1 / 21.5,
32,900-33,600 -> 37,800-38,300 results/s, p99 325-334 -> 298-312 ms, nothing lost (47,197/s,
p99 228 ms, 18.5 us in one run at load 2.8). From: a result's columns read straight from the
record map (shared/records.py, record_columns: 1.6 against 3.0 us per record), a quick exact
check of result messages before the generic one (0.4 against 0.9 us), frames received as bytes
on loopback. Measured and left: the cyclic GC, paused for each batch since 2026-11-25, ran 77
collections taking 0.009 s in a 20 s run (gc.freeze has nothing to cut); msgspec would decode a
result in 1.4 against 2.6 us, but its untyped maps take any key type where the daemon refuses
non-text keys as malformed (a new dependency, and a check of its own per message); storing
the record's bytes as sent would save only its re-encoding, 0.5 us; checkpoints every 2 s
instead of 0.5 (alternating, load 2.2-3.5) left the main thread as it was (18.6 / 19.2 against
19.0 / 19.4 us) and took 0.3 us per result off the other threads, for four times the window of
acked results an OS crash can lose.

Where the main thread's 15 us go now (py-spy, 200 Hz, 500 agents, 2026-11-26 04:00): SQLite
executemany 33 %, COMMIT 6 %, msgpack decode 16 %, reading records (record_columns) 10 %,
building rows 5 % (packing the record 0.5 us), freeing the batch's rows 7 %, acks 4.5 %, the
frames' item checks 2.5 %. Each result's row is built once as it is taken (the store's
``result_row``) and its decoded message freed once handled: 14 ABBA pairs against 55d10af's
daemon (03:49-04:13, 30 s, load 0.9-3.5, other work running) put it ahead in 12 (one tie),
by 0.75 us on the main thread at the median (last 6 rounds: 15.05 against 15.35 us, 57,907
against 58,102 results/s, p99 189 against 196 ms). Batches of up to 8,192 held every result in flight
(median 8,000 = 500 agents x 16): larger commits were not to be had, and smaller ones turned
out faster (batch_max 4,096, above).
Freeing the rows one by one as SQLite takes them measured nothing (14.95 against 14.85 us, 4
rounds). Without the unique index ``runs_job_seq`` (dropped for the experiment, 3 ABBA
rounds, load 1.2-2.2): 12.9 against 15.0 us on the main thread, 67,060 against 57,912
results/s, p99 150 against 177 ms: the index is the lever left for 60,000/s. Its cost is the
500 places each batch inserts at, not its key: in SQLite alone (500 jobs, 8,000-row commits)
a unique index on one integer (job number << 32 | seq) costs 6.1-6.2 us per row against
6.3-6.4 for (job_id, seq) and 4.6 without either; a batch's rows sorted by (job_id, seq)
first, 6.6-6.9 against 6.7-6.8. 60,000/s needs about 14.5 us on the main
thread: not met with the index.

Measured and left, 2026-11-26 01:13-01:36 (alternating with 008c024's daemon, 30 s each, load
1.5-4.7, other work running): the ingest committing each batch into an index-free staging
table and a thread of the store moving the rows into ``runs`` (INSERT ... SELECT ... ON
CONFLICT DO NOTHING, DELETE), reads waiting for the move. Moving after each commit: main thread
18.3-18.8 -> 15.0-15.4 us per result, whole daemon 20.2-20.7 -> 22.8-23.2 (each row written
twice; a move costs 6 us a row, more than the direct insert's index upkeep saved), results/s
32,600-47,100 -> 35,100-50,200 with no pair clearly ahead (+14, -3, +7, -24 %), p99 224-617 ->
233-642 ms. Moves gathered to 16,384 rows or 0.1 s: main thread 17.5-18.7 -> 14.1-14.6, whole
daemon 19.4-20.6 -> 21.0-21.8, results/s 39,700-50,800 -> 34,900-45,400 (+14, -14, -14, -14 %),
p99 212-369 -> 256-396 ms (a long move holds the write lock the next batch's commit waits
for). On two cores shared with the agents, main-thread time moved to the other core does not
turn into results/s while the whole daemon's grows; and an acked result would be readable in
``runs`` by other processes only once moved (tests that read the file right after an ack
failed).

``--per-frame N`` (default 16, the agent's ``results_per_frame``): the results an agent has
room for go out in ``results`` frames of up to N, as a real agent sends a backlog (one
envelope, an [id, body] pair per result: acks, idempotency and refusals stay per result);
``--per-frame 1`` sends one result per message, as before frames. With the default window of
16 every frame holds 16. Measured 2026-11-26 03:25-03:36, 500 agents, 30 s, 6 alternating
rounds on the same code (3 starting with each; load average 1.4-4.7, CPU pressure 17-36 %,
other work running), per-frame 1 against 16, medians: main thread 18.6 against 15.35 us per
result (18.2-19.2 against 14.9-16.5), whole daemon 20.5 against 17.15, results/s 43,329 against
53,116 (35,314-47,406 against 47,737-58,107; 16 ahead in every round, +8 to +65 %), p99 286
against 235 ms (228-494 against 207-352), sent = acked = stored in all twelve, daemon RSS
122-125 MiB after warm-up with frames against 137-141. Receiving, the envelope's checks and
the per-message loop are paid once per frame; unpacking, the body's checks, the record's
columns, the INSERT and freeing stay per result. Items as whole result messages (the outbox's bytes spliced in unchanged) were the first
version: 1.45 us per item to unpack against 1.13 for [id, body] pairs (best of 5, 16 items of
0.28 kB), plus an envelope per item to check and free: 17.3-17.4 us on the main thread in two
rounds at load 3.7-5.1 (singles 18.2-18.9). A real agent groups only when more than one result
is due (catch-up after an outage, a restart, very short runs), so the steady-state gain of a
board that sends one result per run is smaller than this benchmark's.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq

from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, is_database_url
from opptune.shared.records import RunRecord


def make_records(n: int, full: bool = False) -> list[dict]:
    """``n`` run records as dicts. ``full``: records as a board with every meter sends them
    (14 perf counters plus derived ratios, energy, frequencies, per-thread times, context
    switches); otherwise the fields a board without counters or sensors fills."""
    from opptune.agent.meters.perf import DERIVED, EVENTS
    out = []
    for i in range(n):
        cores = 1 + i % 8
        rec = RunRecord(platform="bench-plat", workload="bench", input="s", cores=cores,
                        cpus=list(range(cores)), threads=cores, rep=i // 8,
                        time_s=1.0 / cores + 0.1, wall_s=1.0 / cores + 0.11, user_s=0.9,
                        sys_s=0.01, virtual=True, started_at=time.time())
        if full:
            rec.freq_mhz = 1800.0
            rec.freq_observed_mhz = {"policy0": 1800.0, "policy4": 1800.0}
            rec.counters = {name: 1.2345e9 + i for name in EVENTS}
            rec.counters.update({name: 0.8123 for name in DERIVED})
            rec.energy_j, rec.energy_source = 3.21 + i % 7, "rapl:package-0"
            rec.ctx_voluntary, rec.ctx_involuntary, rec.max_rss_kb = 12, 3, 20480
            rec.thread_stats = [{"busy_s": 0.5, "wait_s": 0.01} for _ in range(cores)]
        out.append(rec.to_dict())
    return out


_ID_HOLE = "f" * 32  # placeholder message id, replaced per message (same length, same bytes)


class Stream:
    """Result messages of one simulated agent, each with a fresh id and the next ``seq``.

    Messages are encoded once per record shape with a placeholder id and seq; each send splices
    a new id and seq into those bytes, so a client process can feed many agents without
    spending its core on msgpack. Ids are laid out like the agent's (milliseconds first, 32 hex
    digits); seq counts up within the agent's job as an agent's does (the store's (job_id, seq)
    index then grows at one place per job, not at one per record shape)."""

    def __init__(self, agent_id: str, number: int, records: list[dict]):
        self.agent_id = agent_id
        self.number = number
        self.count = 0
        self.parts, self.item_parts = [], []
        for rec in records:
            # of: far above what is sent, so the job stays open: this measures ingest, not the
            # fit that a completed job triggers. seq: a uint32 placeholder (5 bytes in msgpack).
            body = {"job_id": f"job-{agent_id}", "seq": _SEQ_HOLE, "of": 1 << 62, "record": rec}
            self.parts.append(_holes(P.encode(P.make("result", agent_id, body,
                                                     msg_id=_ID_HOLE))))
            self.item_parts.append(_holes(P.pack_item(_ID_HOLE, body)))  # in a results frame

    def next(self, item: bool = False) -> tuple[str, bytes]:
        """The next result's id and message (``item``: its results frame item)."""
        self.count += 1
        msg_id = f"{time.time_ns() // 1_000_000:012x}{self.number:05x}{self.count:015x}"
        parts = self.item_parts if item else self.parts
        head, mid, tail = parts[self.count % len(parts)]
        seq = (_SEQ_HOLE + self.count).to_bytes(4, "big")
        return msg_id, head + msg_id.encode() + mid + seq + tail


def _holes(data: bytes) -> tuple[bytes, bytes, bytes]:
    """An encoded result cut around its placeholder id and seq: (before the id, between,
    after the seq)."""
    at = data.index(_ID_HOLE.encode())
    sq = data.index(_SEQ_BYTES)
    assert at < sq, "the id precedes the body"
    return data[:at], data[at + 32:sq + 1], data[sq + 5:]


# seq placeholder: seq = this + the agent's count, always a msgpack uint32 and below 2**31
# (PostgreSQL's INTEGER column)
_SEQ_HOLE = 1 << 30
_SEQ_BYTES = b"\xce" + _SEQ_HOLE.to_bytes(4, "big")


LAT_BIN_S = 1e-4  # latency histogram: 0.1 ms bins up to 60 s
LAT_BINS = 600_000


def percentile(hist: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a sparse latency histogram, in ms (bin upper edge)."""
    total = sum(hist.values())
    if not total:
        return None
    need, seen = q * total, 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= need:
            return round((b + 1) * LAT_BIN_S * 1000, 1)
    return None


def say_hello(sock: zmq.Socket, agent_id: str) -> None:
    sock.send(P.encode(P.make("hello", agent_id, {
        "platform": {"id": "bench-plat", "cpus_online": list(range(8))},
        "workloads": ["bench"], "agent_version": "bench"})))


def client_proc(agents: list[tuple[int, str, str]], n: int | None,
                duration: float | None, window: int, full: bool, ready, go, results,
                curve: list | None = None, check_db: str | None = None,
                rate: float | None = None, per_frame: int = 1) -> None:
    """Run several simulated agents, each on its own DEALER socket and identity, connected to
    its daemon's endpoint (``agents``: number, id, endpoint).

    Each agent keeps at most ``window`` results unacknowledged, sending ``n`` results each or
    for ``duration`` seconds, as fast as acks come back or, with ``rate``, at most that many
    results a second (an offered load: the latency is then the daemon's, not the window's). Reports acked counts, the first send and last ack times, a
    histogram of send-to-ack latencies, error counts by code and, with ``check_db``, how many
    acked ids were not yet in the store when their ack arrived.

    ``per_frame``: the results an agent has room for go out in ``results`` frames of up to
    this many (as a real agent sends a backlog), to a daemon whose welcome says it takes them;
    alone otherwise."""
    records = make_records(8, full)
    ctx = zmq.Context()
    poller = zmq.Poller()
    socks: dict[zmq.Socket, dict] = {}
    for k, (number, agent_id, endpoint) in enumerate(agents):
        sock = ctx.socket(zmq.DEALER)
        if curve is not None:
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (
                x.encode() for x in curve[k])
        sock.setsockopt(zmq.IDENTITY, agent_id.encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, window + 100)
        sock.connect(endpoint)
        say_hello(sock, agent_id)
        socks[sock] = {"stream": Stream(agent_id, number, records), "sent": 0, "pending": {},
                       "per_frame": 1, "agent": agent_id}
        poller.register(sock, zmq.POLLIN)
    waiting = set(socks)
    deadline = time.monotonic() + 120
    while waiting and time.monotonic() < deadline:  # the welcome heartbeats
        for sock, _ in poller.poll(1000):
            while True:
                try:
                    msg = P.decode(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if msg["type"] == "heartbeat":
                    waiting.discard(sock)
                    most = msg["body"].get("results_max")  # absent: an older daemon
                    socks[sock]["per_frame"] = min(per_frame, most if type(most) is int else 1)
    db = None
    if check_db:
        db = _reader(check_db)
        mark = "%s" if is_database_url(check_db) else "?"
    hist: dict[int, int] = {}
    errors: dict[str, int] = {}
    acked = not_stored = frames = 0
    ready.set()
    go.wait()
    clock = time.perf_counter
    cpu0 = time.process_time()
    t0 = clock()
    stop_at = t0 + duration if duration is not None else None
    last_ack = t0

    def fill(sock: zmq.Socket, st: dict, now: float) -> None:
        nonlocal frames
        pending, stream = st["pending"], st["stream"]
        room = window - len(pending)
        if n is not None:
            room = min(room, n - st["sent"])
        elif now >= stop_at:
            return
        if rate is not None:
            room = min(room, int((now - t0) * rate) - st["sent"])
        each = st["per_frame"]
        left = room
        while left > 0:
            k = min(each, left)
            left -= k
            if k == 1:
                msg_id, data = stream.next()
                sock.send(data, copy=False)
                pending[msg_id] = clock()
                continue
            got = [stream.next(item=True) for _ in range(k)]
            sock.send(P.pack_results(st["agent"], [d for _, d in got]), copy=False)
            frames += 1
            t = clock()
            for msg_id, _ in got:
                pending[msg_id] = t
        st["sent"] += max(room, 0)

    for sock, st in socks.items():
        fill(sock, st, t0)
    linger_until = None
    next_pass = t0
    while True:
        outstanding = sum(len(st["pending"]) for st in socks.values())
        now = clock()
        if n is not None:
            done_sending = all(st["sent"] >= n for st in socks.values())
        else:
            done_sending = now >= stop_at
        if outstanding == 0 and done_sending:
            break
        if stop_at is not None and now >= stop_at and linger_until is None:
            linger_until = now + 60  # acks still owed after the end: wait at most this
        if linger_until is not None and now > linger_until:
            break
        if rate is not None and not done_sending and now >= next_pass:
            next_pass = now + 0.005  # paced: top every agent up every 5 ms
            for sock, st in socks.items():
                fill(sock, st, now)
        wait_ms = 5 if rate is not None else (10_000 if linger_until is None else 1000)
        ready_socks = poller.poll(wait_ms)
        if not ready_socks and n is not None and rate is None:
            break
        for sock, _ in ready_socks:
            st = socks[sock]
            pending = st["pending"]
            while True:
                try:
                    data = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = P.decode(data)
                if msg["type"] == "ack":
                    t = clock()
                    last_ack = t
                    ids = msg["body"]["ids"]
                    for i in ids:
                        sent_at = pending.pop(i, None)
                        if sent_at is not None:
                            acked += 1
                            b = min(int((t - sent_at) / LAT_BIN_S), LAT_BINS)
                            hist[b] = hist.get(b, 0) + 1
                    if db is not None:
                        for j in range(0, len(ids), 500):
                            part = ids[j:j + 500]
                            found = db.execute(
                                f"SELECT COUNT(*) FROM runs WHERE msg_id IN "
                                f"({','.join([mark] * len(part))})", part).fetchone()[0]
                            not_stored += len(part) - found
                elif msg["type"] == "error":
                    code = msg["body"].get("code", "?")
                    errors[code] = errors.get(code, 0) + 1
            fill(sock, st, clock())
    sent = sum(st["sent"] for st in socks.values())
    results.put({"t0": t0, "t1": last_ack, "acked": acked, "sent": sent, "hist": hist,
                 "errors": errors, "not_stored": not_stored, "frames": frames,
                 "cpu_s": time.process_time() - cpu0})
    if db is not None:
        db.close()
    for sock in socks:
        sock.close(0)
    ctx.term()


def _reader(location: str):
    """A connection that reads the store (an SQLite file read-only, or a PostgreSQL URL)."""
    if is_database_url(location):
        import psycopg
        return psycopg.connect(location, autocommit=True)
    return sqlite3.connect(f"file:{location}?mode=ro", uri=True)


def stored_runs(location: str) -> int:
    db = _reader(location)
    try:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        db.close()


def server_cpu_s(data_dir: Path | None) -> float:
    """CPU seconds of a PostgreSQL server's processes (postmaster and backends) so far; 0
    without a server started here."""
    if data_dir is None:
        return 0.0
    try:
        master = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if int(entry) == master or ppid == master:
                total += proc_cpu_s(int(entry))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return total


def proc_mem_kb(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


def proc_cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of a process so far; of one of its threads with ``tid``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pressure_pct(resource: str) -> float | None:
    """Share of the last 60 s in which some task waited for ``resource`` (Linux PSI), or None
    without PSI. Tells a slow run on a busy machine from a slow daemon."""
    try:
        with open(f"/proc/pressure/{resource}") as fh:
            return float(fh.readline().split()[2].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def wal_size(db: Path) -> int:  # an SQLite file's
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


# the points of make_records' records: results are stored only for one of their job's points
POINTS = [{"cpus": list(range(c)), "threads": c} for c in range(1, 9)]


def issue_jobs(db: str | Path, agents: int) -> None:
    """Store one open job per agent before the daemon starts: the daemon stores results only
    for jobs it issued to their agent (as after a restart with jobs in flight). ``db``: an
    SQLite file or a postgresql:// URL."""
    from opptune.daemon.store import open_store
    store = open_store(str(db))
    for i in range(agents):
        store.save_job(f"bench-agent-{i}", {"job_id": f"job-bench-agent-{i}", "workload": "bench",
                                            "size": "s", "points": POINTS, "reps": 1,
                                            "warmup": 0}, time.time())
    store.close()


def accept_keys(keys: Path, agents: int) -> list[tuple[str, str, str]]:
    """Make the daemon's key pair and one accepted key per agent, as an operator would with
    'opptune keys accept'; each agent's (server public, public, secret)."""
    from opptune.daemon.keyring import KeyRing
    from opptune.shared.curve import ensure_keypair
    server = ensure_keypair(keys / "server.key")
    ring = KeyRing(keys / "agents.json", ensure_keypair(keys / "operator.key")[0])
    out = []
    for i in range(agents):
        public, secret = (k.decode() for k in zmq.curve_keypair())
        try:
            ring.check(public, f"bench-agent-{i}", "hello")
        except Exception:  # pending: accept it
            ring.decide("accept", ring.keys[public]["id"])
        out.append((server[0], public, secret))
    return out


def run(agents: int = 4, results: int | None = 50_000, duration: float | None = None,
        window: int = 2000, procs: int | None = None, full_records: bool = False,
        bind: str = "tcp://127.0.0.1:0", curve: bool = False, profile: str | None = None,
        check_acks: bool = False, warmup_s: float | None = None,
        daemon_cmd: list[str] | None = None, rate: float | None = None,
        database: str | None = None, daemons: int = 1, pg_data: Path | None = None,
        per_frame: int = 1) -> dict:
    """One benchmark run against fresh daemon processes; the figures as a dict.

    ``results`` per agent, or stream for ``duration`` seconds. ``check_acks``: each client
    looks up every acked id in the store as its ack arrives (acked must mean stored).
    ``daemon_cmd``: the command that starts the daemon module (another checkout's Python).
    ``database``: a PostgreSQL URL (an empty database) instead of a fresh SQLite file;
    ``daemons``: that many daemons sharing it, agent i talking to daemon i mod ``daemons``;
    ``pg_data``: the server's data directory, to add its processes' CPU time.
    ``per_frame``: results per ``results`` frame at most (1: one result per message)."""
    procs = procs or min(agents, 4)
    tmp = Path(tempfile.mkdtemp(prefix="opptune-ingest-"))
    db = database or str(tmp / "ingest.db")
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    issue_jobs(db, agents)
    stored0 = stored_runs(db)
    conf = tmp / "daemon.toml"
    conf.write_text(f'curve = "{"on" if curve else "off"}"\nkeys_dir = "{tmp / "keys"}"\n')
    agent_keys = accept_keys(tmp / "keys", agents) if curve else None
    cmd = daemon_cmd or [sys.executable, *prof, "-m", "opptune.daemon.service"]
    ep_files = [tmp / f"endpoint{k}" for k in range(daemons)]
    procs_d = [subprocess.Popen([*cmd, "--config", str(conf), "--bind", bind,
                                 "--database", db, "--endpoint-file", str(ep),
                                 "--log-level", "WARNING"]) for ep in ep_files]
    children = []

    def rss_kb(key: str = "VmRSS") -> int:  # all daemons together
        return sum(proc_mem_kb(d.pid)[key] for d in procs_d)

    def cpu_s() -> tuple[float, float, float]:  # (daemons, their main threads, db server)
        # The main thread (tid = pid) runs the loop and all of ingest; the others (store
        # checkpoints, fits, ZeroMQ's I/O) may run on the other core. The main thread's CPU
        # per result is what bounds results/s on one core.
        return (sum(proc_cpu_s(d.pid) for d in procs_d),
                sum(proc_cpu_s(d.pid, d.pid) for d in procs_d), server_cpu_s(pg_data))

    try:
        deadline = time.monotonic() + 60
        while not all(ep.exists() for ep in ep_files):  # wait for the daemons to come up
            if any(d.poll() is not None for d in procs_d) or time.monotonic() > deadline:
                raise SystemExit("daemon did not start")
            time.sleep(0.05)
        endpoints = [ep.read_text().strip() for ep in ep_files]
        rss_idle = rss_kb()
        mpc = mp.get_context("fork")
        go, queue = mpc.Event(), mpc.Queue()
        readies = []
        names = [(i, f"bench-agent-{i}", endpoints[i % daemons]) for i in range(agents)]
        for k in range(procs):
            mine = names[k::procs]
            keys = [agent_keys[i] for i, _, _ in mine] if agent_keys else None
            ready = mpc.Event()
            p = mpc.Process(target=client_proc, args=(
                mine, None if duration is not None else results, duration, window,
                full_records, ready, go, queue, keys, db if check_acks else None, rate,
                per_frame))
            p.start()
            readies.append(ready)
            children.append(p)
        for r in readies:
            if not r.wait(180):
                raise SystemExit("a client process did not get its agents' hellos answered")
        cpu0, main0, srv0 = cpu_s()
        t_go = time.monotonic()
        go.set()
        # Daemon memory once a second: at the end of warm-up and at the end of the run.
        warm = warmup_s if warmup_s is not None else min(30.0, (duration or 10) / 5)
        rss_warm = rss_max = None
        every = max((duration or 10) / 10, 1.0)
        next_sample, rss_trace = t_go + every, []  # (s since start, RSS MiB, WAL MiB)
        sqlite_file = None if is_database_url(db) else Path(db)
        got = []
        while len(got) < procs:
            try:
                got.append(queue.get(timeout=1.0))
            except Exception:  # queue.Empty: sample memory and wait again
                if any(d.poll() is not None for d in procs_d):
                    raise SystemExit("a daemon exited during the run") from None
                rss = rss_kb()
                rss_max = max(rss_max or 0, rss)
                if rss_warm is None and time.monotonic() - t_go >= warm:
                    rss_warm = rss
                if time.monotonic() >= next_sample:
                    next_sample += every
                    rss_trace.append((round(time.monotonic() - t_go), round(rss / 1024, 1),
                                      round(wal_size(sqlite_file) / 2**20, 1)
                                      if sqlite_file else None))
                if time.monotonic() - t_go > (duration or 0) + 600:
                    raise SystemExit("clients did not finish") from None
        for p in children:
            p.join(30)
        start = min(g["t0"] for g in got)
        end = max(g["t1"] for g in got)
        acked = sum(g["acked"] for g in got)
        sent = sum(g["sent"] for g in got)
        hist: dict[int, int] = {}
        errors: dict[str, int] = {}
        for g in got:
            for b, c in g["hist"].items():
                hist[b] = hist.get(b, 0) + c
            for code, c in g["errors"].items():
                errors[code] = errors.get(code, 0) + c
        rss_end, rss_peak = rss_kb(), rss_kb("VmHWM")
        cpu1, main1, srv1 = cpu_s()
        cpu, main_cpu, srv = cpu1 - cpu0, main1 - main0, srv1 - srv0
        stored = stored_runs(db) - stored0
        span = max(end - start, 1e-9)
        return {"store": ("postgresql" if is_database_url(db) else "sqlite"),
                "daemons": daemons, "agents": agents, "client_procs": procs, "window": window,
                "per_frame": per_frame, "frames": sum(g["frames"] for g in got),
                "rate_per_agent": rate,
                "full_records": full_records, "curve": curve,
                "duration_s": duration, "sent": sent, "acked": acked, "stored": stored,
                "unacked": sent - acked, "acked_not_stored": max(acked - stored, 0),
                "errors": errors,
                "acked_before_stored": (sum(g["not_stored"] for g in got)
                                        if check_acks else None),
                "seconds": round(span, 3), "results_per_s": round(acked / span),
                "ack_latency_p50_ms": percentile(hist, 0.50),
                "ack_latency_p99_ms": percentile(hist, 0.99),
                "ack_latency_max_ms": percentile(hist, 1.0),
                "daemon_cpu_s": round(cpu, 2),
                "db_server_cpu_s": round(srv, 2) if pg_data else None,
                "clients_cpu_s": round(sum(g["cpu_s"] for g in got), 2),
                "results_per_daemon_cpu_s": round(acked / cpu) if cpu else None,
                "daemon_cpu_us_per_result": round(cpu / acked * 1e6, 1) if acked else None,
                "daemon_main_thread_cpu_us_per_result": (round(main_cpu / acked * 1e6, 1)
                                                         if acked else None),
                "db_server_cpu_us_per_result": (round(srv / acked * 1e6, 1)
                                                if acked and pg_data else None),
                "load_avg_1min": os.getloadavg()[0],
                "cpu_pressure_pct_60s": pressure_pct("cpu"),
                "io_pressure_pct_60s": pressure_pct("io"),
                "daemon_rss_idle_mib": round(rss_idle / 1024, 1),
                "daemon_rss_warm_mib": round(rss_warm / 1024, 1) if rss_warm else None,
                "daemon_rss_end_mib": round(rss_end / 1024, 1),
                "daemon_rss_max_sampled_mib": round(rss_max / 1024, 1) if rss_max else None,
                "daemon_rss_peak_mib": round(rss_peak / 1024, 1),
                "trace_s_rss_wal_mib": rss_trace,
                "db_mib": (round(sum(f.stat().st_size for f in tmp.glob("ingest.db*")) / 2**20, 1)
                           if sqlite_file else None),
                "wal_mib": round(wal_size(sqlite_file) / 2**20, 1) if sqlite_file else None,
                "endpoint": " ".join(endpoints)}
    finally:
        for p in children:
            if p.is_alive():
                p.kill()
                p.join(5)
        for d in procs_d:
            d.send_signal(signal.SIGTERM)
        for d in procs_d:
            try:
                d.wait(30)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def pg_server():
    """A throwaway PostgreSQL server (tests/pgserver.py's), or exit 2 saying why there is none."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    try:
        from pgserver import PgServer, unavailable
    except ImportError as exc:
        raise SystemExit(f"ingest.py: --postgres needs the test extras ({exc}): "
                         "pip install -e '.[test]'") from None
    why = unavailable()
    if why:
        print(f"ingest.py: --postgres: {why}", file=sys.stderr)
        raise SystemExit(2)
    return PgServer()


def side_by_side(runs: list[dict]) -> str:
    """The runs' figures as a table, one column per run."""
    heads = [f"{r['store']} x{r['daemons']}" for r in runs]
    keys = [k for k in runs[0] if k not in ("trace_s_rss_wal_mib", "endpoint")]
    width = max(12, *(len(h) for h in heads), *(len(str(r.get(k))) for r in runs for k in keys))
    lines = [f"{'':>28}" + "".join(f"{h:>{width + 2}}" for h in heads)]
    for k in keys:
        lines.append(f"{k:>28}" + "".join(f"{str(r.get(k)):>{width + 2}}" for r in runs))
    for r, h in zip(runs, heads):
        lines.append(f"{h} trace (s, RSS MiB, WAL MiB): {r['trace_s_rss_wal_mib']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--results", type=int, default=50_000, help="per agent")
    ap.add_argument("--duration", type=float,
                    help="stream for this many seconds instead of a fixed --results per agent")
    ap.add_argument("--window", type=int, default=None,
                    help="unacked results per agent (default 2000; 16 with --duration)")
    ap.add_argument("--per-frame", type=int, default=None,
                    help="results per 'results' frame at most, as an agent sends a backlog "
                         f"(default {AgentConfig().results_per_frame}, the agent's; 1: one "
                         "result per message, as before frames)")
    ap.add_argument("--rate", type=float, default=None,
                    help="results/s per agent (an offered load); default: as fast as acks "
                         "come back")
    ap.add_argument("--procs", type=int, default=None,
                    help="client processes sharing the agents (default: min(agents, 4))")
    ap.add_argument("--full-records", action="store_true",
                    help="records with every meter's fields (counters, energy, ...)")
    ap.add_argument("--bind", default="tcp://127.0.0.1:0")
    ap.add_argument("--json", action="store_true", help="print one JSON line per run")
    ap.add_argument("--profile", help="run the daemon under cProfile, writing this file")
    ap.add_argument("--curve", action="store_true", help="CURVE on the link")
    ap.add_argument("--check-acks", action="store_true",
                    help="look up every acked id in the store when its ack arrives")
    ap.add_argument("--daemon-python", help="the Python of another checkout (e.g. main's "
                                            "venv) whose daemon to measure")
    ap.add_argument("--database", metavar="URL",
                    help="an empty PostgreSQL database (postgresql://...) instead of a fresh "
                         "SQLite file")
    ap.add_argument("--postgres", action="store_true",
                    help="start a throwaway PostgreSQL server (tests/pgserver.py) and use it")
    ap.add_argument("--daemons", type=int, default=1,
                    help="daemons sharing the PostgreSQL database, the agents split between "
                         "them (default 1)")
    ap.add_argument("--compare", action="store_true",
                    help="three runs side by side: SQLite, PostgreSQL (a throwaway server), "
                         "PostgreSQL with two daemons")
    args = ap.parse_args()
    if args.per_frame is not None and not 1 <= args.per_frame <= P.MAX_RESULTS_ITEMS:
        print(f"ingest.py: --per-frame must be 1..{P.MAX_RESULTS_ITEMS}, got {args.per_frame}",
              file=sys.stderr)
        return 2
    for name in ("agents", "results", "window", "procs", "daemons"):
        v = getattr(args, name)
        if v is not None and v < 1:
            print(f"ingest.py: --{name} must be at least 1, got {v}", file=sys.stderr)
            return 2
    if args.rate is not None and args.rate <= 0:
        print("ingest.py: --rate must be a positive number of results per second per agent",
              file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("ingest.py: --duration must be a positive number of seconds", file=sys.stderr)
        return 2
    if args.database is not None and not is_database_url(args.database):
        print(f"ingest.py: --database must be a postgresql:// URL, got {args.database!r} (a "
              "fresh SQLite file is the default)", file=sys.stderr)
        return 2
    if args.daemons > 1 and not (args.database or args.postgres):
        print("ingest.py: --daemons above 1 share a PostgreSQL database: add --postgres or "
              "--database URL", file=sys.stderr)
        return 2
    window = args.window or (16 if args.duration is not None else 2000)
    daemon_cmd = ([args.daemon_python, "-m", "opptune.daemon.service"]
                  if args.daemon_python else None)
    plan = ([(False, 1), (True, 1), (True, 2)] if args.compare
            else [(args.postgres or bool(args.database), args.daemons)])
    server = pg_server() if args.postgres or (args.compare and not args.database) else None
    outs = []
    try:
        for on_pg, daemons in plan:
            database = None
            if on_pg:
                database = server.new_database() if server else args.database
            out = run(args.agents, args.results, args.duration, window, args.procs,
                      args.full_records, args.bind, args.curve, args.profile, args.check_acks,
                      daemon_cmd=daemon_cmd, rate=args.rate, database=database,
                      daemons=daemons, pg_data=server.data if server else None,
                      per_frame=(args.per_frame if args.per_frame is not None
                                 else AgentConfig().results_per_frame))
            outs.append(out)
            if args.json:
                print(json.dumps(out), flush=True)
            elif not args.compare:
                for k, v in out.items():
                    print(f"{k:>26}: {v}")
    finally:
        if server is not None:
            server.stop()
    if args.compare and not args.json:
        print(side_by_side(outs))
    ok = all(o["acked"] == o["sent"] == o["stored"] and not o["acked_before_stored"]
             for o in outs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
