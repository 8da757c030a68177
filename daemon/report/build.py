"""Assemble the report: analyse what the daemon answered, draw the figures, write index.html.

Files go into one directory: index.html and fig-*.png (figures of an earlier report there are
removed first, nothing else is touched).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import page, plots
from .analysis import (GroupView, analyse_groups, fleet_rows, kernel_traits,
                       latest_recommendations, topology_rows)

TITLE = "opptune report"


@dataclass
class Built:
    index: Path
    images: list[Path]
    groups: list[str]
    bytes: int
    seconds: float


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
    freq = "the governor's frequency" if r.get("freq_khz") is None else \
        f"{r['freq_khz'] / 1000:g} MHz"
    text = (f"recommended: {r['cores']} cores (cpus {r['cpus']}) at {freq}, predicted "
            f"{r['predicted_time_s']:.4g} s")
    if r.get("predicted_lower_s") is not None:
        text += f" ({r['predicted_lower_s']:.4g}..{r['predicted_upper_s']:.4g} s)"
    if r.get("verified_time_s") is not None:
        text += f"; measured {r['verified_time_s']:.4g} s"
    return text + f"; state {r['state']}" + (f" ({r['error']})" if r.get("error") else "")


def _group_section(view: GroupView, out: Path, images: list[Path]) -> page.Section:
    sec = page.Section(view.label, f"g-{view.slug}",
                       notes=[_rec_text(view.recommendation),
                              f"{sum(p.runs for p in view.points)} runs at "
                              f"{len(view.points)} configurations; model: "
                              f"{view.model_note or 'none'}"])

    def fig(kind: str, draw: Any, caption: str) -> None:
        path = out / f"fig-{view.slug}-{kind}.png"
        draw(path)
        images.append(path)
        sec.figures.append(page.Figure(path.name, f"{kind} of {view.label}", caption))

    fig("scaling", lambda p: plots.scaling(view, p),
        "Time over cores: measured medians (dots), the fitted model (line) with its 90 % "
        "prediction interval (band), one colour per measured frequency; the star is the "
        "recommended configuration at its measured (else predicted) time.")
    g = view.grid
    if g is None:
        if view.model is not None and not view.has_freq:
            sec.notes.append("measured at one frequency only: no cores x frequency maps")
        return sec
    fig("time", lambda p: plots.heatmap(view, "time", p),
        "Time over cores x the frequencies the board offers: the measured median where "
        "measured (circles), else the model's prediction; the white diamonds are the "
        "time/energy Pareto front, the star the recommendation.")
    if g.energy_j is None:
        sec.notes.append(g.energy_note)
        return sec
    fig("energy", lambda p: plots.heatmap(view, "energy", p),
        f"Energy over cores x frequency: {g.energy_note}. Markers as in the time map.")
    fig("tradeoff", lambda p: plots.tradeoff(view, p),
        f"Every offered configuration in time x energy, the Pareto front joined. "
        f"{g.energy_note[0].upper()}{g.energy_note[1:]}.")
    return sec


def build_report(data: dict[str, Any], out: Path,
                 progress: Callable[[str], None] | None = None) -> Built:
    """Write the report of the daemon's ``report`` answer into ``out``; ``progress`` is told
    what it does (the refits and the figures: 32 s for 66 groups on the 2-cpu machine)."""
    say = progress or (lambda what: None)
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("fig-*.png"):
        old.unlink()
    platforms = data.get("platforms") or {}
    boards = {a["platform"]: a["board"] for a in data.get("agents") or []}
    recs = latest_recommendations(data.get("recommendations") or [])
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(data.get("generated")
                                                                or time.time()))
    d = data.get("daemon") or {}
    intro = [f"Daemon {d.get('instance', '?')} at {d.get('endpoint', '?')}, {when}."]
    entries = [e for e in data.get("points") or [] if e.get("runs")]
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
        html = page.render(TITLE, intro, [], empty=empty)
        return _write(out, html, images, [], t0)

    say(f"refitting the models of {len(entries)} workload groups")
    views = analyse_groups(entries, platforms, boards, recs)

    fleet = page.Section("Fleet", "fleet", tables=[page.Table(
        ["agent", "board", "platform", "online", "last seen", "runs", "recommendations",
         "applied", "verified", "off"],
        [[r["agent"], r["board"], r["platform"], "yes" if r["alive"] else "no",
          _ago(r["last_seen_s"]), r["runs"], r["recommendations"], r["applied"],
          r["verified"], r["off"]] for r in fleet_rows(data)])],
        notes=["applied: the agent ran the recommended configuration and measured it; "
               "verified: the measured time lay within the prediction interval; off: it "
               "did not."])
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
    say(f"drawing {len(views)} workload groups' figures into {out}")
    work_sec = page.Section("Workloads", "workloads", subsections=[
        _group_section(v, out, images) for v in views])
    html = page.render(TITLE, intro, [fleet, boards_sec, work_sec])
    return _write(out, html, images, [v.label for v in views], t0)


def _write(out: Path, html: str, images: list[Path], groups: list[str], t0: float) -> Built:
    index = out / "index.html"
    tmp = out / "index.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(index)
    size = index.stat().st_size + sum(p.stat().st_size for p in images)
    return Built(index, images, groups, size, time.perf_counter() - t0)
