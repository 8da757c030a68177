"""Whether the host of a daemon endpoint resolves. ZeroMQ resolves it at each reconnect and
says nothing when it cannot, so an agent given a misspelt host name (walking a board:
``tcp://nosuchhost.invalid:5555``) heard nothing, and its warning told to check that the
daemon runs there. Each endpoint is looked up once, off the link's thread (a slow resolver
delays no heartbeat); the link's warning that the daemon is gone names a failure."""

from __future__ import annotations

import ipaddress
import socket
import threading


def host_of(endpoint: str) -> str | None:
    """The host name of a ``tcp://`` endpoint; None for an address, a wildcard or another
    transport (nothing to resolve)."""
    if not endpoint.startswith("tcp://"):
        return None
    rest = endpoint[len("tcp://"):].rsplit(";", 1)[-1]  # "iface;host:port": the peer
    host = rest.rsplit(":", 1)[0].strip("[]")
    if not host or host == "*":
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    return None


class HostLookup:
    """One lookup per endpoint, each in a thread of its own; :meth:`failure` says what the
    finished one found wrong (None: it resolved, it is under way, or there is no name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[str, str | None] = {}

    def start(self, endpoint: str) -> None:
        host = host_of(endpoint)
        with self._lock:
            if host is None or endpoint in self._failures:
                return
            self._failures[endpoint] = None
        threading.Thread(target=self._look, args=(endpoint, host), daemon=True,
                         name="host-lookup").start()

    def _look(self, endpoint: str, host: str) -> None:
        try:
            socket.getaddrinfo(host, None)
        except OSError as exc:
            with self._lock:
                self._failures[endpoint] = (f"its host {host} does not resolve "
                                            f"({exc.strerror or exc})")

    def failure(self, endpoint: str) -> str | None:
        with self._lock:
            return self._failures.get(endpoint)
