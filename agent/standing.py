"""The configuration a user applied, kept across agent restarts (as tuned keeps its profile).

A configuration applied and verified to stay in force (a config not sent with keep: false) is
written to ``standing.json`` in the state directory, atomically as the knobs' originals are;
one that leaves nothing in force (run as a command, left to the governor) removes the file.
At start, once the originals are back (``knobs.state.restore_at_start``), :func:`stand_again`
applies it again and logs one line; one that cannot be applied any more (cpus offline, a clock
no longer offered, no cpufreq, a unit gone, a process gone) is logged with the reason and
dropped, and the agent goes on.

A pid target stands again only in the same process: pids are reused, and confining whatever
now holds the number would be wrong. The file records the process's start time (clock ticks
after boot, /proc/PID/stat) and the kernel's boot id; a different boot or start time drops it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from ..shared import protocol as P
from ..shared.clock_words import kept_clock_text
from ..shared.cpus import format_cpu_list
from .knobs.state import atomic_write_json, thread_start_time
from .platform import clock_problem, cpus_problem
from .runspec import RunSpec
from .targets import kind_of

FILENAME = "standing.json"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# what of a config body says what stands (reps, predictions: its verification's only)
KEPT = ("config_id", "workload", "size", "cpus", "threads", "freq_khz", "variant", "target")

log = logging.getLogger("opptune.agent.standing")


def boot_id() -> str | None:
    try:
        with open(BOOT_ID) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def leaves_nothing(config: dict[str, Any]) -> bool:
    """A command's configuration left to the governor: nothing of it stays in force."""
    return config.get("freq_khz") is None and kind_of(config.get("target")) == "command"


def describe(config: dict[str, Any]) -> str:
    """'cfg-1 (pi_integrate on cpus 0-3 at 1500 MHz)', as the log says it (and status)."""
    clock = kept_clock_text(config.get("freq_khz"))
    target = config.get("target") or {}
    where = {"pid": f", process {target.get('pid')}",
             "unit": f", unit {target.get('unit')}"}.get(kind_of(target), "")
    return (f"{config.get('config_id')} ({config.get('workload')} on cpus "
            f"{format_cpu_list(config.get('cpus') or [])} {clock}{where})")


def wire(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the hello says of the configuration in force (shared/protocol.py)."""
    if config is None:
        return None
    out = {k: config[k] for k in ("config_id", "workload", "size", "cpus", "freq_khz")
           if k in config}
    kind = kind_of(config.get("target"))
    if kind != "command":
        out["target"] = {k: v for k, v in config["target"].items() if k in ("kind", "pid", "unit")}
    return out


class StandingFile:
    """``standing.json`` in ``state_dir``: the configuration in force, or none."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, FILENAME)

    def keep(self, body: dict[str, Any]) -> None:
        """Record ``body`` (a config just applied and verified) as the one in force; one that
        leaves nothing in force removes the record. Raises OSError when it cannot be written."""
        config = {k: body[k] for k in KEPT if k in body}
        if leaves_nothing(config):
            self.end()
            return
        saved: dict[str, Any] = {"config": config, "applied_at": time.time()}
        if kind_of(config.get("target")) == "pid":
            saved.update(pid_start=thread_start_time(config["target"]["pid"]),
                         boot_id=boot_id())
        atomic_write_json(self.path, saved)

    def end(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def load(self) -> dict[str, Any] | None:
        """The record, or None without one; an unreadable one is logged and removed."""
        try:
            with open(self.path) as fh:
                saved = json.load(fh)
            # checked as the config message it came from: a damaged file applies nothing
            P.make("config", "standing", {**saved["config"], "reps": 1})
            return saved
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("the applied configuration in %s cannot be read (%s): dropped; "
                        "apply it again (opptune recommend --apply)", self.path, exc)
            self.end()
            return None


@dataclass
class Outcome:
    """What :func:`stand_again` did: the configuration in force again (``config``, ``spec``),
    or why the one recorded was dropped (``dropped``); all None without a record."""
    config: dict[str, Any] | None = None
    spec: RunSpec | None = None
    dropped: str | None = None


def _same_process(saved: dict[str, Any]) -> str | None:
    """Why the recorded pid no longer names the process it was applied to; None if it does."""
    pid = saved["config"]["target"].get("pid")
    if saved.get("boot_id") is None or saved.get("pid_start") is None:
        return f"process {pid} cannot be told apart from another holding its pid"
    if saved["boot_id"] != boot_id():
        return f"process {pid} was one of the previous boot"
    start = thread_start_time(pid) if type(pid) is int else None
    if start is None:
        return f"process {pid} is gone"
    if start != saved["pid_start"]:
        return f"process {pid} is gone (its pid now names another process)"
    return None


def stand_again(file: StandingFile, platform: dict[str, Any], runner: Any,
                targets: Any) -> Outcome:
    """Apply the recorded configuration again (agent start, the originals just restored);
    never raises: what fails is undone, logged and dropped."""
    saved = file.load()
    if saved is None:
        return Outcome()
    config = saved["config"]
    spec = RunSpec.of_config(config)
    kind = kind_of(config.get("target"))
    try:
        why = cpus_problem(platform, spec.cpus)
        if why is None and spec.freq_khz is not None:
            why = clock_problem(platform, spec.cpus, spec.freq_khz)
        if why is None and kind == "pid":
            why = _same_process(saved)
        if why is None and kind != "command":
            if targets is None:
                why = "this agent applies configurations to the commands it launches only"
            else:
                targets.check(config["target"])
        if why is None:
            runner.apply_knobs(spec)
            if kind != "command":
                targets.apply(config["target"], spec.cpus, owner=config.get("config_id"))
    except Exception as exc:  # TargetError, knob errors of many kinds: the agent goes on
        why = str(exc) or type(exc).__name__
        runner.restore()
        if targets is not None:
            targets.restore()
    if why is not None:
        log.warning("applied configuration %s dropped: %s; the board stays at its original "
                    "settings", describe(config), why)
        file.end()
        return Outcome(dropped=f"{config.get('config_id')}: {why}")
    log.info("applied configuration %s in force again after the agent's start",
             describe(config))
    return Outcome(config=config, spec=spec)


def confine_again(file: StandingFile | None, config: dict[str, Any], targets: Any) -> None:
    """The target of ``config``, the configuration in force, confined again: one meant to
    replace it was not applied, after its target had been let go (agent/apply.py). A process
    gone (or its pid another's) or a unit gone is logged: nothing is confined then. Never
    raises."""
    if kind_of(config.get("target")) == "command" or targets is None:
        return
    owner = config.get("config_id")
    try:
        saved = file.load() if file is not None else None
        why = None
        if kind_of(config["target"]) == "pid" and saved is not None \
                and saved["config"].get("config_id") == owner:
            why = _same_process(saved)
        if why is None:
            targets.check(config["target"])
            targets.apply(config["target"], list(config["cpus"]), owner=owner)
    except Exception as exc:  # TargetError, OSError: the agent goes on
        why = str(exc) or type(exc).__name__
        targets.release(owner)
    if why is not None:
        log.warning("applied configuration %s: its target cannot be confined again (%s); "
                    "it is free of its cpu set", describe(config), why)
    else:
        log.info("applied configuration %s: its target confined again", describe(config))
