"""systemd's readiness protocol (sd_notify(3)): a datagram of ``KEY=VALUE`` lines to the
socket named by $NOTIFY_SOCKET, which systemd sets for a ``Type=notify`` service. Without it
(started by hand, another init) nothing is sent. A path starting with ``@`` is in the abstract
namespace."""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``READY=1``); whether it was sent. Never raises: a manager that
    cannot be told is no reason to stop serving."""
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path or path[0] not in "/@":
        return False
    address = "\0" + path[1:] if path[0] == "@" else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall(state.encode())
    except OSError:
        return False
    return True
