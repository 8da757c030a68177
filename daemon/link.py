"""The daemon's end of the link: one ROUTER socket that every agent's DEALER connects to.

``recv``/``recv_batch`` hand out ``(identity, message)`` pairs of validated messages only; a
frame that fails validation is answered with an ``error`` to its sender, logged, and skipped.
``ROUTER_MANDATORY`` makes a send to a vanished peer raise instead of vanishing silently; ``send``
catches that and returns False.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import Any, Callable

import msgpack
import zmq

from ..shared import protocol
from ..shared.curve import is_loopback
from ..shared.protocol import ProtocolError
from ..shared.refusals import RefusalLog

log = logging.getLogger("opptune.daemon.link")


class RateLimiter:
    """A token bucket per peer: ``rate`` messages per second on average, ``burst`` at once.

    Checked before a frame is decoded, so a flooding peer costs the loop a dict lookup per
    frame, not a msgpack decode and validation."""

    def __init__(self, rate: float, burst: int, max_peers: int = 100_000,
                 clock: Callable[[], float] = time.monotonic):
        self.rate = float(rate)
        self.burst = float(burst)
        self.max_peers = max_peers  # bounds memory when every frame names a new peer
        self.clock = clock
        self._buckets: dict[bytes, list[float]] = {}  # peer -> [tokens, last refill]

    def allow(self, peer: bytes) -> bool:
        now = self.clock()
        b = self._buckets.get(peer)
        if b is None:
            if len(self._buckets) >= self.max_peers:
                self._buckets.clear()
            b = self._buckets[peer] = [self.burst, now]
        else:
            b[0] = min(self.burst, b[0] + (now - b[1]) * self.rate)
            b[1] = now
        if b[0] >= 1.0:
            b[0] -= 1.0
            return True
        return False

    def charge(self, peer: bytes, n: float) -> None:
        """Take ``n`` more tokens from a peer whose frame ``allow`` let in and that held more
        than one message (a ``results`` frame's items). The bucket may go below zero: the
        peer's next frames wait until the rate has paid the debt, so items count as messages
        while a frame larger than the burst still gets in."""
        b = self._buckets.get(peer)
        if b is not None:
            b[0] -= n


def _peer_address(frame: Any) -> str | None:
    """The sending peer's IP address as libzmq reports it (None where it cannot)."""
    try:
        return frame.get("Peer-Address")
    except (zmq.ZMQError, AttributeError):
        return None


class Link:
    """A bound ROUTER socket. Not thread-safe: use it from the service loop only."""

    def __init__(self, bind: str, context: zmq.Context | None = None, sndhwm: int = 100_000,
                 curve: tuple[str, str] | None = None,
                 max_message_bytes: int = protocol.MAX_MESSAGE_BYTES,
                 rate: float = 0.0, burst: int = 0, stats: dict[str, int] | None = None):
        """``curve``: the server's (public, secret) key: peers must complete a CURVE handshake
        and each message's sender key is kept in ``peer_keys`` (identity -> Z85 key); the
        context must run a ZAP authenticator that sets the User-Id to that key.

        ``max_message_bytes``: larger frames are refused unread (``too_large``); ``rate`` and
        ``burst`` (> 0): each peer's token bucket, over it a frame is refused unread
        (``rate_limited``, the sender keeps it and resends later). Refusals are counted in
        ``stats`` ("refused", "refused_too_large", "refused_rate_limited")."""
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.curve = curve is not None
        self.peer_keys: dict[bytes, str] = {}
        # Plain TCP on an address other machines reach: each peer's address is kept, so that
        # queries from a non-loopback one can be refused (daemon/queries.py, check_local).
        self.peer_addrs: dict[bytes, str | None] | None = (
            {} if curve is None and not is_loopback(bind) else None)
        if curve is not None:
            self.sock.curve_server = True
            self.sock.curve_publickey = curve[0].encode()
            self.sock.curve_secretkey = curve[1].encode()
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.max_message_bytes = max_message_bytes
        # libzmq drops the connection above this; below it the sender gets a readable error
        self.sock.setsockopt(zmq.MAXMSGSIZE, 8 * max_message_bytes)
        self.sock.setsockopt(zmq.SNDHWM, sndhwm)
        self.sock.setsockopt(zmq.RCVHWM, sndhwm)
        # A send to a peer over its HWM must not block the loop: it fails and is logged.
        self.sock.setsockopt(zmq.SNDTIMEO, 0)
        try:
            self.sock.bind(bind)
        except zmq.ZMQError:
            # an open socket keeps its context's term() waiting: a daemon with CURVE on (a
            # context of its own) hung silently on a port in use instead of saying so
            self.sock.close(0)
            raise
        self.endpoint: str = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._enveloped: set[bytes] = set()  # REQ peers: replies need the empty delimiter
        self.refusals = RefusalLog(log)  # every refusal of the daemon, counted by code
        self.limiter = RateLimiter(rate, burst) if rate > 0 and burst > 0 else None
        self.stats = stats if stats is not None else {}
        for key in ("refused", "refused_too_large", "refused_rate_limited"):
            self.stats.setdefault(key, 0)
        self._limited_reply: dict[bytes, float] = {}  # peer -> when it was last told
        # Acks carry ids the loop just validated: they are packed directly, without the
        # generic make/validate path (one ack per agent per batch: 500 agents, 500 acks).
        # Their own ids are this link's random prefix and a counter: unique, no syscall each.
        self._ack_prefix = os.urandom(6).hex()
        self._ack_count = itertools.count()
        self._pack = msgpack.Packer(use_bin_type=True).pack

    @property
    def refused(self) -> int:
        """Messages answered with an error."""
        return self.refusals.total

    def poll(self, timeout_ms: int) -> bool:
        """True when a message is waiting (after at most ``timeout_ms``)."""
        return bool(self.sock.poll(timeout_ms, zmq.POLLIN))

    def recv(self, timeout_ms: int | None = None) -> tuple[bytes, dict[str, Any]] | None:
        """One valid message, or None when none arrived in time (or the one that did was
        refused)."""
        if timeout_ms is not None and not self.poll(timeout_ms):
            return None
        got = self.recv_batch(1)
        return got[0] if got else None

    def recv_batch(self, max_n: int) -> list[tuple[bytes, dict[str, Any]]]:
        """Drain frames without blocking until they hold ``max_n`` messages (a ``results``
        frame counts its items: at most MAX_RESULTS_ITEMS - 1 more); return the valid ones."""
        out = []
        n = 0
        recv = self.sock.recv
        decode = protocol.decode
        noblock = int(zmq.NOBLOCK)
        limiter = self.limiter
        max_bytes = self.max_message_bytes
        # Without CURVE and on loopback no frame's metadata is read: frames come as bytes
        # (copy=True, no Frame object each) and one RCVMORE look-up per message tells a
        # REQ envelope or extra frames apart (8,192 messages: 1.2-1.4 against 1.4-1.8 us).
        plain = not self.curve and self.peer_addrs is None
        more = self.sock.get
        rcvmore = int(zmq.RCVMORE)
        while n < max_n:
            n += 1
            if plain:
                try:
                    # a ROUTER's identity frame is always followed by the message's frames
                    frames = [recv(noblock), recv(noblock)]
                except zmq.Again:
                    break
                while more(rcvmore):
                    frames.append(recv(noblock))
            else:
                try:
                    frames = self._recv_noting_peer()
                except zmq.Again:
                    break
            if len(frames) == 2:
                identity, data = frames
            elif len(frames) == 3 and frames[1] == b"":
                identity, data = frames[0], frames[2]
                self._enveloped.add(identity)
            else:
                self._refuse(frames[0], ProtocolError(
                    "bad_frame", f"expected one message frame, got {len(frames) - 1}"))
                continue
            # Limits first, on the frame's length and the sender's identity only: neither a
            # huge frame nor a flood is ever unpacked.
            if limiter is not None and not limiter.allow(identity):
                self._rate_limited(identity)
                continue
            if len(data) > max_bytes:
                self.stats["refused_too_large"] += 1
                self._refuse(identity, ProtocolError(
                    "too_large", f"message of {len(data)} bytes exceeds the daemon's limit of "
                                 f"{max_bytes} bytes (max_message_bytes)"))
                continue
            try:
                msg = decode(data)
            except ProtocolError as exc:
                self._refuse(identity, exc)
                continue
            if msg["type"] == "results":
                items = len(msg["body"]["items"]) - 1
                n += items
                if limiter is not None:
                    limiter.charge(identity, items)
            out.append((identity, msg))
        return out

    def _recv_noting_peer(self) -> list[bytes]:
        """One message's frames, noting the sender's CURVE key or address from the last
        frame's metadata (zmq.Again when none is waiting)."""
        recv, noblock = self.sock.recv, int(zmq.NOBLOCK)
        # Frames received one by one with copy=False: their ``more`` flag is free, where
        # recv_multipart asks the socket for RCVMORE per frame (measured 3.4-4.9 -> 2.4 us).
        frame = recv(noblock, copy=False)
        frames = [frame.bytes]
        while frame.more:
            frame = recv(noblock, copy=False)
            frames.append(frame.bytes)
        if self.curve:
            # the key that authenticated this connection, as the ZAP handler named it
            if len(self.peer_keys) >= 100_000 and frames[0] not in self.peer_keys:
                self.peer_keys.clear()
            self.peer_keys[frames[0]] = frame.get("User-Id")
        elif self.peer_addrs is not None:
            if len(self.peer_addrs) >= 100_000 and frames[0] not in self.peer_addrs:
                self.peer_addrs.clear()
            self.peer_addrs[frames[0]] = _peer_address(frame)
        return frames

    def _rate_limited(self, identity: bytes) -> None:
        """Count and log (bounded) a frame over its sender's rate; tell the sender at most
        every 50 ms so that answering a flood does not become one."""
        self.stats["refused"] += 1
        self.stats["refused_rate_limited"] += 1
        self.refusals.refused(identity, "rate_limited", "over its message rate (rate_limit_"
                                                         "per_s/rate_limit_burst); not read")
        now = time.monotonic()
        if now - self._limited_reply.get(identity, 0.0) < 0.05:
            return
        if len(self._limited_reply) >= 100_000:
            self._limited_reply.clear()
        self._limited_reply[identity] = now
        self.send(identity, protocol.error_reply(
            "daemon", "rate_limited", "too many messages: slow down and resend later", None),
            quiet=True)

    def _refuse(self, identity: bytes, exc: ProtocolError) -> None:
        self.stats["refused"] += 1
        self.refusals.refused(identity, exc.code, str(exc))
        self.send(identity, protocol.error_reply("daemon", exc.code, str(exc), exc.ref),
                  quiet=True)

    def send(self, identity: bytes, msg: dict[str, Any], quiet: bool = False) -> bool:
        """Send to one peer; False (logged) when the peer is gone or not keeping up.
        ``quiet``: a refusal's answer, whose failure is not logged (the refusal is, at a
        bounded rate; a peer that floods and hangs up must not cost a line per frame)."""
        try:
            data = protocol.encode(msg)
        except ProtocolError as exc:
            log.error("not sending an invalid %s message: %s", msg.get("type"), exc)
            return False
        return self.send_encoded(identity, data, msg.get("type"), quiet)

    def send_ack(self, identity: bytes, ids: list[str], agent: str = "daemon") -> bool:
        """Acknowledge ``ids`` (validated message ids) to one peer; False when it is gone or
        not keeping up. The frame is the one ``send`` would build for an ``ack``."""
        data = self._pack({"v": protocol.PROTOCOL_VERSION, "type": "ack",
                           "id": f"{self._ack_prefix}{next(self._ack_count):020x}",
                           "ts": time.time(), "agent": agent, "body": {"ids": ids}})
        return self.send_encoded(identity, data, "ack")

    def send_encoded(self, identity: bytes, data: bytes, what: Any,
                     quiet: bool = False) -> bool:
        """Send an encoded message (``what``: its type, for the log) to one peer; False when
        it is gone or not keeping up (logged unless ``quiet``)."""
        frames = [identity, b"", data] if identity in self._enveloped else [identity, data]
        try:
            self.sock.send_multipart(frames, zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: peer gone; EAGAIN: peer's queue is full
            if not quiet:
                log.warning("cannot send %s to %r: %s", what, identity, exc)
            return False

    def close(self) -> None:
        self.sock.close(linger=0)
