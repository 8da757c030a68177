"""The operator's side of the link: which daemon to ask (``daemon_endpoint``, with the operator
key where CURVE is on), a query to it, and its reply."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from typing import Any, Callable

import zmq

from ..shared import protocol as P
from ..shared.config import (DEFAULT_DAEMON_CONFIG, ConfigError, endpoint_problem,
                             load_daemon_config)
from ..shared.curve import curve_enabled


class DaemonUnreachable(RuntimeError):
    """No reply from the daemon within the timeout. ``reached``: the connection was made and
    the query went out, so the daemon may act on it still (a busy one answers late).
    ``again``: why the daemon, asked again about a change request, could not answer it."""

    def __init__(self, message: str, reached: bool = False, again: str | None = None):
        super().__init__(message)
        self.reached = reached
        self.again = again


class QueryFailed(RuntimeError):
    """The daemon answered the query with an error message; ``code`` says which."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


class BadEndpoint(ValueError):
    """The endpoint is not one ZeroMQ can connect to (e.g. no ``tcp://``)."""


# Refusals caused by what the operator asked (exit 2), not by the daemon's state.
WAIT_NOTE_S = 5.0  # a longer wait says so after this long: the daemon may not be running
USER_ERRORS = {"bad_args", "unknown_agent", "unknown_workload", "unknown_size",
               "unknown_query", "no_measurements", "no_power", "curve_off"}

# (server public, own public, own secret) Z85 keys for queries to a daemon with CURVE on; set
# by the operator tool from the daemon's keys directory (see use_curve)
_CURVE: tuple[str, str, str] | None = None


def use_curve(keys: tuple[str, str, str] | None) -> None:
    """Make this process's queries use CURVE with these keys (None: plain)."""
    global _CURVE
    _CURVE = keys


def daemon_endpoint(args: Any) -> str:
    """The daemon's endpoint; with CURVE on for the configuration's bind, this process's
    queries use the operator key from the daemon's keys directory."""
    _PROBED.clear()  # a new command: what an earlier one probed is no news
    config = load_daemon_config(args.config)
    if curve_enabled(config.curve, config.bind):
        _use_operator_key(config)
    if args.daemon:
        return args.daemon
    # A daemon bound to every interface is reached on loopback from the same machine.
    endpoint = config.bind.replace("0.0.0.0", "127.0.0.1").replace("*", "127.0.0.1")
    probed = False
    if not args.config and not DEFAULT_DAEMON_CONFIG.exists():
        if _refused(endpoint):
            # nothing said where the daemon is and nothing listens where it is assumed:
            # waiting for an answer there would only be silent until the timeout
            raise ConfigError(f"no daemon listens at {config.bind}, the default endpoint (no "
                              f"--config given and no {DEFAULT_DAEMON_CONFIG}): give the "
                              "daemon's configuration (--config daemon.toml, on its host) or "
                              "its endpoint (--daemon tcp://HOST:PORT)")
        probed = True
    if re.search(r":0/?$", config.bind):
        # the daemon took some free port, which only it knows: waiting on port 0 never ends
        # in an answer
        raise ConfigError(f"{args.config or DEFAULT_DAEMON_CONFIG}: bind {config.bind} asks for "
                          "a free port, so the daemon's port is not in the file: give --daemon "
                          "tcp://HOST:PORT (its log's 'listening on' line, or its "
                          "--endpoint-file)")
    if probed:
        _PROBED.add(endpoint)  # the command's first query need not connect again
    return endpoint


# Endpoints daemon_endpoint has just found listening: the next first query to one of them
# skips its own probe (taken once, so a later command's query probes afresh)
_PROBED: set[str] = set()


def _take_probe(endpoint: str) -> bool:
    """True (once) where daemon_endpoint has just found ``endpoint`` listening."""
    found = endpoint in _PROBED
    _PROBED.discard(endpoint)
    return found


