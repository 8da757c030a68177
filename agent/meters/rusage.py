"""Resource usage of a finished child, from the rusage that ``os.wait4`` returns.

The runner reaps its child with ``os.wait4`` so that user/sys time, context switches and peak
RSS belong to exactly that child (and the descendants it waited for), not to the agent.
"""

from __future__ import annotations

import resource
from typing import Any


def rusage_fields(ru: resource.struct_rusage | None) -> dict[str, Any]:
    """Record fields from a child's rusage; empty when there is none (e.g. wait failed)."""
    if ru is None:
        return {}
    return {
        "user_s": max(0.0, float(ru.ru_utime)),
        "sys_s": max(0.0, float(ru.ru_stime)),
        "ctx_voluntary": int(ru.ru_nvcsw),
        "ctx_involuntary": int(ru.ru_nivcsw),
        # Linux reports ru_maxrss in KiB.
        "max_rss_kb": int(ru.ru_maxrss),
    }


class RusageMeter:
    """Meter interface adapter: rusage needs no start/stop work, the runner hands it the rusage
    of the reaped child. Kept as a meter so every source of record fields looks the same."""

    name = "rusage"

    def start(self, spec: Any) -> None:  # noqa: D401 - nothing to arm
        return None

    def stop(self, record: Any, ctx: dict[str, Any]) -> None:
        for key, value in rusage_fields(ctx.get("rusage")).items():
            setattr(record, key, value)
