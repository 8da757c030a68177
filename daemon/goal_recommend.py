"""A recommendation for a user's goal (time, energy, EDP, ED2P; deadline, power cap) over a
board's candidate configurations (pure: no I/O).

A workload's runs come as one group per cpu order: the board's (variant ``""``) or, on a
big.LITTLE board swept per cluster, one per cluster (``cluster<i>``). Each group's time and
power are fitted by :meth:`sampling.Sampler.estimate` over its candidate grid
(:func:`recommend.candidate_grid`); the choice (:func:`objectives.choose`) compares every
group's grid together, so a goal's recommendation says which cluster wins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from .fitter import set_clock_rows, set_clocks_khz
from .objectives import Goal, choose, feasible
from .planner import cluster_order, cluster_orders
from .recommend import candidate_grid
from .sampling import Grid, Measured, Sampler

# Energy sources that are estimates (the kernel energy model times busy time), not a meter.
ESTIMATE_SOURCES = ("energy-model-estimate",)

Row = tuple  # (cores, freq_mhz, time_s, energy_j, energy_source)


class GoalError(ValueError):
    """No recommendation for this goal; the message names what is missing."""


# a board whose meter counted none of a workload's runs: a real command on a virtual board
# (its counters move for the modelled runs only), or runs shorter than the meter's resolution
SILENT_METER = ("the board's meter ({meter}) counted none of them (a real command on a "
                "virtual board, or runs shorter than its resolution)")


class NoPowerData(GoalError):
    """The goal needs power or energy and no run has any."""


class NotMeasured(GoalError):
    """The restriction asked for (a cluster, a core budget) has no measured candidates."""


@dataclass
class Interval:
    value: float | None
    lower: float | None
    upper: float | None


@dataclass
class GoalRecommendation:
    goal: dict[str, Any]
    goal_text: str
    variant: str  # the group it comes from: "" (whole board) or "cluster<i>"
    cluster: int | None  # the cluster (index into platform["clusters"]) of a per-cluster group
    cores: int
    cpus: list[int]
    threads: int
    freq_khz: int | None
    freq_per_policy: dict[str, int | None]  # cpufreq policy -> kHz (None: governor's choice)
    time_s: Interval
    power_w: Interval
    energy_j: Interval
    objective_value: float
    unit: str
    met: bool  # False: nothing meets the limits; this is the closest (see note)
    note: str | None
    margin: float | None  # (runner-up's objective - this one's) / this one's
    runner_up: dict[str, Any] | None  # cores, freq_khz, variant, objective_value
    n_measurements: int  # runs the fit rests on (every candidate group)
    n_configurations: int  # distinct configurations measured
    n_candidates: int
    energy: str  # "measured" | "modelled" | "none"
    energy_source: str | None  # the runs' energy_source values
    meter: str | None  # the board's energy meter (its platform description), if any
    model: str
    power_model: str | None
    # the model's best lies beyond the most cores measured and was not recommended (None: it
    # did not, or --max-cores allowed it)
    beyond: str | None = None
    # candidates not measured whose predicted intervals reach within the goal's limits (the
    # configurations measuring more could find); None for a goal without limits
    could_meet: int | None = None
    # what the intervals assume where no configuration was measured twice (None: the noise
    # was measured)
    noise: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Part:
    """One segment of a group's candidate grid with its measurements (see :func:`_parts`)."""
    variant: str
    order: list[int]
    grid: Grid
    measured: Measured
    allowed: np.ndarray  # grid points this part offers (an anchor point may be fitted only)
    sources: set[str] = field(default_factory=set)
    # the one frequency every run of a grid without a frequency axis was set at (kHz; None:
    # left to the governor, or no cpufreq): the configuration is recommended there
    clock_khz: int | None = None


def grid_for(platform: dict[str, Any], variant: str, clocks_khz: Sequence[int]
             ) -> tuple[list[int], Grid]:
    """The candidate grid of one group: its cpu order and every (cores, frequency) it offers;
    with a frequency axis when its runs were set at two or more clocks (fitter.set_clocks_khz)."""
    order = cluster_order(platform, variant)
    fitted = list(clocks_khz)
    order, cc, ff = candidate_grid(platform, fitted if len(fitted) >= 2 else None, order=order)
    return order, Grid(cc, None if ff is None else ff / 1000.0)


def cluster_bounds(platform: dict[str, Any], order: list[int]) -> list[int]:
    """Core counts at which ``order`` has filled whole clusters (the last is len(order)):
    [4, 8] on a big.LITTLE board swept LITTLE first; [n] on a board of one cluster."""
    clusters = [set(c) for c in cluster_orders(platform)]
    out = []
    for k in range(1, len(order) + 1):
        used = set(order[:k])
        if all(c <= used or not (c & used) for c in clusters):
            out.append(k)
    return [k for k in out if k > 0] if len(clusters) > 1 else [len(order)]


