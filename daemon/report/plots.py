"""The report's figures as PNG files (matplotlib, Agg backend: no display needed).

One function per kind of figure; each takes an analysed group (analysis.GroupView) and a path,
writes the PNG and returns nothing.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import LEFT_OUT_WORDS, GroupView  # noqa: E402

DPI = 90
# Fixed margins (fractions of the figure) for the figures whose labels have a known width:
# tight_layout draws a figure once more to measure them, half the time of a heatmap. The
# scaling figure keeps it: its log axis's labels (4 x 10^0) vary in width
MAP = {"left": 0.1, "right": 0.97, "bottom": 0.2, "top": 0.93}  # the legend below
PLANE = {"left": 0.14, "right": 0.95, "bottom": 0.12, "top": 0.92}


def _lay_out(fig: plt.Figure, margins: dict[str, float] | None = None) -> plt.Figure:
    if margins is None:
        fig.tight_layout()
    else:
        fig.subplots_adjust(**margins)
    return fig


def _save(fig: plt.Figure, path: Path, margins: dict[str, float] | None = None) -> None:
    _lay_out(fig, margins).savefig(path, dpi=DPI)
    plt.close(fig)


def _rec_point(view: GroupView) -> tuple[int, float | None] | None:
    r = view.recommendation
    if not r:
        return None
    f = r.get("freq_khz")
    return int(r["cores"]), None if f is None else f / 1000.0


def left_out_label(view: GroupView) -> str:
    """The legend's words for the configurations whose runs the fit all leaves out, and
    why ('left out of the fit: marked, before a drift'); empty when there is none."""
    why = sorted({w for p in view.points for w in p.left_out},
                 key=lambda w: list(LEFT_OUT_WORDS).index(w) if w in LEFT_OUT_WORDS else 9)
    return ("not fitted: " + ", ".join(LEFT_OUT_WORDS.get(w, ("", w))[1] for w in why)
            if why else "")


def scaling(view: GroupView, path: Path) -> None:
    """Time over cores: medians and single runs measured, the model's curve with its
    prediction interval, one colour per measured frequency; the recommendation as a star."""
    _save(scaling_figure(view), path)


def scaling_figure(view: GroupView) -> plt.Figure:
    """:func:`scaling`'s figure, laid out and not yet saved."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    colours = plt.get_cmap("viridis")
    curves = view.curves or []
    freqs = sorted({p.freq_mhz for p in view.points}, key=lambda f: f or 0.0)
    for k, f in enumerate(freqs):
        colour = colours(k / max(len(freqs) - 1, 1))
        label = "governor" if f is None else f"{f:g} MHz"
        pts = [p for p in view.points if p.freq_mhz == f and not p.left_out]
        ax.plot([p.cores for p in pts], [p.time_s for p in pts], "o", color=colour,
                label=f"measured, {label}")
        # hollow: a configuration whose runs the fit all leaves out (marked, throttled, from
        # before a drift); its median is drawn so that the measurement is seen, not trusted
        pts = [p for p in view.points if p.freq_mhz == f and p.left_out]
        ax.plot([p.cores for p in pts], [p.time_s for p in pts], "o", mfc="none", mec=colour)
        for c in curves:
            if c.freq_mhz == f or (len(curves) == 1 and len(freqs) == 1):
                ax.plot(c.cores, c.value, "-", color=colour, lw=1.2)
                ax.fill_between(c.cores, c.lower, c.upper, color=colour, alpha=0.18, lw=0)
    hollow = left_out_label(view)
    if hollow:
        ax.plot([], [], "o", mfc="none", mec="grey", label=hollow)
    rec = _rec_point(view)
    if rec is not None and view.recommendation.get("predicted_time_s"):
        r = view.recommendation
        y = r.get("verified_time_s") or r["predicted_time_s"]
        ax.plot([rec[0]], [y], "*", ms=16, color="crimson", mec="black",
                label=f"recommended: {rec[0]} cores" + (f" at {rec[1]:g} MHz" if rec[1] else ""))
    if curves:
        # the model's name only: the page says its validation and outliers above the figure,
        # and the whole note made the legend as wide as the axes
        ax.plot([], [], "-", color="grey",
                label=f"model: {view.model.name if view.model else view.model_note}")
        ax.fill_between([], [], [], color="grey", alpha=0.18, label="90 % prediction interval")
    ax.set_xlabel("cores")
    ax.set_ylabel("time (s, log scale)")
    ax.set_yscale("log")  # curves an order of magnitude apart (frequencies) stay readable
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(view.label, fontsize=10)
    ax.grid(alpha=0.3)
    # below the axes: inside (upper right) it hid the one-core points of the slowest clock
    # and the recommended star under it; the figure grows by the legend's rows
    labels = ax.get_legend_handles_labels()[1]
    n = len(labels)
    # three columns of the longest label ('not fitted: before a drift, throttled, marked')
    # were wider than the figure
    ncol = min(n, 3 if max(map(len, labels), default=0) <= 30 else 2) or 1
    fig.set_size_inches(6.4, 4.0 + 0.17 * -(-n // ncol))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=ncol,
              frameon=False)
    return _lay_out(fig)


def heatmap(view: GroupView, which: str, path: Path) -> None:
    """``which`` = "time" or "energy" over cores x frequency, with the measured points
    (circles), the time/energy Pareto front (white diamonds) and the recommendation (star)."""
    g = view.grid
    assert g is not None
    values = g.time_s if which == "time" else g.energy_j
    assert values is not None
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    x = np.arange(len(g.freqs_mhz))
    y = np.arange(len(g.cores))
    mesh = ax.pcolormesh(x, y, np.ma.masked_invalid(values), shading="nearest",
                         cmap="magma_r")
    fig.colorbar(mesh, ax=ax, label="time (s)" if which == "time" else "energy (J)")
    fx = {f: i for i, f in enumerate(g.freqs_mhz)}
    cy = {c: i for i, c in enumerate(g.cores)}
    meas = [(fx[p.freq_mhz], cy[p.cores]) for p in view.points
            if p.freq_mhz in fx and p.cores in cy and not p.left_out]
    if meas:
        ax.plot(*zip(*meas), "o", mfc="none", mec="cyan", ms=8, label="measured")
    if g.pareto:
        px, py = zip(*[(fx[f], cy[c]) for c, f in g.pareto])
        # markers only: joined in time order the front zigzags across the map
        ax.plot(px, py, "D", color="white", mec="black", ms=6,
                label="time/energy Pareto front")
    if g.left_out:
        # measured by runs the fit leaves out only: the cell shows the prediction, and says
        # so (over the front's diamonds, which such a cell may be on)
        ax.plot(*zip(*[(fx[f], cy[c]) for c, f in g.left_out]), "x", color="cyan", ms=8,
                mew=1.6, label="not fitted: predicted")
    rec = _rec_point(view)
    if rec is not None and rec[1] in fx and rec[0] in cy:
        ax.plot([fx[rec[1]]], [cy[rec[0]]], "*", ms=18, color="lime", mec="black",
                label="recommended")
    step = max(1, len(g.freqs_mhz) // 10)
    ax.set_xticks(x[::step], [f"{f:g}" for f in g.freqs_mhz][::step], fontsize=7)
    ystep = max(1, len(g.cores) // 16)
    ax.set_yticks(y[::ystep], [str(c) for c in g.cores][::ystep])
    ax.set_xlabel("frequency (MHz)")
    ax.set_ylabel("cores")
    ax.set_title(f"{which}: {view.label}", fontsize=10)
    # below the map: inside, it would hide the top row where the front often runs
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              frameon=False)
    _save(fig, path, MAP)


def tradeoff(view: GroupView, path: Path) -> None:
    """Every offered configuration in time x energy; the Pareto front, the measured ones and
    the recommendation marked."""
    g = view.grid
    assert g is not None and g.energy_j is not None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ok = np.isfinite(g.time_s) & np.isfinite(g.energy_j)
    ax.scatter(g.time_s[ok], g.energy_j[ok], s=12, c="lightgrey", label="offered configurations")
    m = ok & g.energy_measured
    ax.scatter(g.time_s[m], g.energy_j[m], s=28, facecolors="none", edgecolors="tab:blue",
               label="measured")
    fx = {f: i for i, f in enumerate(g.freqs_mhz)}
    cy = {c: i for i, c in enumerate(g.cores)}
    if g.pareto:
        idx = [(cy[c], fx[f]) for c, f in g.pareto]
        ax.plot([g.time_s[i] for i in idx], [g.energy_j[i] for i in idx], "D-",
                color="tab:orange", ms=5, label="Pareto front")
    rec = _rec_point(view)
    if rec is not None and rec[1] in fx and rec[0] in cy:
        i = (cy[rec[0]], fx[rec[1]])
        ax.plot([g.time_s[i]], [g.energy_j[i]], "*", ms=16, color="crimson", mec="black",
                label=f"recommended: {rec[0]} cores at {rec[1]:g} MHz")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("energy (J)")
    ax.set_title(f"time vs energy: {view.label}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path, PLANE)