def _refused(endpoint: str, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to ``endpoint`` (tcp://HOST:PORT) is refused at once: no
    process listens there. Anything else (it listens, a timeout, another transport) is left
    to the query."""
    m = re.fullmatch(r"tcp://\[?([^\]]+?)\]?:(\d+)", endpoint)
    if not m:
        return False
    try:
        with socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False


def _use_operator_key(config: Any) -> None:
    from ..shared.curve import KeyFileError, load_keypair, read_public_key
    keys = config.keys_path()
    if not (keys / "server.pub").exists():
        raise ConfigError(f"CURVE is on for {config.bind} but {keys / 'server.pub'} does not "
                          "exist: start opptune-daemon first (it makes its keys there), and run "
                          "this on the daemon's host as its user")
    try:
        server = read_public_key(str(keys / "server.pub"), "the daemon's public key")
        public, secret = load_keypair(keys / "operator.key")
    except KeyFileError as exc:
        raise ConfigError(f"CURVE is on for {config.bind} and the operator key is needed: {exc} "
                          f"(run this as the daemon's user, on its host; keys_dir = {keys})"
                          ) from None
    use_curve((server, public, secret))


def waiting_note(command: str, endpoint: str, timeout_s: float) -> Callable[[], None]:
    """:func:`query`'s ``on_wait`` for an operator command: one line saying it still waits."""
    def note() -> None:
        print(f"{command}: no answer from the daemon at {endpoint} yet; waiting up to "
              f"{timeout_s:g} s (--timeout; Ctrl-C stops)", file=sys.stderr, flush=True)
    return note


def again_note(command: str, endpoint: str, timeout_s: float) -> Callable[[], None]:
    """:func:`query`'s ``on_again`` for an operator command: one line saying it asks again."""
    def note() -> None:
        print(f"{command}: no answer from the daemon at {endpoint} within {timeout_s:g} s; "
              "asking it once more about the same request, which it carries out once however "
              "often it is asked", file=sys.stderr, flush=True)
    return note


def ask(command: str, endpoint: str, what: str, args: dict[str, Any] | None = None,
        timeout_s: float = 5.0, changes: str | None = None) -> tuple[Any, int | None]:
    """:func:`query` for an operator command: (data, None), or (None, exit code) after one
    line on stderr that names ``command``: 2 for a bad endpoint or timeout and for refusals
    caused by what was asked (USER_ERRORS), 1 when the daemon does not answer or refuses.

    ``changes``, for a request that changes something: how to see whether it was carried out
    and whether asking again is safe. Such a request that reached the daemon unanswered is
    asked about once more (the ``again`` query: the daemon answers it as it answered the
    first, never carrying it out twice), over the same connection to the same daemon: never
    to another daemon of a fleet, which does not know what this one was asked. Where that
    gets no answer either, the line says it may have been carried out and names ``changes``."""
    if not timeout_s > 0:  # zmq's poll waits forever on a negative timeout
        print(f"{command}: --timeout {timeout_s:g}: give a number of seconds > 0",
              file=sys.stderr)
        return None, 2
    try:
        return query(endpoint, what, args, timeout_s=timeout_s, first=True,
                     on_wait=waiting_note(command, endpoint, timeout_s),
                     on_again=again_note(command, endpoint, timeout_s) if changes else None
                     ), None
    except BadEndpoint as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None, 2
    except DaemonUnreachable as exc:
        if changes and exc.reached:
            why = f" (asked again, {exc.again})" if exc.again else ""
            print(f"{command}: no answer from the daemon at {endpoint} within {timeout_s:g} s, "
                  "but the request reached it and may have been carried out (a busy daemon "
                  f"answers late): {changes}{why}", file=sys.stderr)
        else:
            print(f"{command}: {exc}", file=sys.stderr)
        return None, 1
    except QueryFailed as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None, 2 if getattr(exc, "code", None) in USER_ERRORS else 1


def query(endpoint: str, what: str, args: dict[str, Any] | None = None,
          timeout_s: float = 5.0, context: zmq.Context | None = None,
          curve: tuple[str, str, str] | None = None,
          on_wait: Callable[[], None] | None = None, first: bool = False,
          on_again: Callable[[], None] | None = None) -> dict[str, Any]:
    """Send one ``query`` to the daemon at ``endpoint`` and return the reply's data;
    ``curve`` (default: what use_curve set) = (server public, own public, own secret).
    ``on_wait`` is called once when no answer came within WAIT_NOTE_S of a longer timeout
    (a daemon that is not running is otherwise silent until the timeout). ``first``: a
    command's first query, which fails at once where a TCP endpoint refuses the connection
    (a follower's queries wait out a daemon that restarts instead). ``on_again``, for a change
    request: where it reached the daemon and no answer came within the timeout, the daemon
    is asked about it once more (``again``, same connection) and waited for as long again;
    ``on_again`` is called as that goes out."""
    problem = endpoint_problem(endpoint)
    if problem:  # libzmq would take tcp://host:99999 as port 34463, and 'host' as nothing
        raise BadEndpoint(f"{problem}")
    if first and not _take_probe(endpoint) and _refused(endpoint, min(1.0, timeout_s)):
        # the query would be silent for the whole timeout: nothing listens to take it
        raise DaemonUnreachable(f"no daemon listens at {endpoint} (the connection was "
                                "refused): check that opptune-daemon runs on that host and "
                                "that the port is its log's 'listening on' one")
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    keys = curve if curve is not None else _CURVE
    if keys is not None:
        sock.curve_serverkey = keys[0].encode()
        sock.curve_publickey = keys[1].encode()
        sock.curve_secretkey = keys[2].encode()
    # the daemon remembers a change request's answer under this identity: asked again over
    # this socket, it recognises the request
    operator = f"operator-{os.getpid()}-{os.urandom(4).hex()}"
    sock.setsockopt(zmq.IDENTITY, operator.encode())
    sock.setsockopt(zmq.LINGER, 0)
    # whether the query left: a timeout after the handshake may be a daemon that acts late,
    # one before it is a daemon that never saw the query (none there, a wrong key)
    handshakes = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        try:
            sock.connect(endpoint)
        except zmq.ZMQError:
            raise BadEndpoint(f"'{endpoint}' is not a valid daemon endpoint; give one such as "
                              "tcp://HOST:5555 or ipc:///run/opptune.sock") from None
        body: dict[str, Any] = {"what": what}
        if args:
            body["args"] = args
        msg = P.make("query", operator, body)
        sock.send(P.encode(msg))
        start = time.monotonic()
        note_at = start + WAIT_NOTE_S if on_wait and timeout_s > WAIT_NOTE_S else None
        found = _await(sock, msg["id"], None, start + timeout_s, note_at, on_wait)
        if found is None and on_again is not None and handshakes.poll(0):
            # Only this daemon knows what it was asked: another of a fleet (which it does not
            # tell) would carry the request out a second time, so none is asked
            again = P.make("query", operator, {"what": "again", "args": {"request": msg["id"]}})
            sock.send(P.encode(again))
            on_again()
            found = _await(sock, msg["id"], again["id"], time.monotonic() + timeout_s,
                           None, None)
        if found is not None:
            return found
        raise DaemonUnreachable(f"no answer from the daemon at {endpoint} within {timeout_s:g} s; "
                                "is opptune-daemon running and is the endpoint right? (with CURVE "
                                "on it answers only its operator key: give its --config)",
                                reached=bool(handshakes.poll(0)))
    finally:
        sock.disable_monitor()
        handshakes.close(0)
        sock.close(0)


# refusals of an 'again' that say the daemon cannot tell whether it carried the request out
_AGAIN_UNKNOWN = {
    "unknown_query": "the daemon did not recognise it: it is older than this opptune and "
                     "cannot tell a request sent again from a new one",
    "unknown_request": "the daemon did not know it: {message}",
}


def _await(sock: zmq.Socket, ref: str, again: str | None, deadline: float,
           note_at: float | None, on_wait: Callable[[], None] | None) -> dict[str, Any] | None:
    """The data of the reply to query ``ref`` (or to ``again``, the query asking about it
    once more) that arrives before ``deadline``; None when none did. QueryFailed for a
    refusal; DaemonUnreachable where the daemon refuses ``again`` without knowing ``ref``."""
    while True:
        now = time.monotonic()
        if now >= deadline:
            return None
        until = deadline if note_at is None else min(deadline, note_at)
        if not sock.poll(max(1, int((until - now) * 1000))):
            if note_at is not None and on_wait is not None and time.monotonic() >= note_at:
                note_at = None
                on_wait()
            continue
        try:
            reply = P.decode(sock.recv(), P.MAX_REPLY_BYTES)
        except P.ProtocolError:
            continue
        got = reply["body"].get("ref")
        if reply["type"] == "reply" and got in (ref, again):
            return reply["body"]["data"]
        if reply["type"] != "error":
            continue
        code, message = reply["body"].get("code"), reply["body"]["message"]
        if again is not None and got == again and code in _AGAIN_UNKNOWN:
            raise DaemonUnreachable(message, reached=True,
                                    again=_AGAIN_UNKNOWN[code].format(message=message))
        if got in (ref, again, None):  # an 'again' refused as the request was
            raise QueryFailed(f"daemon refused the query: {message}", code)
