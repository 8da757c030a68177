"""The daemon's record of agents' public keys and the operator's decisions about them.

A key the daemon has not seen is recorded as "pending" under the agent id it first spoke for;
only an "accepted" key's messages are handled, and only for that agent id. "rejected" and
"revoked" keys stay refused. The record is a JSON file (mode 0600) in the keys directory,
rewritten atomically on each change; it is read and changed from the daemon loop only.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..shared.curve import KeyFileError, fingerprint
from .errors import HandlerError

log = logging.getLogger("opptune.daemon.keys")

STATES = ("pending", "accepted", "rejected", "revoked")
# New keys beyond this many pending ones are refused unrecorded: a flood of made-up keys
# cannot grow the file or push a real board's key out of the list.
MAX_PENDING = 1000
ACTIONS = {"accept": "accepted", "reject": "rejected", "revoke": "revoked"}


class KeyRing:
    def __init__(self, path: Path, operator_key: str):
        self.path = path
        self.operator_key = operator_key
        self.keys: dict[str, dict[str, Any]] = {}  # public key (Z85) -> entry
        if path.exists():
            try:
                for e in json.loads(path.read_text()).get("keys", []):
                    self.keys[e["key"]] = e
            except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
                # refusing to start beats starting with an empty ring: every accepted board
                # would silently fall back to "pending"
                raise KeyFileError(
                    f"{path}: not a key ring opptune can read ({type(exc).__name__}: "
                    f"{str(exc)[:120]}); restore it from a backup, or move it away to start "
                    f"with no accepted keys (every agent then waits for 'opptune keys accept' "
                    f"again)") from None

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"keys": list(self.keys.values())}, fh, indent=1)
        os.replace(tmp, self.path)

    def check(self, key: str | None, agent: str, msg_type: str) -> None:
        """Refuse (HandlerError) a message of ``msg_type`` sent for ``agent`` over a
        connection authenticated with ``key`` unless the operator allowed it."""
        if key == self.operator_key:
            return
        if msg_type == "query":
            raise HandlerError("not_operator", "status and control queries are answered only "
                                               "for the operator's key or on a local socket")
        entry = self.keys.get(key) if key else None
        if entry is None:
            if not key or sum(e["state"] == "pending" for e in self.keys.values()) >= MAX_PENDING:
                raise HandlerError("key_pending", "too many keys wait for approval; the "
                                                  "operator must accept or reject some first")
            now = time.time()
            entry = {"id": fingerprint(key), "key": key, "agent": agent[:200], "state": "pending",
                     "first_seen": now, "updated": now}
            self.keys[key] = entry
            self._save()
            log.warning("new key %s of agent %r waits for approval: opptune keys accept %s",
                        entry["id"], entry["agent"], entry["id"])
        state = entry["state"]
        if state == "accepted":
            if entry["agent"] != agent:
                raise HandlerError("key_mismatch", f"key {entry['id']} was accepted for agent "
                                                   f"'{entry['agent']}', not '{agent[:80]}'")
            return
        if state == "pending":
            raise HandlerError("key_pending", f"this agent's key {entry['id']} waits for "
                                              f"approval; on the daemon's host run: opptune "
                                              f"keys accept {entry['id']}")
        raise HandlerError(f"key_{state}", f"this agent's key {entry['id']} was {state} by the "
                                           "operator; its messages are refused")

    def rows(self) -> list[dict[str, Any]]:
        return sorted((dict(e) for e in self.keys.values()), key=lambda e: e["first_seen"])

    def find(self, ref: str) -> dict[str, Any]:
        """The entry named by its id (or a unique prefix of at least 4 digits) or its agent id;
        HandlerError("bad_args") naming the choices otherwise."""
        ref = (ref or "").strip()
        hits = [e for e in self.keys.values() if e["id"] == ref]
        if not hits and len(ref) >= 4:
            hits = [e for e in self.keys.values() if e["id"].startswith(ref)]
        if not hits:
            hits = [e for e in self.keys.values() if e["agent"] == ref]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise HandlerError("bad_args", f"no key '{ref[:80]}'; 'opptune keys list' shows "
                                           "the ids")
        raise HandlerError("bad_args", f"'{ref[:80]}' names {len(hits)} keys "
                                       f"({', '.join(e['id'] for e in hits)}); give the id")

    def decide(self, action: str, ref: str) -> dict[str, Any]:
        """accept, reject or revoke one key; the changed entry."""
        if action not in ACTIONS:
            raise HandlerError("bad_args", f"unknown key action '{action[:40]}'; use list, "
                                           "accept, reject or revoke")
        entry = self.find(ref)
        entry["state"], entry["updated"] = ACTIONS[action], time.time()
        self._save()
        log.warning("key %s of agent %r %s by the operator", entry["id"], entry["agent"],
                    entry["state"])
        return dict(entry)
