"""What the report shows, computed from the daemon's ``report`` query (pure: no I/O, no plots).

Per group: the measured points (median per configuration), the time model refitted here with
the daemon's own choice (``fitter.fit_group``, same target grid and seed), its curves with
prediction intervals, and where the group has a frequency axis the cores x frequency grid of the
configurations the board offers with predicted time, energy (measured where measured, else the
time model x the power model of models/energy.py fitted to the measured energy) and the
time/energy Pareto front; a group the page only lists (``drawn_groups`` picks the others) keeps
its points and the daemon's stored fit, unrefitted. Per board: topology rows and the
bench_suite kernels' traits. The fleet: one row per agent.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...bench_suite.catalogue import KERNELS
from ...shared.cpus import format_cpu_list
from ...shared.point_stats import benchmark
from ..fitter import fit_group, observations, other_observations
from ..goal_recommend import ESTIMATE_SOURCES
from ..models.base import FittedModel, Observations
from ..models.energy import PowerModeler
from ..planner import offer_text
from ..recommend import (FitSetting, candidate_grid, fit_setting, platform_others,
                         target_observations)

BENCH_KERNELS = tuple(KERNELS)  # the bench_suite catalogue: the kernels whose traits are shown


@dataclass
class Point:
    cores: int
    freq_mhz: float | None
    time_s: float  # median of its runs
    energy_j: float | None  # median of the runs that have energy
    runs: int  # the runs the medians are of
    # why the fit leaves out every run of it (LEFT_OUT's words, sorted), whose medians these
    # are then; empty: the medians are of the runs the fit uses
    left_out: tuple[str, ...] = ()


@dataclass
class Curve:
    freq_mhz: float | None
    cores: np.ndarray
    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@dataclass
class Grid:
    """Configurations over cores (rows) x frequency in MHz (columns); NaN where not offered."""
    cores: list[int]
    freqs_mhz: list[float]
    time_s: np.ndarray  # measured median where measured, else predicted
    energy_j: np.ndarray | None
    energy_measured: np.ndarray | None  # bool: the energy is the measured median
    pareto: list[tuple[int, float]]  # (cores, freq_mhz) on the time/energy front, fastest first
    energy_note: str
    # (cores, freq_mhz) measured only by runs the fit leaves out: the maps show the model's
    # prediction there, as the fit sees no measurement of it
    left_out: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class GroupView:
    group: dict[str, str]
    board: str
    points: list[Point]
    model: FittedModel | None = None
    model_note: str = ""
    curves: list[Curve] = field(default_factory=list)
    grid: Grid | None = None
    recommendation: dict[str, Any] | None = None
    stored_runs: int = 0  # every successful run of the group
    left_out: dict[str, int] = field(default_factory=dict)  # of them, left out of the fit

    @property
    def label(self) -> str:
        g = self.group
        extra = f", {g['variant']}" if g.get("variant") else ""
        return f"{g['workload']} ({g['input']}{extra}) on {self.board}"

    @property
    def slug(self) -> str:
        g = self.group
        raw = "-".join(x for x in (g["platform"], g["workload"], g["input"], g["variant"]) if x)
        return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in raw)

    @property
    def has_freq(self) -> bool:
        return len({p.freq_mhz for p in self.points if p.freq_mhz is not None}) >= 2


# what each of store.LEFT_OUT means, in a caption's count ("3 runs marked for interference")
# and in a legend (short)
LEFT_OUT_WORDS = {"drift": ("from before a drift ('opptune status' lists drifts)",
                            "drift"),
                  "throttled": ("throttled", "throttled"),
                  "off": ("verifying a recommendation judged off", "judged off"),
                  "marked": ("marked for interference", "marked")}


def left_out(run: list[Any]) -> str | None:
    """Why the fit leaves a report run [cores, freq_mhz, time_s, energy_j, marked, left_out]
    out, None where it uses it. A daemon before left_out sends 5 fields (the mark only: a
    marked run is left out), one before the mark 4 (every run fitted)."""
    if len(run) > 5:
        return run[5]
    return "marked" if len(run) > 4 and run[4] else None


def median_points(runs: list[list[Any]]) -> list[Point]:
    """Report runs -> one point per configuration: the medians of the runs the fit uses;
    of those it leaves out where it has no other (Point.left_out says why)."""
    by: dict[tuple[int, float | None], list[list[Any]]] = {}
    for r in runs:
        by.setdefault((int(r[0]), None if r[1] is None else float(r[1])), []).append(r)
    out = []
    for (c, f), every in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0)):
        rs = [r for r in every if left_out(r) is None] or every
        energies = [r[3] for r in rs if r[3] is not None and r[3] > 0]
        times = [float(r[2]) for r in rs if r[2] is not None and r[2] > 0]
        # the time's median is pyperf's (shared/point_stats.py); only the median: point_stats'
        # interval and stability checks took 0.36 ms a point, 3 s for a store's 8,224
        out.append(Point(c, f, benchmark(times).median() if times else
                         statistics.median(r[2] for r in rs),
                         statistics.median(energies) if energies else None, len(rs),
                         tuple(sorted({str(left_out(r)) for r in rs if left_out(r)}))))
    return out


def left_out_counts(runs: list[list[Any]]) -> dict[str, int]:
    """How many of the report runs the fit leaves out, by reason (store.LEFT_OUT's order)."""
    counts: dict[str, int] = {}
    for r in runs:
        why = left_out(r)
        if why:
            counts[why] = counts.get(why, 0) + 1
    order = list(LEFT_OUT_WORDS)
    return dict(sorted(counts.items(), key=lambda kv: (order.index(kv[0])
                                                       if kv[0] in order else len(order))))


def left_out_text(counts: dict[str, int]) -> str:
    """``3 marked for interference, 2 throttled``: a count per reason, in words; of one
    reason its words only (the caller says the count: '12 left out ...: 12 from before')."""
    words = {why: LEFT_OUT_WORDS.get(why, (why,))[0] for why in counts}
    if len(counts) == 1:
        return next(iter(words.values()))
    return ", ".join(f"{n} {words[why]}" for why, n in counts.items())


def pareto_front(times: np.ndarray, energies: np.ndarray) -> list[int]:
    """Indices of the points no other point beats in both time and energy, fastest first."""
    t = np.asarray(times, float)
    e = np.asarray(energies, float)
    ok = np.flatnonzero(np.isfinite(t) & np.isfinite(e))
    front: list[int] = []
    best_e = np.inf
    for i in ok[np.lexsort((e[ok], t[ok]))]:
        if e[i] < best_e:
            front.append(int(i))
            best_e = e[i]
    return front


def analyse_group(entry: dict[str, Any], platform: dict[str, Any], board: str,
                  recommendation: dict[str, Any] | None,
                  others: list[FitSetting] | None = None) -> GroupView:
    """The view of one group from its runs, its board's description and its latest
    recommendation. ``others``: the fit settings of the groups whose replays size the
    interval as in the daemon's fit (recommend.platform_others)."""
    runs, view = _view(entry, board, recommendation)
    if not runs:
        view.model_note = "no successful runs"
        return view
    rows = _fit_rows(entry)
    if not rows:
        view.model_note = ("no runs a fit may use: every run is marked for interference, "
                           "throttled, or from before a drift of the group (of one of its "
                           "clusters, for a whole-board group, of the whole-board group, for a "
                           "cluster's: 'opptune status' lists drifts and what measures the "
                           "group again); the daemon re-measures "
                           "marked points when the board is quiet, accept_load = true fits "
                           "them")
        return view
    counts = sorted({r[0] for r in rows})
    if len(counts) < 2 and len({int(r[0]) for r in runs}) >= 2:
        # the fit's own words were "amdahl: fold 0: need at least 2 distinct core counts ...;
        # usl: ...; hold: ..." of a group measured at two, whose runs at one were all marked
        left = len(runs) - len(rows)
        view.model_note = (
            f"no model: the runs a fit may use are at {counts[0]} core"
            f"{'s' if counts[0] != 1 else ''} only, and a fit needs two core counts; "
            f"{left} of the {len(runs)} runs are left out: marked for interference, "
            "throttled, or from before a drift ('opptune status' says which; the daemon "
            "re-measures marked points when the board is quiet, accept_load = true fits them)")
        return view
    setting = fit_setting(platform, view.group.get("variant", ""), rows)
    order, axis = setting.order, setting.axis
    try:
        # the daemon's target (Recommender._submit): its push's candidates
        target = target_observations(platform, axis, max_cores=setting.measured_cores,
                                     order=order)
    except Exception:  # a platform the grid cannot be read from: validate by k-fold
        target = None
    try:
        model, _ = fit_group(observations(setting.rows, setting.phys_cores), target,
                             other_observations(others or []))
    except Exception as exc:
        view.model_note = f"no model: {exc}"
        return view
    view.model = model
    outliers = setting.outliers_left_out  # not left_out(): the module's function
    cv = model.quality.get("cv_mape")
    view.model_note = f"{model.name}" + (f", cross-validated MAPE {cv:.1f} %" if cv else "") \
        + (f", {outliers} outlier run{'s' if outliers != 1 else ''} (MAD rule) left out of "
           "the fit" if outliers else "")
    n = len(order)
    cores = np.arange(1, n + 1, dtype=float)
    # the frequencies the fit has runs at: one measured only by runs it leaves out (before a
    # drift) would get a curve the fit never saw
    measured_freqs = sorted({p.freq_mhz for p in view.points
                             if p.freq_mhz is not None and not p.left_out}) or [None]
    for f in measured_freqs:
        q = Observations.query(cores) if f is None or axis is None else \
            Observations.query(cores, np.full(n, f))
        pred = model.predict(q)
        view.curves.append(Curve(f, cores, np.asarray(pred.value, float),
                                 np.asarray(pred.lower, float), np.asarray(pred.upper, float)))
    if axis is not None:
        view.grid = _grid(view, model, platform, axis, order, runs)
    return view


def group_key(group: dict[str, Any]) -> tuple:
    """(platform, workload, input, variant): how the query's lists name a group."""
    return tuple(group.get(k) for k in ("platform", "workload", "input", "variant"))


def analyse_groups(entries: list[dict[str, Any]], platforms: dict[str, dict[str, Any]],
                   boards: dict[str, str], recs: dict[tuple, dict[str, Any]],
                   refit: set[int] | None = None, fits: dict[tuple, dict[str, Any]] | None = None,
                   count: Callable[[int, int], None] | None = None) -> list[GroupView]:
    """The view of each of the report query's groups. Those in ``refit`` (indices; None: all)
    are refitted (``analyse_group``) with their platform's other groups as the daemon fits
    them (recommend.platform_others); the others get their points and the daemon's stored fit
    as their note (``fits``: key -> the status's fit), no model: a refit costs 0.1-0.5 s.
    ``count(i, n)`` is told after each refit."""
    keys = [group_key(e["group"]) for e in entries]
    todo = set(range(len(entries))) if refit is None else set(refit)
    settings = [(k, fit_setting(platforms.get(k[0]) or {}, k[3] or "", _fit_rows(e)))
                for k, e in zip(keys, entries)] if todo else []
    views, done = [], 0
    for i, (e, k) in enumerate(zip(entries, keys)):
        board = boards.get(k[0], k[0])
        if i in todo:
            views.append(analyse_group(e, platforms.get(k[0]) or {}, board, recs.get(k),
                                       platform_others(k, settings)))
            done += 1
            if count:
                count(done, len(todo))
        else:
            views.append(listed_group(e, board, recs.get(k), (fits or {}).get(k)))
    return views


def listed_group(entry: dict[str, Any], board: str, recommendation: dict[str, Any] | None,
                 fit: dict[str, Any] | None) -> GroupView:
    """A group listed without a refit: its measured points and the daemon's stored fit."""
    runs, view = _view(entry, board, recommendation)
    view.model_note = stored_fit_note(fit) if runs else "no successful runs"
    return view


def _view(entry: dict[str, Any], board: str, recommendation: dict[str, Any] | None
          ) -> tuple[list[list[Any]], GroupView]:
    """(the group's successful runs, its view with their points and counts, unfitted)."""
    runs = [r for r in entry["runs"] if r[2] is not None and r[2] > 0]
    return runs, GroupView(entry["group"], board, median_points(runs),
                           recommendation=recommendation, stored_runs=len(runs),
                           left_out=left_out_counts(runs))


def stored_fit_note(fit: dict[str, Any] | None) -> str:
    """The daemon's latest fit of a group in words (the status's ``fits`` entry)."""
    if not fit:
        return "none stored by the daemon"
    cv = (fit.get("quality") or {}).get("cv_mape")
    drift = fit.get("predates_drift")
    if not isinstance(drift, dict):
        return f"{fit.get('model')}" + (f", cross-validated MAPE {cv:.1f} %" if cv else "") \
            + " (the daemon's fit)"
    # a changed program's drift (drift.agent_only) ends that agent's runs only
    gone = (f"agent {drift.get('agent')}'s runs it rests on no longer count, the platform's "
            "other agents' stay in" if drift.get("agent_only")
            else "the runs it rests on no longer count")
    return f"{fit.get('model')}" + (f", cross-validated MAPE {cv:.1f} %" if cv else "") \
        + " (the daemon's fit, made before a drift of " \
        + ("the group" if drift.get("variant") == (fit.get("group") or {}).get("variant")
           else f"its {drift.get('variant') or 'whole-board'} group") + f": {gone})"


def drawn_groups(entries: list[dict[str, Any]], recs: list[dict[str, Any]], most: int
                 ) -> list[int]:
    """Indices of the entries a report draws, at most ``most`` (0: all): the groups of the
    newest recommendations first (``recs``: oldest first, as the query lists them), then
    the others in the entries' order; returned in the entries' order."""
    if most <= 0 or most >= len(entries):
        return list(range(len(entries)))
    where = {group_key(e["group"]): i for i, e in enumerate(entries)}
    ranked = [where[k] for k in dict.fromkeys(group_key(r.get("group") or {})
                                              for r in reversed(recs)) if k in where]
    first = set(ranked)
    ranked += [i for i in range(len(entries)) if i not in first]
    return sorted(ranked[:most])


def _fit_rows(entry: dict[str, Any]) -> list[tuple[int, Any, float]]:
    """The rows the daemon's fit of this group uses (the report query's ``fit_runs``: marked
    and throttled runs left out as the daemon leaves them out); a daemon older than that
    field sends only ``runs``."""
    return _rows(entry["fit_runs"] if "fit_runs" in entry else entry["runs"])


def _rows(runs: list[list[Any]]) -> list[tuple[int, Any, float]]:
    """The report's runs [cores, freq_mhz, time_s, ...] as fit rows, those with a time."""
    return [(int(r[0]), r[1], float(r[2])) for r in runs if r[2] is not None and r[2] > 0]


def _grid(view: GroupView, model: FittedModel, platform: dict[str, Any], axis: list[int],
          order: list[int], runs: list[list[Any]]) -> Grid:
    _, cc, ff = candidate_grid(platform, axis, order=order)
    cores = sorted({int(c) for c in cc})
    freqs = sorted({float(f) / 1000.0 for f in ff})
    ci = {c: i for i, c in enumerate(cores)}
    fi = {f: j for j, f in enumerate(freqs)}
    q = Observations.query(cc, ff / 1000.0)
    t_pred = np.asarray(model.predict(q).value, float)
    time = np.full((len(cores), len(freqs)), np.nan)
    for c, f, t in zip(cc, ff / 1000.0, t_pred):
        time[ci[int(c)], fi[float(f)]] = t
    shown = [pt for pt in view.points if pt.freq_mhz in fi and pt.cores in ci]
    for pt in shown:  # measured configurations show their measured medians
        if not pt.left_out:
            time[ci[pt.cores], fi[pt.freq_mhz]] = pt.time_s
    hollow = [(pt.cores, pt.freq_mhz) for pt in shown if pt.left_out]

    def energy_of(rs: list[list[Any]]) -> list[list[Any]]:
        return [r for r in rs if r[3] is not None and r[3] > 0 and r[1] is not None]
    with_energy = energy_of([r for r in runs if left_out(r) is None])
    if not with_energy:
        # a board with a meter whose runs carry none: a real command on a virtual board, or
        # runs too short for the meter; "the board has no meter" contradicted its topology
        metered = (platform.get("energy") or {}).get("available")
        why = ("only runs the fit leaves out carry it" if energy_of(runs) else
               "the board has a meter, but it counted none of these runs" if metered
               else "the board has no meter")
        return Grid(cores, freqs, time, None, None, [],
                    f"no run of this group carries energy ({why}): no energy map and no "
                    "time/energy front", hollow)
    try:
        power = PowerModeler().fit(Observations(
            cores=np.array([r[0] for r in with_energy], float),
            time_s=np.array([r[2] for r in with_energy], float),
            freq_mhz=np.array([r[1] for r in with_energy], float),
            energy_j=np.array([r[3] for r in with_energy], float)))
        p_pred = np.asarray(power.predict(q).value, float)
    except Exception as exc:
        return Grid(cores, freqs, time, None, None, [], f"no power model: {exc}", hollow)
    energy = np.full_like(time, np.nan)
    for c, f, t, p in zip(cc, ff / 1000.0, t_pred, p_pred):
        energy[ci[int(c)], fi[float(f)]] = t * p
    measured = np.zeros(time.shape, bool)
    for pt in shown:
        if pt.energy_j is not None and not pt.left_out:
            energy[ci[pt.cores], fi[pt.freq_mhz]] = pt.energy_j
            measured[ci[pt.cores], fi[pt.freq_mhz]] = True
    flat = pareto_front(time.ravel(), energy.ravel())
    front = [(cores[k // len(freqs)], freqs[k % len(freqs)]) for k in flat]
    n_meas, n_all = int(measured.sum()), int(np.isfinite(energy).sum())
    # the kernel's energy model is an estimate, as 'opptune recommend' says ("modelled")
    source = str(((platform or {}).get("energy") or {}).get("source") or "")
    how = ("estimated by the kernel's energy model (no meter)"
           if source.startswith(ESTIMATE_SOURCES) else "measured by the board's meter")
    note = f"energy {how} at {n_meas} configuration{'s' if n_meas != 1 else ''}"
    if n_meas < n_all:  # "at the other 0 it is modelled" where every one was measured
        note += (f"; at the other {n_all - n_meas} it is modelled: time model x power model "
                 f"({power.name}, fitted to the {len(with_energy)} runs with energy)")
    else:
        note += ", every one offered: none modelled"
    return Grid(cores, freqs, time, energy, measured, front, note, hollow)


def latest_recommendations(recs: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The last recommendation per group (the query lists them oldest first)."""
    return {group_key(r.get("group") or {}): r for r in recs}


def topology_rows(platform: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, value) rows describing a board for people."""
    p = platform or {}

    def cpus(xs: Any) -> str:
        return " ".join("{" + format_cpu_list(x) + "}" for x in xs or [])
    rows = [("model", str(p.get("model_name") or "?")),
            ("architecture, kernel", f"{p.get('arch') or '?'}, {p.get('kernel') or '?'}"),
            ("cpus online", f"{p.get('n_cpus') or '?'}"),
            ("clusters", cpus(p.get("clusters"))),
            ("NUMA nodes", cpus(p.get("numa_nodes"))),
            ("SMT siblings", cpus([s for s in p.get("smt_siblings") or [] if len(s) > 1])
             or "none (one thread per core)")]
    rows += policy_rows(p)
    for knob in ("cpufreq", "perf", "energy"):
        info = p.get(knob) or {}
        # the source's kind, not its sysfs paths (those fill a line each)
        source = str(info.get("source") or "").split(":")[0]
        rows.append((knob, "available" + (f" ({source})" if source else "")
                     if info.get("available") else f"not available: {info.get('reason') or '?'}"))
    if p.get("virtual"):
        rows.append(("note", "a simulated (virtual) board: tests and demos"))
    return rows


def policy_rows(platform: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per set of cpufreq policies that read the same (driver, min-max, frequency
    table or range), their cpus as ranges: intel_pstate's policy per cpu made 32 identical
    rows on a 32-cpu board, and read "2 frequencies" for its range. (The platform names no
    governor: it is the doctor's, as of a hello.)"""
    freqs = ((platform.get("cpufreq") or {}).get("frequencies_khz")) or {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for pol in platform.get("policies") or []:
        name, driver = pol.get("name"), pol.get("driver")
        span = (offer_text(platform, str(name), driver) if freqs.get(name) else
                f"{(pol.get('cpuinfo_min_khz') or 0) // 1000}-"
                f"{(pol.get('cpuinfo_max_khz') or 0) // 1000} MHz")
        groups.setdefault((driver, span), []).append(pol)
    rows = []
    for (driver, span), pols in groups.items():
        sets = [p.get("cpus") or [] for p in pols]
        if len(sets) > 1 and all(len(s) == 1 for s in sets):
            where = format_cpu_list([s[0] for s in sets]) + ", a policy per cpu"
        else:  # policies of several cpus each keep their sets apart, as the clusters row
            where = " ".join("{" + format_cpu_list(s) + "}" for s in sets)
        names = [str(p.get("name")) for p in pols]
        numbered = [int(n[6:]) for n in names if re.fullmatch(r"policy\d+", n)]
        label = (f"policy{format_cpu_list(numbered)}" if len(numbered) == len(names) > 1
                 else ", ".join(names))
        # a range's text names its driver ("(continuous, intel_pstate)")
        said = "" if span.endswith(f", {driver})") else f"{driver or '?'}, "
        rows.append((f"cpufreq {label}", f"cpus {where}, {said}{span}"))
    return rows


def kernel_traits(view: GroupView) -> dict[str, Any] | None:
    """For a bench_suite kernel: measured speedup at its most cores (at the highest measured
    frequency), and the frequency exponent b of t ~ f^-b (1: compute-bound, 0: memory-bound)
    fitted to the medians across frequencies at each core count."""
    # the points the fit has runs of: a marked or superseded (drift) median is no trait
    points = [p for p in view.points if not p.left_out]
    if view.group["workload"] not in BENCH_KERNELS or not points:
        return None
    fmax = max((p.freq_mhz for p in points if p.freq_mhz is not None), default=None)
    at = [p for p in points if p.freq_mhz == fmax]
    one = [p for p in at if p.cores == 1]
    most = max(at, key=lambda p: p.cores)
    speedup = one[0].time_s / most.time_s if one else None
    exponent = None
    if view.has_freq:
        xs, ys = [], []
        for c in {p.cores for p in points}:
            pts = [p for p in points if p.cores == c and p.freq_mhz]
            if len(pts) >= 2:
                lf = np.log([p.freq_mhz for p in pts])
                lt = np.log([p.time_s for p in pts])
                xs.append(lf - lf.mean())
                ys.append(lt - lt.mean())
        if xs:
            x, y = np.concatenate(xs), np.concatenate(ys)
            exponent = float(-(x @ y) / (x @ x)) if x @ x > 0 else None
    return {"kernel": view.group["workload"], "variant": view.group.get("variant") or "",
            "max_cores": most.cores, "speedup": speedup, "freq_mhz": fmax,
            "freq_exponent": exponent,
            "memory_bound": None if exponent is None else float(np.clip(1 - exponent, 0, 1)),
            "model": view.model_note}


def fleet_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per agent: board, platform, alive, last seen, runs (successful) and failed
    runs (``not_run``: those of them never run), recommendations by state."""
    runs: dict[str, int] = {}
    failed: dict[str, int] = {}
    not_run: dict[str, int] = {}
    for r in data.get("runs") or []:
        runs[r["agent"]] = runs.get(r["agent"], 0) + int(r["count"])
        # None: a daemon older than the key counted failed runs in count
        failed[r["agent"]] = failed.get(r["agent"], 0) + int(r.get("failed") or 0)
        not_run[r["agent"]] = not_run.get(r["agent"], 0) + int(r.get("not_run") or 0)
    out = []
    for a in data.get("agents") or []:
        states: dict[str, int] = {}
        for r in data.get("recommendations") or []:
            if r.get("agent") == a["id"]:
                states[r["state"]] = states.get(r["state"], 0) + 1
        out.append({"agent": a["id"], "board": a.get("board"), "platform": a.get("platform"),
                    "alive": a.get("alive"), "last_seen_s": a.get("last_seen_s"),
                    "runs": runs.get(a["id"], 0), "failed": failed.get(a["id"], 0),
                    "not_run": not_run.get(a["id"], 0),
                    "recommendations": sum(states.values()),
                    "applied": sum(states.get(s, 0) for s in ("verified", "unconfirmed", "off",
                                                              "failed")),
                    "verified": states.get("verified", 0),
                    "unconfirmed": states.get("unconfirmed", 0), "off": states.get("off", 0)})
    return out