def _parts(platform: dict[str, Any], variant: str, rows: Sequence[Row]) -> list[Part]:
    """One part per segment of the group's cpu order between cluster boundaries. A
    whole-board sweep of a big.LITTLE board is two regimes (power per core jumps where the
    big cores join): each segment is fitted on its own runs, the one below it (the cores
    already filled) as its anchor. Runs left to the governor are left out where any run has a
    set frequency (fitter.set_clock_rows: as the daemon's fit leaves them out)."""
    rows = set_clock_rows(rows)
    clocks = set_clocks_khz(rows)
    order, grid = grid_for(platform, variant, clocks)
    clock = clocks[0] if grid.freq_mhz is None and len(clocks) == 1 else None
    bounds = cluster_bounds(platform, order) if not variant else [len(order)]
    parts, lo = [], 0
    for hi in bounds:
        keep = (grid.cores >= max(lo, 1)) & (grid.cores <= hi)
        sub = Grid(grid.cores[keep], None if grid.freq_mhz is None else grid.freq_mhz[keep])
        part = fill_part(Part(variant, order, sub, Measured(), sub.cores > lo,
                              clock_khz=clock), rows)
        parts.append(part)
        lo = hi
    fitted = [p for p in parts if len(set(p.measured.index)) >= 4]
    if len(fitted) == len(parts):
        return parts
    # too few runs in a segment to fit it alone: the whole group as one part
    return [fill_part(Part(variant, order, grid, Measured(), np.ones(len(grid), bool),
                           clock_khz=clock), rows)]


def fill_part(part: Part, rows: Sequence[Row]) -> Part:
    """``part`` with the runs of ``rows`` that lie on its grid added to its measurements."""
    grid = part.grid
    index = {}
    for i in range(len(grid)):
        f = None if grid.freq_mhz is None else round(float(grid.freq_mhz[i]))
        index[(int(grid.cores[i]), f)] = i
    for c, f, t, e, src in rows:
        key = (int(c), None if grid.freq_mhz is None or f is None else round(f))
        i = index.get(key)
        if i is None or not t:
            continue  # outside this part's grid (or a frequency no policy offers now)
        part.measured.add(i, t, e / t if e is not None else float("nan"))
        if e is not None and src:
            part.sources.add(str(src))
    return part


def _policies(platform: dict[str, Any], cpus: list[int], freq_khz: int | None
              ) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    want = set(cpus)
    for pol in platform.get("policies") or []:
        if set(pol.get("related_cpus") or pol.get("cpus") or []) & want and pol.get("name"):
            out[str(pol["name"])] = freq_khz
    return out


def _variant_cluster(variant: str) -> int | None:
    return int(variant[7:]) if variant.startswith("cluster") and variant[7:].isdigit() else None


def _estimated(source: str, meter: str | None) -> bool:
    """Whether a run's energy source is an estimate: the kernel energy model, or energy the
    workload reported itself (a virtual board's model) on a board whose meter is that model."""
    if source.startswith(ESTIMATE_SOURCES):
        return True
    return source == "workload" and bool(meter) and str(meter).startswith(ESTIMATE_SOURCES)


def per_configuration(measured: Measured) -> tuple[Measured, dict[int, int], float, float]:
    """Repeated runs of one configuration as one measurement (their medians: the Sampler
    takes one value per configuration), the run count per configuration, and the pooled
    run-to-run noise (standard deviation of log time, of log power; 0 without repeats)."""
    by: dict[int, list[tuple[float, float]]] = {}
    for i, t, p in zip(measured.index, measured.time_s, measured.power_w):
        by.setdefault(i, []).append((t, p))
    out, counts = Measured(), {}
    ss = np.zeros(2)  # sums of squared log deviations from each configuration's mean: t, P
    dof = np.zeros(2)
    for i, vals in by.items():
        arr = np.asarray(vals, float)
        t, p = arr[:, 0], arr[:, 1][np.isfinite(arr[:, 1]) & (arr[:, 1] > 0)]
        out.add(i, float(np.median(t)), float(np.median(p)) if p.size else float("nan"))
        counts[i] = len(vals)
        for k, x in enumerate((t, p)):
            if x.size > 1:
                ss[k] += float(np.sum((np.log(x) - np.log(x).mean()) ** 2))
                dof[k] += x.size - 1
    sig = np.sqrt(np.divide(ss, dof, out=np.zeros(2), where=dof > 0))
    return out, counts, float(sig[0]), float(sig[1])


