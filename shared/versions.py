"""Comparing opptune versions, for what a person reads (which boards run older code).

Behaviour never depends on these: where the daemon acts differently for an older agent, it
goes by what the agent's hello says (a capability, e.g. ``standing``), not by its number."""

from __future__ import annotations

import re
from typing import Any

_RELEASE = re.compile(r"(\d+(?:\.\d+)*)")


def release(version: Any) -> tuple[int, ...] | None:
    """``"0.2.0"`` as (0, 2), trailing zeros dropped (0.2 and 0.2.0 are one release), a
    local label after "+" ignored (0.2.0+board is 0.2.0); None for what is not such a number
    (a test's "t", a pre-release "0.3.0rc1")."""
    if not isinstance(version, str):
        return None
    m = _RELEASE.fullmatch(version.split("+", 1)[0].strip())
    if m is None:
        return None
    parts = [int(p) for p in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def older(version: Any, than: Any) -> bool | None:
    """Whether ``version`` is an earlier release than ``than``; None when either is not a
    release number (nothing to say)."""
    a, b = release(version), release(than)
    return None if a is None or b is None else a < b
