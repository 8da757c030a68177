"""A child process that ends with the process that started it: Linux's parent-death signal
(prctl PR_SET_PDEATHSIG), asked for by the child between fork and exec.

Resolved once at import: between fork and exec nothing may be looked up or imported (a lock
another thread held at fork would never be released in the child). Off Linux, or without
prctl, there is none (None), and the caller's own stop path is all there is.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None


PRCTL = _load_prctl()


def ask_death_signal(prctl: Callable[..., int], sig: int, parent: int) -> None:
    """In the child, before exec: ``sig`` when ``parent`` ends; if it already ended (the
    child was re-parented before the call), the child sends ``sig`` to itself. Set it after
    any uid/gid change, which clears it."""
    prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def dies_with_this_process(sig: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this process ends, however it
    ends (kill -9 too); None where there is no prctl. The kernel sends it when the *thread*
    that forked ends: fork from a thread that lives as long as the child should."""
    if PRCTL is None:
        return None
    prctl, parent = PRCTL, os.getpid()
    return lambda: ask_death_signal(prctl, sig, parent)
