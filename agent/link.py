"""The agent's end of the link: one DEALER socket to the daemon's ROUTER.

Runs in the agent's main thread and is the only code that touches the socket. Other threads
hand it messages with :meth:`Link.send` (a queue plus a wake-up pipe), and results reach it
through the outbox, which it (re)sends until acked.

Liveness: hello on start (and again, ``hello_again``, when what it says changed: a workload's
program, agent/runner.py); heartbeats every ``heartbeat_s``; no message from the daemon for
3 heartbeats = gone. The next message from it (or an ``unknown_agent`` error, or a new daemon
instance in its heartbeat) triggers a fresh hello and makes every pending result due again,
so after a daemon kill -9 and restart every result arrives (the daemon dedupes by id).

Fail-over: with several endpoints (daemons sharing one database), the link talks to one at a
time; when it is gone, the link connects to the next (round robin), says hello there and
resends every unacknowledged result. The shared store keeps each result once by its id.

Frames: when more than one result is due (a backlog: catch-up after an outage, a restart, very
short runs), up to ``per_frame`` of them go in one ``results`` frame, each keeping its own id
(the daemon acks and refuses items). Only to a daemon whose heartbeat said it takes them
(``results_max``), learned again after each hello, so after a fail-over to an older daemon
results go singly. A frame refused as a whole (``unknown_type`` from a daemon that does not
know the type, or any other refusal naming the frame) turns frames off until the next hello
and makes its results due again, sent singly: each then gets its own verdict.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from typing import Any, Callable, Sequence

import zmq

from .. import __version__ as AGENT_VERSION
from ..shared import protocol as P
from ..shared.refusals import RefusalLog
from .host_lookup import HostLookup
from .outbox import Outbox, OutboxFull

log = logging.getLogger("opptune.agent.link")

GONE_AFTER_HEARTBEATS = 3
# while the daemon stays silent, a line this often says the agent still waits for it (an agent
# started before its daemon, or pointed at the wrong port, said one line and then nothing)
GONE_REMIND_S = 60.0
# after a hello, results wait at most this many heartbeat periods for the daemon's answer
# (which says whether it takes frames): past the first heartbeat, which a daemon that did not
# answer the hello answers
WELCOME_WAIT_HEARTBEATS = 2
FRAMES_KEPT = 4096  # results frames remembered (id -> its results), for a refusal naming one
FRAME_OVERHEAD = 256  # a results frame's envelope, beside its items' bytes
REFUSAL_LOG_S = 60.0  # a flood of bad frames or refusals writes one line a minute

# results refused for good stay in the outbox's rejected table (shared/protocol.py)
PERMANENT_REFUSALS = P.PERMANENT_REFUSALS


class Link:
    def __init__(self, agent_id: str, endpoint: str | Sequence[str], hello_body: dict[str, Any],
                 outbox: Outbox,
                 on_message: Callable[[dict[str, Any]], None], *, heartbeat_s: float = 2.0,
                 resend_s: float | None = None, window: int = 1000,
                 context: zmq.Context | None = None, instance: str | None = None,
                 curve: tuple[str, str, str] | None = None, per_frame: int = 16,
                 on_heartbeat: Callable[[], None] | None = None):
        """``endpoint``: the daemon's, or several daemons' in order of preference (fail-over).
        ``curve``: (daemon public, own public, own secret) Z85 keys for an encrypted,
        authenticated link; None for a plain one. ``per_frame``: due results sent together in
        one ``results`` frame at most (1: always singly; agent config results_per_frame).
        ``on_heartbeat``: called (in the link's thread) after each heartbeat sent: a cheap
        look at the board (a confined process that exited, agent/apply.py)."""
        self.agent_id = agent_id
        self.endpoints = [endpoint] if isinstance(endpoint, str) else list(dict.fromkeys(endpoint))
        if not self.endpoints:
            raise ValueError("no daemon endpoint")
        self.endpoint = self.endpoints[0]
        self.hello_body = dict(hello_body)
        self.outbox = outbox
        self.on_message = on_message
        self.heartbeat_s = max(0.05, float(heartbeat_s))
        self.resend_s = resend_s if resend_s is not None else 2 * self.heartbeat_s
        self.window = window
        self.instance = instance or os.urandom(8).hex()
        self.curve = curve
        self._key_refused: str | None = None  # the daemon's last key_* refusal code
        self._ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._poller = zmq.Poller()
        # messages to send, and hello_again's events (a hello, then the event set)
        self._queue: queue.Queue[dict[str, Any] | threading.Event] = queue.Queue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._last_rx = time.monotonic()
        self._heard = False  # anything received on the current connection
        self._lookup = HostLookup()
        self._next_hb = 0.0
        self._gone = False
        self._gone_told = 0.0  # when the daemon's silence was last said
        self._daemon_instance: str | None = None
        self._outbox_dirty = True
        self.on_heartbeat = on_heartbeat
        self.per_frame = max(1, min(int(per_frame), P.MAX_RESULTS_ITEMS))
        # what the daemon said it takes (its heartbeat; 0: no results frames), per connection
        self._frames_max = 0
        self._frame_bytes = P.MAX_MESSAGE_BYTES
        self._frames_off = False  # a frame was refused whole: singly until the next hello
        self._frames: dict[str, list[str]] = {}  # sent frame id -> its results' ids
        # after a hello, the first flush waits (WELCOME_WAIT_HEARTBEATS at most) for the
        # answer that says whether the daemon takes frames: a backlog then goes in frames
        self._welcomed = False
        self._hello_at = 0.0
        # "rate_limited" from the daemon: no results go out before this (monotonic), and the
        # pause doubles while refusals continue; the refused results stay in the outbox and
        # are resent once stale (resend_s)
        self._backoff_until = 0.0
        self._backoff_s = 0.0
        self._limited_logged = 0.0
        self._store_failed_logged = -10.0
        # frames refused from the daemon, and the daemon's refusals of this agent's messages:
        # the first line, then one a minute with the count left unlogged
        self._refused_log = RefusalLog(log, REFUSAL_LOG_S, line="refused a message from the "
                                       "daemon at %s: %s (%s)%s", more="more refused")
        self._daemon_refused_log = RefusalLog(log, REFUSAL_LOG_S, line="daemon at %s refused "
                                              "%s (%s)%s", more="more refusals")
        self.stats = {"sent": 0, "received": 0, "hellos": 0, "resent": 0, "dropped": 0,
                      "refused": 0, "rate_limited": 0, "failovers": 0, "store_failed": 0,
                      "frames": 0, "frames_refused": 0}

    # -- thread-safe entry points -------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        """Queue a message for sending from the link thread (any thread may call this)."""
        self._queue.put(msg)
        self.wake()

    def hello_again(self) -> threading.Event:
        """Say hello again (any thread may call this): what it tells changed, e.g. a
        workload's program. The event is set once the hello is on the socket, ahead of any
        result stored after that; also when the link closes without sending it."""
        done = threading.Event()
        self._queue.put(done)
        self.wake()
        return done

    def _resend_rejected(self, msg: dict[str, Any]) -> None:
        """The daemon asks for the results it refused for good with these codes
        (``opptune recover``): back in the resend queue, sent with the next results."""
        # a handful of refusal codes exist: more is not a request this agent can mean
        codes = sorted({c[:40] for c in msg["body"]["codes"][:16] if isinstance(c, str)})
        try:
            n = self.outbox.requeue_rejected(codes)
        except (OutboxFull, sqlite3.Error) as exc:
            log.warning("the daemon asked for the results kept as refused (%s) again: not "
                        "done, %s; they stay kept", ", ".join(codes), exc)
            return
        if n:
            log.info("the daemon asked for the results kept as refused (%s): %d sent again",
                     ", ".join(codes), n)
            self._outbox_dirty = True
        else:
            log.info("the daemon asked for the results kept as refused (%s): none kept",
                     ", ".join(codes))

    def notify_outbox(self) -> None:
        """New results are in the outbox (any thread may call this)."""
        self._outbox_dirty = True
        self.wake()

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass  # pipe full means a wake-up is already pending

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._connect()
        self._poller.register(self._wake_r, zmq.POLLIN)
        log.info("agent %s connecting to %s", self.agent_id, self.endpoint)
        self._hello()
        self._next_hb = time.monotonic() + self.heartbeat_s

    def _connect(self) -> None:
        s = self._ctx.socket(zmq.DEALER)
        # one routing id per agent process: the daemon's socket keeps the first connection of
        # an id and drops a later one unread, so two boards of one agent_id (one host name,
        # the default) would leave the second unheard, where the daemon can name the clash
        s.setsockopt(zmq.IDENTITY, f"{self.agent_id}/{self.instance}".encode())
        s.setsockopt(zmq.LINGER, 1000)  # bounded close; unacked results live on in the outbox
        s.setsockopt(zmq.SNDHWM, self.window + 100)
        s.setsockopt(zmq.RCVHWM, 1000)
        s.setsockopt(zmq.MAXMSGSIZE, 2 * P.MAX_MESSAGE_BYTES)
        s.setsockopt(zmq.RECONNECT_IVL, 200)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)
        if self.curve is not None:
            s.curve_serverkey = self.curve[0].encode()
            s.curve_publickey = self.curve[1].encode()
            s.curve_secretkey = self.curve[2].encode()
        s.connect(self.endpoint)
        self._lookup.start(self.endpoint)  # ZeroMQ says nothing of a name that does not resolve
        self._sock = s
        self._poller.register(s, zmq.POLLIN)
        self._last_rx = time.monotonic()
        self._heard = False

    def _fail_over(self) -> None:
        """The daemon is gone: connect to the next endpoint, say hello, resend what is
        pending (the old socket's queued messages are dropped: the outbox has them)."""
        assert self._sock is not None
        old = self.endpoint
        self._poller.unregister(self._sock)
        self._sock.close(linger=0)
        self.endpoint = self.endpoints[(self.endpoints.index(old) + 1) % len(self.endpoints)]
        self._connect()
        self.stats["failovers"] += 1
        log.warning("daemon at %s gone: failing over to %s", old, self.endpoint)
        self._gone = False
        self._daemon_instance = None
        self._backoff_until = self._backoff_s = 0.0
        self._hello()
        self.outbox.reset_sent()
        self._outbox_dirty = True

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._drain_queue(closing=True)
            except Exception as exc:
                log.warning("flushing queued messages failed: %s", exc)
            self._poller.unregister(self._sock)
            self._sock.close()
            self._sock = None
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set (wake the link after setting it)."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # the loop must survive anything one message can do
                log.exception("link step failed; continuing")
                time.sleep(0.05)  # a persistent fault must not spin the CPU

    @property
    def daemon_gone(self) -> bool:
        return self._gone

    # -- one iteration ------------------------------------------------------------------------
    def step(self, max_wait_s: float | None = None) -> None:
        now = time.monotonic()
        wake_at = self._next_hb
        if self._outbox_dirty and self._backoff_until > now:
            wake_at = min(wake_at, self._backoff_until)  # results wait for the pause's end
        welcome_by = self._hello_at + WELCOME_WAIT_HEARTBEATS * self.heartbeat_s
        if self._outbox_dirty and not self._welcomed and welcome_by > now:
            wake_at = min(wake_at, welcome_by)  # ... or for the daemon's answer
        wait = max(0.0, wake_at - now)
        if max_wait_s is not None:
            wait = min(wait, max_wait_s)
        events = dict(self._poller.poll(int(wait * 1000) + 1))
        if events.get(self._wake_r):
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        if events.get(self._sock):
            for _ in range(1000):  # bounded batch so heartbeats are never starved
                try:
                    frames = self._sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._on_frames(frames)
        self._drain_queue()
        now = time.monotonic()
        if not self._gone and now - self._last_rx > GONE_AFTER_HEARTBEATS * self.heartbeat_s:
            self._gone = True
            self._gone_told = now
            # a CURVE handshake with the wrong server key fails without a word on either
            # side: silence from the first message on is the only sign the agent gets
            hint = ""
            unresolved = None if self._heard else self._lookup.failure(self.endpoint)
            if unresolved:
                hint = (f"; {unresolved}: check the host in 'daemon' (--daemon), or this "
                        "board's name resolution (/etc/hosts, DNS)")
            elif self.curve is not None and not self._heard:
                hint = ("; nothing has come from it over CURVE: if it runs, check that "
                        "daemon_public_key is the key 'opptune keys server' prints on its host")
            elif not self._heard:
                hint = ("; nothing has come from it since the agent connected: check that "
                        "opptune-daemon runs there and that 'daemon' (--daemon) is its log's "
                        "'listening on' endpoint")
            log.warning("no message from the daemon at %s for %.1f s: considering it gone%s; "
                        "the agent keeps trying and says hello once it answers",
                        self.endpoint, now - self._last_rx, hint)
            if len(self.endpoints) > 1:
                self._fail_over()
        elif self._gone and now - self._gone_told >= GONE_REMIND_S:
            self._gone_told = now
            log.warning("still no message from the daemon at %s (for %.0f s); %d results wait "
                        "in the outbox", self.endpoint, now - self._last_rx,
                        self.outbox.count())
        if now >= self._next_hb:
            body = {"outbox": self.outbox.count(), "instance": self.instance}
            full = self.outbox.full_reason()
            if full is not None:  # shown by 'opptune status' until it has room again
                body["outbox_full"] = full[:500]
            self._send(P.make("heartbeat", self.agent_id, body))
            self._next_hb = now + self.heartbeat_s
            self._outbox_dirty = True  # time to look for results due for a resend
            if self.on_heartbeat is not None:
                try:
                    self.on_heartbeat()
                except Exception:  # a look at the board must not stop the link
                    log.exception("heartbeat's look at the board failed; continuing")
        if self._outbox_dirty and now >= self._backoff_until and (
                self._welcomed or now - self._hello_at >= WELCOME_WAIT_HEARTBEATS
                * self.heartbeat_s):
            self._outbox_dirty = False
            self._flush_outbox()


    # -- internals ----------------------------------------------------------------------------
    def _hello(self) -> None:
        body = dict(self.hello_body)
        body.setdefault("agent_version", AGENT_VERSION)
        body.setdefault("pid", os.getpid())
        body["instance"] = self.instance
        for key, make in list(body.items()):
            if not callable(make):
                continue
            try:  # made at each hello: the board's state now, what stands now
                body[key] = make()
            except Exception as exc:  # the hello matters more than its report
                log.warning("hello's %s failed: %s", key, exc)
                del body[key]
        self.stats["hellos"] += 1
        # a new hello, maybe to another daemon (fail-over) or a restarted, older one: frames
        # wait for its answer
        self._frames_max, self._frames_off, self._welcomed = 0, False, False
        self._hello_at = time.monotonic()
        self._send(P.make("hello", self.agent_id, body))

    def _send(self, msg: dict[str, Any]) -> bool:
        try:
            data = P.encode(msg)
        except P.ProtocolError as exc:
            log.error("not sending %s %s: %s", msg.get("type"), msg.get("id"), exc)
            return False
        return self._send_raw(data, msg.get("type", "?"))

    def _send_raw(self, data: bytes, what: str) -> bool:
        assert self._sock is not None
        try:
            self._sock.send(data, zmq.NOBLOCK)
        except zmq.Again:
            self.stats["dropped"] += 1
            log.debug("send queue full; %s not sent now", what)
            return False
        self.stats["sent"] += 1
        return True

    def _drain_queue(self, closing: bool = False) -> None:
        while True:
            try:
                msg = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(msg, threading.Event):
                if not closing:
                    self._hello()
                msg.set()
                continue
            self._send(msg)

    def _flush_outbox(self) -> None:
        """Send results never sent, and (while the daemon is reachable) resend stale ones,
        keeping at most ``window`` results in flight."""
        now = time.time()
        cutoff = now - self.resend_s
        # While the daemon is gone only first sends go out (into zmq's queue, bounded by the
        # window); resends wait until it is back, when every pending result becomes due.
        sent_before = 0.0 if self._gone else cutoff
        room = self.window - self.outbox.in_flight(cutoff)
        sent: list[str] = []
        due = self.outbox.due(sent_before, room)
        if any(len(data) > self._frame_bytes for _, data in due):
            due = self._park_too_large(due)
        n = min(self.per_frame, self._frames_max)
        for ids, data, frame_id in (self._packets(due, n) if n > 1 and len(due) > 1 else
                                    (([mid], data, None) for mid, data in due)):
            if not self._send_raw(data, "results" if frame_id else "result"):
                break
            if frame_id:
                self.stats["frames"] += 1
                self._frames[frame_id] = ids
                if len(self._frames) > FRAMES_KEPT:
                    del self._frames[next(iter(self._frames))]
            sent.extend(ids)
        if sent:
            self.outbox.mark_sent(sent, now)
            log.debug("sent %d results", len(sent))

    def _park_too_large(self, due: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """Park (outbox ``rejected``, kept on disk) the messages over the daemon's message
        size, which it would refuse unread (``too_large`` without a ref, so that the refusal
        could never park them and they would be resent forever); the others, to send."""
        keep = []
        for mid, data in due:
            if len(data) <= self._frame_bytes:
                keep.append((mid, data))
                continue
            why = (f"{len(data)} bytes, over the daemon's message size of {self._frame_bytes} "
                   "bytes (its max_message_bytes); kept in the outbox's rejected table, not sent")
            if self.outbox.reject(mid, "too_large", why):  # once per message: a line each
                self.stats["refused"] += 1
                log.warning("message %s not sent to %s: %s", mid, self.endpoint, why)
        return keep

    def _packets(self, due: list[tuple[str, bytes]], n: int
                 ) -> list[tuple[list[str], bytes, str | None]]:
        """``due`` as what to send: (ids, bytes, frame id or None). This agent's results go in
        frames of at most ``n`` within the daemon's message size; anything else (an
        ``applied`` reply, a result of another agent id) and a run of one go as stored."""
        limit = self._frame_bytes - FRAME_OVERHEAD
        out: list[tuple[list[str], bytes, str | None]] = []
        group: list[tuple[str, bytes, bytes]] = []  # (id, stored message, item)
        size = 0

        def close() -> None:
            if len(group) == 1:
                out.append(([group[0][0]], group[0][1], None))
            elif group:
                fid = P.new_id()
                out.append(([g[0] for g in group],
                            P.pack_results(self.agent_id, [g[2] for g in group], fid), fid))
            group.clear()

        for mid, data in due:
            try:
                msg = P.decode(data)
            except P.ProtocolError:
                msg = None  # the daemon judges it, as it would alone
            if msg is None or msg["type"] != "result" or msg["agent"] != self.agent_id:
                out.append(([mid], data, None))
                continue
            item = P.pack_item(mid, msg["body"])
            if group and (len(group) >= n or size + len(item) > limit):
                close()
                size = 0
            group.append((mid, data, item))
            size += len(item)
        close()
        return out

    def _learn_frames(self, body: dict[str, Any]) -> None:
        """A daemon heartbeat: whether (and how large) it takes results frames."""
        self._welcomed = True
        if self._frames_off:
            return
        most, size = body.get("results_max"), body.get("max_message_bytes")
        self._frames_max = most if type(most) is int and 0 < most <= P.MAX_RESULTS_ITEMS else 0
        if type(size) is int and 1024 <= size <= P.MAX_MESSAGE_BYTES:
            self._frame_bytes = size

    def _frame_refused(self, ids: list[str] | None, code: str, message: str) -> None:
        """The daemon refused a results frame as a whole (``ids``: its results; None when the
        refusal did not name it): frames off until the next hello, its results due again,
        singly."""
        self.stats["frames_refused"] += 1
        self._frames_off, self._frames_max = True, 0
        if ids:
            self.outbox.reset_sent(ids)
        self._outbox_dirty = True
        self._daemon_refused_log.refused(
            self.endpoint, code, f"a frame of {len(ids or ())} results: {message[:500]}; "
            "sending results one per message to it until the next hello")

    def _daemon_back(self, why: str | None) -> None:
        """Hello again and every pending result due (``why`` logged; None: the caller said it)."""
        if why:
            log.info("daemon %s: saying hello and resending pending results", why)
        self._gone = False
        self._hello()
        self.outbox.reset_sent()
        self._outbox_dirty = True

    def _slow_down(self, now: float) -> None:
        """The daemon refused messages over this agent's rate: pause sending results."""
        self.stats["rate_limited"] += 1
        self._backoff_s = min(self.resend_s, max(0.05, 2 * self._backoff_s))
        self._backoff_until = now + self._backoff_s
        self._outbox_dirty = True
        if now - self._limited_logged >= 10.0:  # a long flood writes one line per 10 s
            self._limited_logged = now
            log.warning("daemon says this agent sends too fast (rate_limited): pausing %.2f s; "
                        "refused results stay in the outbox and are resent", self._backoff_s)

    def _on_frames(self, frames: list[bytes]) -> None:
        self.stats["received"] += 1
        now = time.monotonic()
        was_gone = self._gone
        self._last_rx = now
        self._heard = True
        if was_gone:
            self._daemon_back("is back")
        data = frames[-1] if frames else b""  # tolerate a REQ-style empty delimiter frame
        try:
            msg = P.decode(data)
        except P.ProtocolError as exc:
            self.stats["refused"] += 1
            self._refused_log.refused(self.endpoint, exc.code, str(exc))
            self._send(P.error_reply(self.agent_id, exc.code, str(exc), exc.ref))
            return
        kind, body = msg["type"], msg["body"]
        if self._key_refused is not None and kind in ("heartbeat", "ack"):
            # The daemon answers this agent's messages again: its key was accepted. (A job or
            # config may still reach a refused agent; it says nothing about the key.)
            log.info("daemon accepts this agent's key now (it refused it: %s); saying hello "
                     "and resending pending results", self._key_refused)
            self._key_refused = None
            self._daemon_back(None)
        if kind == "heartbeat":
            inst = body.get("instance")
            if inst and self._daemon_instance and inst != self._daemon_instance and not was_gone:
                self._daemon_back("restarted")
            if inst:
                self._daemon_instance = inst
            self._learn_frames(body)
        elif kind == "ack":
            self._backoff_s = 0.0
            n = self.outbox.ack(body["ids"])
            log.debug("ack for %d ids (%d were pending)", len(body["ids"]), n)
            self._outbox_dirty = True
        elif kind == "error":
            if body["code"].startswith("key_"):
                # Every message is refused until the operator decides: say so once per change.
                if self._key_refused != body["code"]:
                    log.error("daemon refuses this agent's messages: %s (%s); results stay in "
                              "the outbox", body["message"], body["code"])
                self._key_refused = body["code"]
                self.stats["refused"] += 1
            elif body["code"] == "rate_limited":
                self._slow_down(now)
            elif body["code"] == "unknown_agent":
                if not was_gone:
                    self._daemon_back("does not know this agent")
            elif body.get("ref") in self._frames:
                self._frame_refused(self._frames.pop(body["ref"]), body["code"],
                                    body["message"])
            elif body["code"] == "too_large" and self._frames_max and not body.get("ref"):
                # refused unread, so unnamed: the frames are too large for this daemon after
                # all; their results are resent (singly) once stale
                self._frame_refused(None, body["code"], body["message"])
            elif body["code"] in PERMANENT_REFUSALS and body.get("ref") and \
                    self.outbox.reject(body["ref"], body["code"], body["message"]):
                self._daemon_refused_log.refused(
                    self.endpoint, body["code"], f"{body['ref'][:80]} for good: "
                    f"{body['message'][:500]}; kept in the outbox's rejected table, no longer "
                    "resent")
            elif body["code"] == "store_failed":
                # the daemon could not store a batch (its disk full?): the results stay in
                # the outbox and are resent; one line per 10 s however long it lasts
                self.stats["store_failed"] += 1
                if now - self._store_failed_logged >= 10.0:
                    self._store_failed_logged = now
                    log.warning("daemon could not store results (%s; %d times so far); they "
                                "stay in the outbox and are resent", body["message"],
                                self.stats["store_failed"])
            else:
                # a frame refused unread names no message (too_large: its hello, where the
                # daemon's max_message_bytes is below a hello's size): it said "None"
                ref = body.get("ref")
                self._daemon_refused_log.refused(
                    self.endpoint, body["code"],
                    f"{str(ref)[:80] if ref else 'a message it did not read'}: "
                    f"{body['message'][:500]}")
        elif kind == "resend":
            self._resend_rejected(msg)
        elif kind in ("job", "config", "cancel"):
            try:
                self.on_message(msg)
            except Exception as exc:
                log.exception("handling %s %s failed", kind, msg["id"])
                self._send(P.error_reply(self.agent_id, "internal",
                                         f"agent failed to handle {kind}: {exc}", msg["id"]))
        else:
            self._send(P.error_reply(self.agent_id, "unexpected_type",
                                     f"an agent does not accept '{kind}' messages", msg["id"]))
