"""The configurations a user applied, kept across agent restarts (as tuned keeps its profile).

One configuration stands per target (the board, each process, each unit: shared/standing.py
has the rule, clocks included). A configuration applied and verified to stay in force (a
config not sent with keep: false) is written to ``standing.json`` in the state directory,
atomically as the knobs' originals are, in place of its own target's entry only; one that
leaves nothing in force (run as a command, left to the governor) removes the board's entry.
At start, once the originals are back (``knobs.state.restore_at_start``), :func:`stand_again`
applies each again and logs one line each; one that cannot be applied any more (cpus offline,
a clock no longer offered, no cpufreq, a unit gone, a process gone) is logged with the reason
and dropped, and the agent goes on with the others. The file of an agent before targets stood
apart (one ``config``) is read as one entry.

A pid target stands again only in the same process: pids are reused, and confining whatever
now holds the number would be wrong. The file records the process's start time (clock ticks
after boot, /proc/PID/stat) and the kernel's boot id; a different boot or start time drops it.
While the agent runs, a process that exits is noticed at the link's next heartbeat
(:func:`exited`) and its configuration dropped then (agent/apply.py ``drop_exited``); so is
a unit that stops (at two heartbeats in a row: a restarting unit is confined again).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from ..shared import protocol as P
from ..shared.clock_words import clock_text, kept_clock_text
from ..shared.cpus import format_cpu_list
from ..shared.standing import EXITED_WHILE_RUNNING, key_of, narrower, overridden, target_key
from .knobs.state import atomic_write_json, running_start, thread_start_time
from .platform import clock_problem, cpus_problem
from .runspec import RunSpec
from .targets import TargetError, kind_of

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


def wire(config: dict[str, Any] | None, in_unit: str | None = None) -> dict[str, Any] | None:
    """What the hello says of the configuration in force (shared/protocol.py); ``in_unit``:
    the unit of a configuration in force that its process runs in (shared/standing.py)."""
    if config is None:
        return None
    out = {k: config[k] for k in ("config_id", "workload", "size", "cpus", "freq_khz")
           if k in config}
    kind = kind_of(config.get("target"))
    if kind != "command":
        out["target"] = {k: v for k, v in config["target"].items() if k in ("kind", "pid", "unit")}
        if kind == "pid" and in_unit:
            out["target"]["in_unit"] = in_unit
    return out


def parse_target(text: str) -> str:
    """The target key of a user's 'board', 'pid:N', 'unit:NAME' or 'all' (shared/standing.py);
    ValueError saying the forms."""
    kind, _, value = text.strip().partition(":")
    if text.strip() in ("board", "all"):
        return text.strip()
    if kind == "pid" and value.isdigit() and int(value) > 0:
        return target_key({"kind": "pid", "pid": int(value)})
    if kind == "unit" and value and "/" not in value:
        return target_key({"kind": "unit", "unit": value})
    raise ValueError("name a target as board, pid:N (a process id), unit:NAME (a systemd "
                     "unit) or all")


class StandingFile:
    """``standing.json`` in ``state_dir``: the configurations in force, one per target."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, FILENAME)

    def keep(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Record ``body`` (a config just applied and verified) as the one in force on its
        target, in place of that target's entry; one that leaves nothing in force removes the
        board's. Returns the entry replaced (None: none). Raises OSError when it cannot be
        written."""
        config = {k: body[k] for k in KEPT if k in body}
        new: dict[str, Any] | None = None
        if not leaves_nothing(config):
            new = {"config": config, "applied_at": time.time()}
            if kind_of(config.get("target")) == "pid":
                new.update(pid_start=thread_start_time(config["target"]["pid"]),
                           boot_id=boot_id())
        key = target_key(config.get("target"))
        saved = self.load()
        old = next((e for e in saved if key_of(e["config"]) == key), None)
        self.write([e for e in saved if e is not old] + ([new] if new is not None else []))
        return old

    def write(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            self.end()
            return
        atomic_write_json(self.path, {"entries": entries})

    def forget(self, key: str) -> dict[str, Any] | None:
        """Remove the entry of target ``key`` ('board', 'pid:N', 'unit:NAME'); returns it,
        None where none stands there. Raises OSError when the file cannot be written."""
        saved = self.load()
        gone = next((e for e in saved if key_of(e["config"]) == key), None)
        if gone is not None:
            self.write([e for e in saved if e is not gone])
        return gone

    def end(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def load(self) -> list[dict[str, Any]]:
        """The entries ({"config", "applied_at", ...}), oldest first; [] without a file. A
        file of one ``config`` (an agent before targets stood apart) is one entry. An
        unreadable file is logged and removed; a damaged entry is logged and left out."""
        try:
            with open(self.path) as fh:
                saved = json.load(fh)
            entries = [saved] if "config" in saved else saved["entries"]
            if not isinstance(entries, list):
                raise TypeError("'entries' is not a list")
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("the applied configuration in %s cannot be read (%s): dropped; "
                        "apply it again (opptune recommend --apply)", self.path, exc)
            self.end()
            return []
        out, bad = [], []
        for e in entries:
            try:
                # checked as the config message it came from: a damaged entry applies nothing
                P.make("config", "standing", {**e["config"], "reps": 1})
                out.append(e)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                bad.append(exc)
        if bad and not out:
            log.warning("the applied configuration in %s cannot be read (%s): dropped; "
                        "apply it again (opptune recommend --apply)", self.path, bad[0])
            self.end()
        elif bad:
            log.warning("%d of the applied configurations in %s cannot be read (%s): dropped, "
                        "the others kept; apply them again (opptune recommend --apply)",
                        len(bad), self.path, bad[0])
            try:
                self.write(out)
            except OSError:
                pass  # read alike next time: left out again
        return out


@dataclass
class Outcome:
    """What :func:`stand_again` did: the configurations in force again (``configs``, oldest
    first), why each one recorded but dropped was ('CONFIG_ID: why'), and the start time of
    the process of each pid configuration in force again, by config id (:func:`exited`)."""
    configs: list[dict[str, Any]]
    dropped: list[str]
    starts: dict[str, int | None]


def _same_process(saved: dict[str, Any]) -> str | None:
    """Why the recorded pid no longer names the process it was applied to; None if it does."""
    pid = saved["config"]["target"].get("pid")
    if saved.get("boot_id") is None or saved.get("pid_start") is None:
        return f"process {pid} cannot be told apart from another holding its pid"
    if saved["boot_id"] != boot_id():
        return f"process {pid} was one of the previous boot"
    return _left(pid, saved["pid_start"], "is gone")


def _left(pid: Any, start: int | None, gone: str) -> str | None:
    """Why ``pid`` no longer names the process started at ``start`` ('process N ' + ``gone``,
    its pid another's), None while it runs."""
    now = running_start(pid) if type(pid) is int else None
    if now is None:
        return f"process {pid} {gone}"
    if now != start:
        return f"process {pid} {gone} (its pid now names another process)"
    return None


def exited(configs: list[dict[str, Any]], starts: dict[str, int | None]
           ) -> list[tuple[dict[str, Any], str]]:
    """(configuration, why) for each of ``configs`` (those in force) confining a process that
    has exited since it was applied, or whose pid names another by now; ``starts``: each pid
    configuration's process start time, by config id. One read of /proc/PID/stat each."""
    out = []
    for config in configs:
        target = config.get("target") or {}
        if kind_of(target) == "pid":
            why = _left(target.get("pid"), starts.get(str(config.get("config_id"))),
                        EXITED_WHILE_RUNNING)
            if why is not None:
                out.append((config, why))
    return out


def conflict_lines(configs: list[dict[str, Any]], platform: dict[str, Any],
                   newest_only: bool = False) -> list[str]:
    """One line per standing configuration whose clock a newer one overrides on a policy
    (shared/standing.py): which policies, by which, at what clock. ``newest_only``: those
    the newest configuration overrides (it was just applied)."""
    by_id = {str(c.get("config_id")): c for c in configs}
    newest = str(configs[-1].get("config_id")) if configs else None
    lines = []
    for cid, over in overridden([wire(c) or {} for c in configs], platform).items():
        over = [o for o in over if not newest_only or o["by"] == newest]
        if not over or cid not in by_id:
            continue
        where = ", ".join(f"{o['policy']} by {o['by']} ({clock_text(o['freq_khz'])})" for o in over)
        lines.append(f"applied configuration {describe(by_id[cid])}: its clock is overridden "
                     f"on {where}, applied after it; it keeps its cpu set and its clock "
                     "elsewhere")
    return lines


def narrower_lines(configs: list[dict[str, Any]], in_unit: dict[str, str],
                   newest_only: bool = False) -> list[tuple[int, str]]:
    """(log level, line) for each process that runs in a unit a configuration in force also
    confines (``in_unit``: the unit of each such pid configuration, by config id): whose cpu
    set holds for it (shared/standing.py). ``newest_only``: those the newest configuration
    is part of (it was just applied)."""
    by_id = {str(c.get("config_id")): c for c in configs}
    newest = str(configs[-1].get("config_id")) if configs else None
    entries = [wire(c, in_unit.get(str(c.get("config_id")))) or {} for c in configs]
    out = []
    for cid, over in narrower(entries).items():
        for o in over:
            if newest_only and newest not in (cid, o["by"]):
                continue
            mine = format_cpu_list(by_id[cid].get("cpus") or [])
            if "pid" in o:
                out.append((logging.INFO, f"applied configuration {describe(by_id[cid])}: its "
                            f"cpu set is overridden for process {o['pid']} by {o['by']} (cpus "
                            f"{format_cpu_list(o['cpus'])}), the process's own: the narrower "
                            f"target holds for it; the unit's other processes stay on cpus "
                            f"{mine}"))
            else:
                out.append((logging.WARNING, f"applied configuration {describe(by_id[cid])}: "
                            f"its cpu set is overridden by {o['by']} (unit {o['unit']}, cpus "
                            f"{format_cpu_list(o['cpus'])}), which does not hold all of cpus "
                            f"{mine}: the kernel keeps a process within its unit's cpu set"))
    return out


def stand_again(file: StandingFile, platform: dict[str, Any], runner: Any,
                targets: Any) -> Outcome:
    """Apply the recorded configurations again (agent start, the originals just restored),
    oldest first, so that a newer clock holds where two share a policy; never raises: what
    fails is undone, logged and dropped, and the others stand."""
    saved = file.load()
    kept, configs, dropped = [], [], []
    starts: dict[str, int | None] = {}
    for entry in saved:
        config = entry["config"]
        spec = RunSpec.of_config(config)
        kind = kind_of(config.get("target"))
        owner = config.get("config_id")
        gone = False  # its process or unit is gone: the way of things, not a fault
        try:
            why = cpus_problem(platform, spec.cpus)
            if why is None and spec.freq_khz is not None:
                why = clock_problem(platform, spec.cpus, spec.freq_khz)
            if why is None and kind == "pid":
                why = _same_process(entry)
                gone = why is not None
            if why is None and kind != "command":
                if targets is None:
                    why = "this agent applies configurations to the commands it launches only"
                else:
                    try:
                        targets.check(config["target"])
                    except TargetError:
                        gone = True
                        raise
            if why is None:
                if spec.freq_khz is not None:  # one without a clock sets none (apply restores)
                    runner.apply_knobs(spec)
                if kind != "command":
                    targets.apply(config["target"], spec.cpus, owner=owner)
        except Exception as exc:  # TargetError, knob errors of many kinds: the agent goes on
            why = str(exc) or type(exc).__name__
            if targets is not None:
                targets.release(owner)
        if why is not None:
            log.log(logging.INFO if gone else logging.WARNING,
                    "applied configuration %s dropped: %s; %s", describe(config), why,
                        "the other applied configurations stand" if len(saved) > 1 else
                        "the board stays at its original settings")
            dropped.append(f"{owner}: {why}")
            continue
        kept.append(entry)
        configs.append(config)
        if kind == "pid":
            starts[str(owner)] = entry.get("pid_start")
    if dropped:
        try:
            file.write(kept)
        except OSError as exc:
            log.warning("cannot write %s (%s): the dropped configurations are tried again at "
                        "the next start", file.path, exc)
    if saved:
        # every clock of the ones in force as the rule has it, the dropped ones' put back
        runner.rest([RunSpec.of_config(c) for c in configs])
    for config in configs:
        log.info("applied configuration %s in force again after the agent's start",
                 describe(config))
    for line in conflict_lines(configs, platform):
        log.info("%s", line)
    return Outcome(configs, dropped, starts)


def confine_again(file: StandingFile | None, config: dict[str, Any], targets: Any) -> None:
    """The target of ``config``, a configuration in force, confined again: one meant to
    replace it was not applied, after its target had been let go (agent/apply.py). A process
    gone (or its pid another's) or a unit gone is logged: nothing is confined then. Never
    raises."""
    if kind_of(config.get("target")) == "command" or targets is None:
        return
    owner = config.get("config_id")
    try:
        saved = next((e for e in (file.load() if file is not None else [])
                      if e["config"].get("config_id") == owner), None)
        why = None
        if kind_of(config["target"]) == "pid" and saved is not None:
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
