"""Assemble the report: analyse what the daemon answered, draw the figures, write index.html.

Files go into one directory: index.html and fig-*.png. The figures are drawn into a staging
directory inside it and take the place of an earlier report's only once every one is drawn:
a report interrupted or failed halfway leaves the earlier one whole (nothing else is touched).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...shared.cpus import format_cpu_list
from . import page, plots
from .analysis import (GroupView, analyse_groups, drawn_groups, fleet_rows, group_key,
                       kernel_traits, latest_recommendations, left_out_text, topology_rows)
from ..planner import clock_text
from ..status_view import failed_text, standing_lines as board_standing_lines, state_text
from ..scope_text import unknown_agent, unknown_workload
from .cli import DEFAULT_MAX_GROUPS

TITLE = "opptune report"


class NoGroups(ValueError):
    """--workload / --agent name nothing the daemon measured (the message says what does)."""


@dataclass
class Built:
    index: Path
    images: list[Path]
    groups: list[str]  # the groups drawn, as labelled
    bytes: int
    seconds: float
    listed: int = 0  # the groups the page lists (drawn or not)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _rec_text(r: dict[str, Any] | None) -> str:
    if not r:
        return "no recommendation stored for this group yet"
    freq = clock_text(r.get("freq_khz"), r.get("clock"))
    n = r["cores"]
    text = (f"recommended: {n} core{'s' if n != 1 else ''} (cpus {format_cpu_list(r['cpus'])}) "
            f"at {freq}, "
            f"predicted "
            f"{r['predicted_time_s']:.4g} s")
    if r.get("predicted_lower_s") is not None:
        text += f" ({r['predicted_lower_s']:.4g}..{r['predicted_upper_s']:.4g} s)"
    if r.get("verified_time_s") is not None:
        text += f"; measured {r['verified_time_s']:.4g} s"
    return text + f"; state {state_text(r)}"


def _group_section(view: GroupView, out: Path, images: list[Path]) -> page.Section:
    left = sum(view.left_out.values())
    sec = page.Section(view.label, f"g-{view.slug}",
                       notes=[_rec_text(view.recommendation),
                              f"{view.stored_runs} runs at {len(view.points)} configurations"
                              + (f" ({left} left out of the fit: "
                                 f"{left_out_text(view.left_out)})" if left else "")
                              + f"; model: {view.model_note or 'none'}"])

    def fig(kind: str, draw: Any, caption: str) -> None:
        path = out / f"fig-{view.slug}-{kind}.png"
        draw(path)
        images.append(path)
        sec.figures.append(page.Figure(path.name, f"{kind} of {view.label}", caption))

    fig("scaling", lambda p: plots.scaling(view, p),
        "Time over cores: the medians of the runs the fit uses (dots), the fitted model "
        "(line) with its 90 % prediction interval (band), one colour per measured frequency; "
        "the star is the recommended configuration at its measured (else predicted) time."
        + _left_out_caption(view))
    g = view.grid
    if g is None:
        if view.model is not None and not view.has_freq:
            sec.notes.append("measured at one frequency only: no cores x frequency maps")
        return sec
    fig("time", lambda p: plots.heatmap(view, "time", p),
        "Time over cores x the frequencies the board offers: the measured median where "
        "the fit has runs of it (circles), else the model's prediction"
        + (f" (crosses: the {len(g.left_out)} configuration"
           f"{'s' if len(g.left_out) != 1 else ''} measured only by runs the fit leaves out)"
           if g.left_out else "")
        + "; the white diamonds are the time/energy Pareto front, the star the "
        "recommendation.")
    if g.energy_j is None:
        sec.notes.append(g.energy_note)
        return sec
    fig("energy", lambda p: plots.heatmap(view, "energy", p),
        f"Energy over cores x frequency: {g.energy_note}. Markers as in the time map.")
    fig("tradeoff", lambda p: plots.tradeoff(view, p),
        f"Every offered configuration in time x energy, the Pareto front joined. "
        f"{g.energy_note[0].upper()}{g.energy_note[1:]}.")
    return sec


def _left_out_caption(view: GroupView) -> str:
    """What the scaling figure leaves out of its dots, and why; empty when nothing."""
    if not view.left_out:
        return ""
    hollow = sum(1 for p in view.points if p.left_out)
    left = sum(view.left_out.values())
    return (f" Left out of the fit and of the dots: {left} of the {view.stored_runs} runs "
            f"({left_out_text(view.left_out)})"
            + (f"; the {hollow} configuration"
               + ("s that have no other runs are" if hollow != 1 else " that has no other runs is")
               + " drawn hollow, at the median of theirs" if hollow else "") + ".")


def select_entries(data: dict[str, Any], workload: str | None = None,
                   agent: str | None = None) -> list[dict[str, Any]]:
    """The query's groups with runs, those of ``workload`` and of ``agent``'s board where
    given; NoGroups when a filter matches none of them."""
    entries = [e for e in data.get("points") or [] if e.get("runs")]
    if agent is not None:
        known = {a["id"]: a["platform"] for a in data.get("agents") or []}
        if agent not in known:
            raise NoGroups(unknown_agent(agent, known))
        entries = [e for e in entries if e["group"]["platform"] == known[agent]]
        if not entries:
            raise NoGroups(f"--agent {agent}: nothing measured on its board yet")
    if workload is not None:
        names = sorted({e["group"]["workload"] for e in entries})
        entries = [e for e in entries if e["group"]["workload"] == workload]
        if not entries:
            raise NoGroups(unknown_workload(workload, names,
                                            f" on agent {agent}'s board" if agent else ""))
    return entries


def build_report(data: dict[str, Any], out: Path,
                 progress: Callable[[str], None] | None = None,
                 count: Callable[[str, int, int], None] | None = None,
                 max_groups: int = DEFAULT_MAX_GROUPS, workload: str | None = None,
                 agent: str | None = None) -> Built:
    """Write the report of the daemon's ``report`` answer into ``out``; ``progress`` is told
    what it does, ``count(what, i, n)`` how far the refits and figures are (1-2 s a
    group on the 2-cpu machine). Every group (of ``workload`` and ``agent``'s board where
    given: select_entries, NoGroups before anything is written) is listed in a table; at
    most ``max_groups`` (0: all; analysis.drawn_groups picks them) are refitted and drawn."""
    t0 = time.perf_counter()
    entries = select_entries(data, workload, agent)
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".opptune-report-", dir=out))
    try:
        return _build(data, entries, out, stage, progress or (lambda what: None), count,
                      max_groups, workload, agent, t0)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _build(data: dict[str, Any], entries: list[Any], out: Path, stage: Path,
           say: Callable[[str], None], count: Callable[[str, int, int], None] | None,
           max_groups: int, workload: str | None, agent: str | None, t0: float) -> Built:
    """:func:`build_report`'s page, its figures drawn into ``stage``."""
    platforms = data.get("platforms") or {}
    boards = {a["platform"]: a["board"] for a in data.get("agents") or []}
    recs = latest_recommendations(data.get("recommendations") or [])
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(data.get("generated")
                                                                or time.time()))
    d = data.get("daemon") or {}
    intro = [f"Daemon {d.get('instance', '?')} at {d.get('endpoint', '?')}, {when}."]
    images: list[Path] = []
    if not entries:
        known = ", ".join(f"{a['id']} ({a['board']})" for a in data.get("agents") or [])
        empty = ["Nothing measured yet: the daemon has no runs to show.",
                 "To start: run opptune-agent on a board with 'daemon' in its configuration "
                 "pointing at this daemon, then 'opptune sweep --agent ID --wait' (or set "
                 "auto_sweep = true in the daemon's configuration), then run 'opptune report' "
                 "again. 'opptune demo' shows the whole loop on this machine."]
        if known:
            empty.append(f"Agents known to the daemon: {known}.")
        empty += standing_lines(data)
        html = page.render(TITLE, intro, [], empty=empty)
        return _write(out, html, images, [], t0)

    drawn = drawn_groups(entries, data.get("recommendations") or [], max_groups)
    n = len(drawn)
    if n < len(entries):
        say(f"{len(entries)} workload groups: drawing {n} (--max-groups {max_groups}), "
            "listing all")
    fits = {group_key(f["group"]): f for f in data.get("fits") or []}
    refitting = (lambda i, k: count("refitting models", i, k)) if count else None
    if not count:
        say(f"refitting the models of {n} workload groups")
    views = analyse_groups(entries, platforms, boards, recs, refit=set(drawn), fits=fits,
                           count=refitting)

    fleet = page.Section("Fleet", "fleet", tables=[page.Table(
        ["agent", "board", "platform", "online", "last seen", "runs", "failed runs",
         "recommendations", "applied", "verified", "unconfirmed", "off"],
        [[r["agent"], r["board"], r["platform"], "yes" if r["alive"] else "no",
          _ago(r["last_seen_s"]), r["runs"], failed_text(r), r["recommendations"], r["applied"],
          r["verified"], r["unconfirmed"], r["off"]] for r in fleet_rows(data)])],
        notes=["runs: the successful runs stored; failed runs: those that failed (stored, "
               "measured nothing, in no fit), of which 'not run' were recorded without being "
               "run (a job cancelled or stopped after timeouts, a program that cannot start). "
               "applied: the agent ran the recommended configuration and measured it; "
               "verified: the measured time lay within the prediction interval, which was "
               "narrow enough to confirm the prediction; unconfirmed: within an interval too "
               "wide for that (past twice or half the prediction); off: outside it."]
        + standing_lines(data))
    board_secs = []
    for pid in sorted({v.group["platform"] for v in views}):
        name = boards.get(pid, pid)
        sec = page.Section(f"Board {name}", f"b-{pid}",
                           tables=[page.Table(["", ""], topology_rows(platforms.get(pid) or {}))])
        traits = [t for v in views if v.group["platform"] == pid
                  for t in [kernel_traits(v)] if t]
        if traits:
            sub = page.Section(f"bench_suite kernels on {name}", f"k-{pid}")
            sec.subsections.append(sub)
            sub.notes.append("bench_suite kernels: speedup = time on 1 core / time on the most "
                             "cores measured, at the highest measured frequency; frequency "
                             "exponent b of time ~ f^-b (1: compute-bound, 0: bound by "
                             "memory); memory-boundness = 1 - b.")
            sub.tables.append(page.Table(
                ["kernel", "cluster", "cores", "speedup", "at MHz", "frequency exponent",
                 "memory-boundness", "model"],
                [[t["kernel"], t["variant"], t["max_cores"], t["speedup"], t["freq_mhz"],
                  t["freq_exponent"], t["memory_bound"], t["model"]] for t in traits]))
        board_secs.append(sec)
    boards_sec = page.Section("Boards", "boards", subsections=board_secs)
    if not count:
        say(f"drawing {n} workload groups' figures into {out}")
    shown = [views[i] for i in drawn]
    subsections = []
    for k, v in enumerate(shown, 1):
        subsections.append(_group_section(v, stage, images))
        if count:
            count(f"drawing figures into {out}", k, n)
    work_sec = page.Section("Workloads", "workloads", subsections=subsections)
    if n < len(views):
        work_sec.notes.append(_partial_note(n, len(views), max_groups, workload, agent))
        work_sec.tables.append(_group_table(views, set(drawn)))
    html = page.render(TITLE, intro, [fleet, boards_sec, work_sec])
    return _write(out, html, images, [v.label for v in shown], t0, listed=len(views))


