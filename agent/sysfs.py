"""One gate to /sys and /proc.

Every read and write of kernel files in the agent goes through :class:`SysFS`, rooted at a
configurable directory. On a board the root is ``/``; tests and the virtual board point it at a
fake tree. Paths are given as absolute kernel paths ("/sys/devices/system/cpu/online") or
relative ones; both are resolved under the root.
"""

from __future__ import annotations

import errno
import os
from typing import Callable

from ..shared.cpus import parse_cpu_list

# Write drivers by root: ``attach(fs)`` sets the ``before_write``/``after_write`` of every SysFS
# opened on that root in this process. A tree that is not the kernel's has no kernel reacting
# to writes; whoever serves it (chosen by configuration) registers the emulation here.
_DRIVERS: dict[str, Callable[["SysFS"], None]] = {}


def register_driver(root: str, attach: Callable[["SysFS"], None]) -> None:
    """Emulate the kernel's reaction to writes under ``root`` (not ``/``) in this process."""
    root = os.path.abspath(root)
    if root == "/":
        raise ValueError("the real / has a kernel: it takes no write driver")
    _DRIVERS[root] = attach


def tree_problem(root: str) -> str | None:
    """Why ``root`` cannot be read as a board's /sys and /proc (None: it can): a directory
    that is not there, or one that holds neither, would read as a board of 0 cpus with
    nothing to warn about."""
    if not os.path.isdir(root):
        return "no such directory"
    if not any(os.path.isdir(os.path.join(root, d)) for d in ("sys", "proc")):
        return "holds no sys/ or proc/"
    return None


class KnobUnavailable(OSError):
    """A kernel file that is absent, unreadable or refuses a write; the message names the path."""

    def __init__(self, path: str, reason: str, err: int | None = None):
        super().__init__(err if err is not None else errno.ENOENT, f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class SysFS:
    """Reads and writes kernel files under ``root``.

    ``write_log`` (when a list) receives ``(path, value)`` for every successful write, in order:
    tests use it to check the write order of frequency limits.
    """

    def __init__(self, root: str = "/", write_log: list | None = None):
        self.root = os.path.abspath(root or "/")
        self.write_log = write_log
        self.before_write = None  # callable(rel, data): may raise KnobUnavailable
        self.after_write = None  # callable(rel, data)
        attach = _DRIVERS.get(self.root)
        if attach is not None:
            attach(self)

    def path(self, rel: str) -> str:
        """Absolute host path of kernel path ``rel`` under the root."""
        return os.path.join(self.root, rel.lstrip("/"))

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError as exc:
            raise KnobUnavailable(rel, exc.strerror or str(exc), exc.errno) from None

    def read_text(self, rel: str) -> str:
        try:
            with open(self.path(rel), "r", encoding="utf-8", errors="replace") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise KnobUnavailable(rel, exc.strerror or str(exc), exc.errno) from None

    def read_int(self, rel: str) -> int:
        text = self.read_text(rel)
        try:
            return int(text.split()[0], 0) if text.startswith("0x") else int(text.split()[0])
        except (ValueError, IndexError):
            raise KnobUnavailable(rel, f"not an integer: {text[:40]!r}", errno.EINVAL) from None

    def read_list(self, rel: str) -> list[int]:
        text = self.read_text(rel)
        try:
            return parse_cpu_list(text)
        except ValueError:
            raise KnobUnavailable(rel, f"not a cpu list: {text[:40]!r}", errno.EINVAL) from None

    def read_words(self, rel: str) -> list[str]:
        return self.read_text(rel).split()

    def try_text(self, rel: str, default=None):
        try:
            return self.read_text(rel)
        except KnobUnavailable:
            return default

    def try_int(self, rel: str, default=None):
        try:
            return self.read_int(rel)
        except KnobUnavailable:
            return default

    def try_list(self, rel: str, default=None):
        try:
            return self.read_list(rel)
        except KnobUnavailable:
            return default

    def write(self, rel: str, value) -> None:
        """Write ``value`` (str/int) to an existing kernel file; never creates files."""
        p = self.path(rel)
        data = str(value)
        if self.before_write is not None:
            self.before_write(rel, data)
        try:
            # O_WRONLY without O_CREAT: a missing knob must fail, not appear as a new file.
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        except OSError as exc:
            raise KnobUnavailable(rel, exc.strerror or str(exc), exc.errno) from None
        try:
            os.write(fd, data.encode())
        except OSError as exc:
            raise KnobUnavailable(rel, f"write {data!r} refused: {exc.strerror or exc}",
                                  exc.errno) from None
        finally:
            os.close(fd)
        if self.write_log is not None:
            self.write_log.append((rel if rel.startswith("/") else "/" + rel, data))
        if self.after_write is not None:
            self.after_write(rel, data)
