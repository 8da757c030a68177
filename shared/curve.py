"""CURVE keys of the link: key files, the choice of when to encrypt, and key fingerprints.

A key pair is kept in one file, the public key (Z85, 40 characters) on the first line and the
secret key on the second, created with mode 0600. A key file readable or writable by anyone but
its owner is refused with the ``chmod`` that fixes it: a leaked secret key lets anyone speak as
that board or daemon. Public key files (``*.pub``) hold the first line only and may be readable
by all.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import zmq
from zmq.utils import z85

CURVE_CHOICES = ("auto", "on", "off")
Z85_KEY_LEN = 40


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names the file and the fix."""


def is_loopback(endpoint: str) -> bool:
    """True for endpoints that never leave this machine: ipc://, inproc://, tcp to 127.x,
    ::1 or localhost."""
    transport, _, address = endpoint.partition("://")
    if transport in ("ipc", "inproc"):
        return True
    if transport != "tcp":
        return False
    host = address.rpartition(":")[0].split(";")[-1]  # "src;dst" names the destination last
    host = host.strip("[]")
    return host.startswith("127.") or host in ("::1", "localhost")


def curve_enabled(setting: str, endpoint: str) -> bool:
    """Whether the link to/at ``endpoint`` is encrypted under ``setting`` (auto: every
    endpoint that is not loopback)."""
    if setting == "on":
        return True
    if setting == "off":
        return False
    return not is_loopback(endpoint)


def fingerprint(public_key: str | bytes) -> str:
    """A short id of a public key that operators read and type (12 hex digits)."""
    raw = public_key.encode() if isinstance(public_key, str) else public_key
    return hashlib.sha256(raw).hexdigest()[:12]


def _check_private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path}: key file has mode {mode:04o}, readable or writable by "
                           f"others; make it private with: chmod 600 {path}")


def _valid(key: str) -> bool:
    if len(key) != Z85_KEY_LEN:
        return False
    try:
        return len(z85.decode(key)) == 32
    except (ValueError, KeyError, TypeError):
        return False


def load_keypair(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(public, secret) from a key file, refusing one with wider permissions than 0600."""
    p = Path(path)
    try:
        _check_private(p)
        lines = p.read_text().split()
    except OSError as exc:
        raise KeyFileError(f"{p}: cannot read the key file: {exc.strerror}") from None
    if len(lines) != 2 or not all(_valid(k) for k in lines):
        raise KeyFileError(f"{p}: not a key file (two Z85 keys of 40 characters expected); "
                           "remove it and a new key pair is made at the next start")
    return lines[0], lines[1]


def ensure_keypair(path: str | os.PathLike[str]) -> tuple[str, str]:
    """Load the key pair at ``path``, creating it (mode 0600, directory 0700) if absent."""
    p = Path(path)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        public, secret = (k.decode() for k in zmq.curve_keypair())
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # made by a concurrent start: use that one
            return load_keypair(p)
        except OSError as exc:
            raise KeyFileError(f"{p}: cannot create the key file: {exc.strerror}") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{public}\n{secret}\n")
        public_file = p.with_suffix(".pub")
        tmp = public_file.with_suffix(".pub.tmp")
        tmp.write_text(public + "\n")
        os.replace(tmp, public_file)
    return load_keypair(p)


def read_public_key(value: str, where: str, base: str | None = None) -> str:
    """A public key given as Z85 text or as the path of a file holding it (first line; a
    relative path from ``base``, the configuration file's directory, where given);
    KeyFileError naming ``where`` otherwise."""
    text = value.strip()
    if _valid(text):
        return text
    p = Path(text).expanduser()
    if base and not p.is_absolute():
        p = Path(base) / p
    if not text:
        raise KeyFileError(f"{where} is empty")
    try:
        first = p.read_text().split()
    except OSError as exc:
        raise KeyFileError(f"{where}: {text!r} is neither a Z85 public key (40 characters) nor "
                           f"a readable file ({exc.strerror})") from None
    if not first or not _valid(first[0]):
        raise KeyFileError(f"{where}: {p} does not start with a Z85 public key")
    return first[0]