# The run-to-run noise (1 sigma of log time or power) assumed before any configuration was
# measured twice, and its weight in pseudo degrees of freedom: as the surrogate's model error
# (models/surrogate.py), so that one run per configuration gives no zero-width interval (a
# 2-configuration tune of 1 run each claimed 0.09111..0.09111 s and judged -8.6 % "off").
# below this speedup from the fewest cores measured to at least twice as many, a program is
# said not to use the cores it is given (a note, not a model: nothing is fitted to it)
FLAT_SPEEDUP = 1.1


def flat_scaling(groups: dict[str, Sequence[Sequence[Any]]]) -> tuple[int, int, float] | None:
    """(fewest cores, most cores, speedup between them) where a group's runs at one clock
    at the most cores measured, at least twice the fewest, are not FLAT_SPEEDUP times as
    fast as at the fewest (medians); the widest such span; None where every span scales.
    ``groups``: variant -> rows of (cores, freq_mhz, time_s, ...)."""
    found = None
    for rows in groups.values():
        by: dict[Any, dict[int, list[float]]] = {}
        for row in rows:
            by.setdefault(row[1], {}).setdefault(int(row[0]), []).append(float(row[2]))
        for per in by.values():
            lo, hi = min(per), max(per)
            if hi < 2 * lo:
                continue
            speedup = float(np.median(per[lo]) / np.median(per[hi]))
            if speedup < FLAT_SPEEDUP and (found is None or hi / lo > found[1] / found[0]):
                found = (lo, hi, speedup)
    return found


NOISE_PRIOR = 0.05
NOISE_PRIOR_DOF = 2.0


def noise_dof(counts: dict[int, int]) -> int:
    """Degrees of freedom of the pooled noise of :func:`per_configuration`'s ``counts``."""
    return sum(n - 1 for n in counts.values())


def noise_half_width(sigma: float, runs: int, verify_runs: int, level: float = 0.9,
                     dof: int | None = None) -> float:
    """Half-width (log units) of the interval that a verification's median of ``verify_runs``
    runs falls in around a configuration's value known from ``runs`` runs (0: modelled),
    from the run-to-run noise alone: var(log median of m) ~ pi/2 sigma^2 / m. With ``dof``
    (the degrees of freedom ``sigma`` was estimated with) the noise is pooled with
    NOISE_PRIOR and the quantile is Student's t (the posterior predictive under a scaled
    inverse chi-square prior): few repeats give a wide interval, none the prior's."""
    # scipy.stats' norm.ppf and t.ppf, without importing scipy.stats (seconds on a busy board)
    from scipy.special import ndtri, stdtrit
    q = ndtri(0.5 + level / 2)
    if dof is not None:
        sigma = float(np.sqrt((dof * sigma ** 2 + NOISE_PRIOR_DOF * NOISE_PRIOR ** 2)
                              / (dof + NOISE_PRIOR_DOF)))
        q = stdtrit(dof + NOISE_PRIOR_DOF, 0.5 + level / 2)
    var = sigma ** 2 * ((1.0 / runs if runs else 0.0) + np.pi / 2 / max(verify_runs, 1))
    return float(q * np.sqrt(var))


def noise_unknown_text() -> str:
    """The note on intervals whose run-to-run noise no repeated run measured."""
    return (f"no configuration was measured twice, so the run-to-run noise is unknown: the "
            f"intervals assume {NOISE_PRIOR * 100:g} %; sweep or tune with --reps 2 or more to "
            "measure it")


def _could_meet(goal: Goal, ests: list, offered: np.ndarray, t_lo: np.ndarray,
                p_lo: np.ndarray | None) -> int | None:
    """How many ``offered`` candidates not measured have predicted lower bounds within the
    goal's deadline and power cap (where power is modelled): those measuring more could
    find; None for a goal without limits."""
    if goal.deadline_s is None and goal.power_cap_w is None:
        return None
    unmeasured = np.concatenate([~np.isin(np.arange(len(p.grid)), p.measured.index)
                                 for p, _ in ests])
    ok = offered & unmeasured
    if goal.deadline_s is not None:
        ok &= np.nan_to_num(t_lo, nan=np.inf) <= goal.deadline_s
    if goal.power_cap_w is not None and p_lo is not None:
        ok &= np.nan_to_num(p_lo, nan=np.inf) <= goal.power_cap_w
    return int(ok.sum())