def standing_lines(data: dict[str, Any]) -> list[str]:
    """What a user applied that stands on each board (one per target), why the agent's
    restart dropped one, or that the daemon does not know: the lines of 'opptune status'
    (none for a board of which none is known)."""
    return [line for a in data.get("agents") or []
            for line in board_standing_lines(a, str(a.get("board") or a.get("platform")))]


def _partial_note(n: int, total: int, max_groups: int, workload: str | None,
                  agent: str | None) -> str:
    """What the page shows of a large store, and how to get the rest."""
    scope = " ".join(x for x in (f"--workload {workload}" if workload else "",
                                 f"--agent {agent}" if agent else "") if x)
    return (f"Figures for {n} of the {total} workload groups{' of ' + scope if scope else ''}"
            f" (--max-groups {max_groups}): those of the newest recommendations first, then "
            "in the order of the table below, which lists every group with the daemon's "
            "own model. For the others: 'opptune report --workload W' or '--agent ID' draws "
            f"one workload's or one board's groups, '--max-groups 0' draws all {total} "
            "(1-2 s a group).")


def _group_table(views: list[GroupView], drawn: set[int]) -> page.Table:
    """Every listed group: board, runs, model, recommendation, and a link to its figures."""
    rows = []
    for i, v in enumerate(views):
        r = v.recommendation
        rec = "" if not r else (
            f"{r['cores']} cores" + ("" if r.get("freq_khz") is None
                                     else f" at {r['freq_khz'] / 1000:g} MHz")
            + f", {r['state']}")
        rows.append([page.Link(v.label, f"#g-{v.slug}") if i in drawn else v.label,
                     v.stored_runs, len(v.points),
                     v.model_note or "none", rec])
    return page.Table(["workload group", "runs", "configurations", "model", "recommendation"],
                      rows)


def _write(out: Path, html: str, images: list[Path], groups: list[str], t0: float,
           listed: int = 0) -> Built:
    """Put the staged ``images`` and the page in the place of the report ``out`` held."""
    index = out / "index.html"
    tmp = out / "index.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    for old in out.glob("fig-*.png"):
        old.unlink()
    placed = []
    for staged in images:
        os.replace(staged, out / staged.name)
        placed.append(out / staged.name)
    images = placed
    tmp.replace(index)
    size = index.stat().st_size + sum(p.stat().st_size for p in images)
    return Built(index, images, groups, size, time.perf_counter() - t0, listed)
