"""The daemon's record of agents' public keys and the operator's decisions about them.

A key the daemon has not seen is recorded as "pending" under the agent id it first spoke for;
only an "accepted" key's messages are handled, and only for that agent id. "rejected" and
"revoked" keys stay refused. The record is a JSON file (mode 0600) in the keys directory,
rewritten atomically on each change; it is read and changed from the daemon loop only.

Several daemons may share the keys directory (README, "Fleets"): each re-reads the file when it
has changed (looked at no more than once a second on the message path, always before an
operator's command), and each change is merged into what the file holds under an exclusive
lock, so one daemon's write never undoes another's decision.
"""

from __future__ import annotations

import fcntl
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
# how stale the ring may be on the message path: another daemon's accept arrives within this
RELOAD_S = 1.0


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What tells that the file changed: another daemon's replace (a new inode), a write."""
    return st.st_ino, st.st_mtime_ns, st.st_size


class KeyRing:
    def __init__(self, path: Path, operator_key: str):
        self.path = path
        self.operator_key = operator_key
        self.keys: dict[str, dict[str, Any]] = {}  # public key (Z85) -> entry
        self._stamp: tuple[int, int, int] | None = None  # the file as last read or written
        self._looked = time.monotonic()
        # refusing to start beats starting with an empty ring: every accepted board would
        # silently fall back to "pending"
        self.keys, self._stamp = self._read()

    def _read(self) -> tuple[dict[str, dict[str, Any]], tuple[int, int, int] | None]:
        """The file's entries and its stamp; KeyFileError naming it if it cannot be read."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            raise self._unreadable(exc) from None
        try:
            keys = {e["key"]: e for e in json.loads(self.path.read_text()).get("keys", [])}
        except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
            raise self._unreadable(exc) from None
        return keys, _stamp(st)

    def _unreadable(self, exc: Exception) -> KeyFileError:
        return KeyFileError(
            f"{self.path}: not a key ring opptune can read ({type(exc).__name__}: "
            f"{str(exc)[:120]}); restore it from a backup, or move it away to start with no "
            f"accepted keys (every agent then waits for 'opptune keys accept' again)")

    def refresh(self, force: bool = False) -> None:
        """Take in what another daemon sharing the file decided (at most once per RELOAD_S
        unless ``force``). A file that cannot be read now keeps the ring as it is: logged,
        never raised into the loop."""
        now = time.monotonic()
        if not force and now - self._looked < RELOAD_S:
            return
        self._looked = now
        try:
            stamp = _stamp(self.path.stat())
        except OSError:
            return
        if stamp == self._stamp:
            return
        try:
            self.keys, self._stamp = self._read()
        except KeyFileError as exc:
            log.warning("key ring not re-read, the last one read stays in use: %s", exc)

    def _save(self, entry: dict[str, Any], new: bool = False) -> dict[str, Any]:
        """Write ``entry``'s change merged into the file's current entries, under a lock that
        the other daemons sharing the file take too; the entry as stored. A ``new`` (pending)
        entry never replaces one the file already holds: another daemon may have decided it."""
        lock = os.open(self.path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                keys, _ = self._read()
            except KeyFileError as exc:
                # never write over a ring that cannot be read: the operator restores it
                log.error("key ring not written: %s", exc)
                raise HandlerError("internal", f"the daemon's key ring cannot be read: "
                                               f"{exc}") from None
            if new and entry["key"] in keys:
                entry = keys[entry["key"]]
            keys[entry["key"]] = entry
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"keys": list(keys.values())}, fh, indent=1)
            os.replace(tmp, self.path)
            self.keys, self._stamp = keys, _stamp(self.path.stat())
        finally:
            os.close(lock)
        return entry

    def check(self, key: str | None, agent: str, msg_type: str) -> None:
        """Refuse (HandlerError) a message of ``msg_type`` sent for ``agent`` over a
        connection authenticated with ``key`` unless the operator allowed it."""
        if key == self.operator_key:
            return
        self.refresh()
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
            entry = self._save(entry, new=True)
            if entry["state"] == "pending":
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

    def refusal_of(self, agent: str) -> str | None:
        """Why ``agent``'s messages are refused (its newest key not accepted), with the
        command that lets it in; None when its key is accepted or unknown."""
        mine = [e for e in self.keys.values() if e["agent"] == agent]
        if not mine:
            return None
        entry = max(mine, key=lambda e: e["updated"])
        if entry["state"] == "accepted":
            return None
        return (f"its key {entry['id']} is {entry['state']}"
                f"{'' if entry['state'] == 'pending' else ' by the operator'}, so the daemon "
                f"refuses its messages; 'opptune keys accept {entry['id']}' lets it in")

    def rows(self) -> list[dict[str, Any]]:
        self.refresh(force=True)
        return sorted((dict(e) for e in self.keys.values()), key=lambda e: e["first_seen"])

    def find(self, ref: str) -> dict[str, Any]:
        """The entry named by its id (or a unique prefix of at least 4 digits) or its agent id;
        HandlerError("bad_args") naming the choices otherwise."""
        ref = (ref or "").strip()
        self.refresh(force=True)
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
        entry = self._save({**entry, "state": ACTIONS[action], "updated": time.time()})
        log.warning("key %s of agent %r %s by the operator", entry["id"], entry["agent"],
                    entry["state"])
        return dict(entry)


def refused_keys(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of the ring's ``rows``, the rejected and revoked keys that are still their agent's
    newest (an agent whose newer key was accepted is let in), oldest first."""
    newest: dict[str, dict[str, Any]] = {}
    for e in rows:
        if e["agent"] not in newest or e["updated"] >= newest[e["agent"]]["updated"]:
            newest[e["agent"]] = e
    return sorted((e for e in newest.values() if e["state"] in ("rejected", "revoked")),
                  key=lambda e: e["first_seen"])