def recommend_goal(goal: Goal, platform: dict[str, Any], groups: dict[str, Sequence[Row]],
                   cluster: int | None = None, max_cores: int | None = None,
                   tolerance: float = 0.0, verify_runs: int = 3) -> GoalRecommendation:
    """The configuration that best serves ``goal`` among the candidates of ``groups``
    (variant -> runs). Per-cluster groups are used when there are any (``cluster`` keeps
    one); ``max_cores`` caps the core count. The intervals hold at least the run-to-run
    noise a verification of ``verify_runs`` runs will see. GoalError names what is missing."""
    per_cluster = {v: r for v, r in groups.items() if _variant_cluster(v) is not None and r}
    if cluster is not None:
        name = f"cluster{cluster}"
        if name not in per_cluster:
            n_clusters = len(cluster_orders(platform))
            if not 0 <= cluster < n_clusters:
                raise NotMeasured(f"the board has no cluster {cluster}: its clusters are "
                                  f"{', '.join(map(str, range(n_clusters)))}")
            have = ", ".join(sorted(per_cluster)) or "none (the board was swept as a whole)"
            raise NotMeasured(f"no per-cluster measurements for cluster {cluster}; "
                              f"measured clusters: {have}; 'opptune tune --cluster {cluster}' "
                              "measures that cluster alone")
        chosen = {name: per_cluster[name]}
    elif per_cluster:
        chosen = per_cluster
    elif groups.get(""):
        chosen = {"": groups[""]}
    else:
        raise GoalError("no run that a fit may use to recommend from")
    parts = [p for v, rows in sorted(chosen.items()) for p in _parts(platform, v, rows)]
    parts = [p for p in parts if len(p.measured)]
    if not parts:
        raise GoalError("no run lies on the board's candidate grid")
    has_power = any(np.isfinite(p.measured.power_w).any() for p in parts)
    meter_info = platform.get("energy") if isinstance(platform.get("energy"), dict) else {}
    meter = meter_info.get("source") if meter_info.get("available") else None
    if goal.needs_power and not has_power:
        if meter:  # a real command on a virtual board, or runs too short for the meter
            raise NoPowerData(f"{goal.describe()} needs energy or power, and no run of this "
                              f"workload has any: {SILENT_METER.format(meter=meter)}; use "
                              "--objective time")
        why = f" ({meter_info['reason']})" if meter_info.get("reason") else ""
        raise NoPowerData(f"{goal.describe()} needs energy or power, and no run of this "
                          f"workload has any: the board has no energy meter{why}; use "
                          "--objective time, or measure on a board with RAPL, hwmon power "
                          "sensors or an energy model")
    sampler = Sampler(goal, tolerance=tolerance)
    ests, errors = [], []
    noise = []  # per part: (runs per configuration, sigma log t, sigma log P)
    for p in parts:
        once, counts, sig_t, sig_p = per_configuration(p.measured)
        try:
            ests.append((p, sampler.estimate(p.grid, once)))
            noise.append((counts, sig_t, sig_p))
        except ValueError as exc:
            errors.append(f"{p.variant or 'board'}: {exc}")
    if not ests:
        raise GoalError("no model to recommend from: " + "; ".join(errors))
    # One choice over every group's grid together.
    t = np.concatenate([e.time_s for _, e in ests])
    power_ok = all(e.power_w is not None for _, e in ests)

    def cat(name: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(e, name), float) if getattr(e, name)
                               is not None else np.full(len(p.grid), np.nan) for p, e in ests])

    p_val, p_lo, p_hi = (cat("power_w"), cat("power_lower"), cat("power_upper"))
    cores = np.concatenate([p.grid.cores for p, _ in ests])
    freq = np.concatenate([p.grid.freq_khz if p.grid.freq_khz is not None
                           else np.full(len(p.grid), p.clock_khz or np.nan) for p, _ in ests])
    owner = np.concatenate([np.full(len(p.grid), k) for k, (p, _) in enumerate(ests)])
    allowed = np.concatenate([p.allowed for p, _ in ests])
    beyond = None
    if max_cores:
        allowed &= cores <= max_cores
    offered = allowed.copy()  # what a tune could measure (beyond the measured cores too)
    if not max_cores:
        # Without a --max-cores, no more cores than a part measured: a model fitted on 1..k
        # cores predicts n >> k with an interval that knows nothing of what happens there
        # (x86-2numa measured at 1-2 cores: 31 cores "0.0008 s (0.0007..0.0011)", truly
        # about 0.0048 s). Between measured counts it interpolates as before.
        most = np.concatenate([np.full(len(p.grid), max(int(p.grid.cores[j])
                                                         for j in p.measured.index))
                               for p, _ in ests])
        within = allowed & (cores <= most)
        if within.any() and (within != allowed).any():
            free = choose(goal, np.where(allowed, t, np.nan), p_val if power_ok else None,
                          cores, freq, tolerance,
                          ok=feasible(goal, t, p_val if power_ok else None) & allowed)
            if cores[free.index] > most[free.index]:
                seen = int(most[free.index])
                beyond = (f"the model's best, {int(cores[free.index])} cores, lies beyond the "
                          f"{seen} core{'s' if seen != 1 else ''} measured: not recommended (measure "
                          "more cores, or give --max-cores to allow a prediction there)")
            allowed = within
    if not allowed.any():
        raise NotMeasured(f"no candidate has at most {max_cores} cores")
    could_meet = _could_meet(goal, ests, offered, cat("time_lower"),
                             cat("power_lower") if power_ok else None)
    ok = feasible(goal, t, p_val if power_ok else None) & allowed
    big = np.where(allowed, t, np.nan)
    c = choose(goal, big, p_val if power_ok else None, cores, freq, tolerance, ok=ok)
    i = c.index
    part = ests[int(owner[i])][0]
    k = int(cores[i])
    cpus = part.order[:k]
    f_khz = None if not np.isfinite(freq[i]) else int(freq[i])
    runner = None
    if c.runner_up is not None:
        r = c.runner_up
        rp = ests[int(owner[r])][0]
        runner = {"cores": int(cores[r]), "cpus": rp.order[:int(cores[r])],
                  "freq_khz": None if not np.isfinite(freq[r]) else int(freq[r]),
                  "variant": rp.variant, "cluster": _variant_cluster(rp.variant),
                  "objective_value": float(c.value * (1 + c.margin))}
    t_lo, t_hi = cat("time_lower"), cat("time_upper")
    counts, sig_t, sig_p = noise[int(owner[i])]
    j = i - int(np.flatnonzero(owner == owner[i])[0])  # index within its part's grid
    runs_i = counts.get(j, 0)
    dof = noise_dof(counts)
    h_t = noise_half_width(sig_t, runs_i, verify_runs, dof=dof)
    h_p = noise_half_width(sig_p, runs_i, verify_runs, dof=dof)
    t_lo[i], t_hi[i] = min(t_lo[i], t[i] * np.exp(-h_t)), max(t_hi[i], t[i] * np.exp(h_t))
    p_lo[i], p_hi[i] = min(p_lo[i], p_val[i] * np.exp(-h_p)), max(p_hi[i], p_val[i] * np.exp(h_p))

    def num(a: np.ndarray) -> float | None:
        v = float(a[i])
        return v if np.isfinite(v) else None

    sources = set().union(*(p.sources for p, _ in ests))
    if not has_power:
        energy = "none"
    elif sources and all(_estimated(s, meter) for s in sources):
        energy = "modelled"
    else:
        energy = "measured"
    e_val = e_lo = e_hi = None
    if power_ok and num(p_val) is not None:
        e_val = num(p_val) * num(t)
        e_lo = (num(p_lo) or 0.0) * (num(t_lo) or 0.0)
        e_hi = (num(p_hi) or 0.0) * (num(t_hi) or 0.0)
    measured = [p.measured for p, _ in ests]
    # an anchor run belongs to two segments: count each measurement once
    runs = sum(len(m) for m in measured) - sum(
        sum(1 for j in m.index if not p.allowed[j]) for p, m in
        zip([p for p, _ in ests], measured))
    configs = sum(len({j for j in m.index if p.allowed[j]})
                  for p, m in zip([p for p, _ in ests], measured))
    return GoalRecommendation(
        goal=goal.as_dict(), goal_text=goal.describe(), variant=part.variant,
        cluster=_variant_cluster(part.variant), cores=k, cpus=cpus, threads=k, freq_khz=f_khz,
        freq_per_policy=_policies(platform, cpus, f_khz),
        time_s=Interval(num(t), num(t_lo), num(t_hi)),
        power_w=Interval(num(p_val), num(p_lo), num(p_hi)),
        energy_j=Interval(e_val, e_lo, e_hi), objective_value=float(c.value),
        unit=goal.unit, met=c.met, note=c.note, margin=c.margin, runner_up=runner,
        n_measurements=runs, n_configurations=configs, n_candidates=int(allowed.sum()),
        energy=energy, energy_source=", ".join(sorted(sources)) or None, meter=meter,
        model=", ".join(sorted({e.model for _, e in ests})),
        power_model=", ".join(sorted({e.power_model for _, e in ests if e.power_model}))
        or None, beyond=beyond, could_meet=could_meet, noise=noise_unknown_text() if dof == 0 else None)
