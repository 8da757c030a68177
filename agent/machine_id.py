"""Which machine and which boot the agent runs on, as its hello tells the daemon: two boards
of one agent id and one platform are then two boards, not one agent restarting
(daemon/registry.py).

The machine id is confidential (machine-id(5)): the hello carries its application-specific
form, derived as sd_id128_get_machine_app_specific(3) does (HMAC-SHA256 keyed by the id, of
opptune's application id, the first 128 bits made a version-4 UUID), which no other
application's id can be matched with. The boot id is sent the same way
(sd_id128_get_boot_app_specific): it parts two boards of one cloned SD-card image, whose
machine ids are the same, while both run. Both files are read under the agent's
``sysfs_root``; one absent, empty or not an id (a container, a fake tree, an image prepared
for cloning) gives nothing for its part.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid

# opptune's application id: fixed, so a board's hashed ids stay the same across agents
APP_ID = uuid.UUID("c3ee54fc-e144-4e63-94af-7373b111b450")
FILES = {"machine": "etc/machine-id", "boot": "proc/sys/kernel/random/boot_id"}


def app_specific(id128: uuid.UUID, app: uuid.UUID = APP_ID) -> str:
    """``id128`` made specific to ``app``, as 32 hex digits (systemd-id128 --app-specific)."""
    b = bytearray(hmac.new(id128.bytes, app.bytes, hashlib.sha256).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return b.hex()


def _id128(path: str) -> uuid.UUID | None:
    """The 128-bit id in ``path``; None where the file is missing or holds none (systemd
    writes "uninitialized" before its first boot completes, and never uses the null id)."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read(100).strip()
    except OSError:
        return None
    try:
        value = uuid.UUID(text)
    except ValueError:
        return None
    return value if value.int else None


def machine_identity(root: str) -> dict[str, str]:
    """{"machine": ..., "boot": ...}, each the hashed id of that file under ``root``; a part
    whose file gives no id is left out."""
    out = {}
    for part, rel in FILES.items():
        value = _id128(os.path.join(root or "/", rel))
        if value is not None:
            out[part] = app_specific(value)
    return out
