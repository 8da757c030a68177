"""Operator subcommands `opptune fit`, `opptune predict` and `opptune eval` (eval: seed 003 sec. 4.3).

``add_parsers(subparsers)`` registers them; each sets ``func(args) -> exit code``.
Saved fits hold parameters (JSON), never pickles: only models with ``to_state`` (the analytic
ones) can be saved for ``predict``.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .models import registry
from .models.base import NotEnoughData, Observations
from .models.energy import PowerModeler, predict_energy
from .fitter import candidates_for, with_pooled
from .models.calibrate import interval_state, with_interval
from .models.pooled import ReplayCache
from .models.select import ANALYTIC, choose
from .recommend import platform_others
from .tidy import ZERO_TIME, TidyError, median_reps, read_tidy

SEED003_LEARNERS = ("krr", "svr", "dtree")
CV_KEYS = ("name", "cv_mape", "fit_ms", "error")  # one row of a fit's "cv" list


TIDY_HELP = ("CSV file, one row per run: platform, workload, input, variant, cores, freq_mhz, "
             "rep, time_s (optional: energy_j, power_w, counters)")


def add_parsers(subparsers: Any) -> None:
    """Add fit, predict and eval to an argparse subparsers object."""
    desc = ("Fit a performance model (time over cores and CPU frequency) to each "
            "platform/workload/input/variant group of a CSV of measurements, and a power model "
            "where the runs carry power or energy. Prints a table, or JSON with --json; --save "
            "keeps the fits for 'opptune predict'. Exit 1 when no group could be fitted, 2 on "
            "unreadable input.")
    p = subparsers.add_parser("fit", help="fit performance models to a CSV of measurements",
                              description=desc)
    p.add_argument("--data", required=True, metavar="FILE.csv", help=TIDY_HELP)
    p.add_argument("--model", default="auto",
                   help="amdahl, usl, memwall, ... or 'auto' (default): choose by "
                        "cross-validation, possibly a weighted mix of models")
    p.add_argument("--candidates", default="daemon", metavar="M1,M2",
                   help="the models 'auto' chooses from (default 'daemon': the daemon's, "
                        "amdahl and usl, and memwall where a group has a frequency axis; "
                        "'all' = every installed model)")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of a table (shape: docs/json-output.md)")
    p.add_argument("--save", metavar="FIT.json",
                   help="also write the fits to this file, for 'opptune predict'")
    _zero_times_option(p)
    p.set_defaults(func=cmd_fit)

    desc = ("With --fit FILE: run time (with a 90 % interval), and power, energy and "
            "energy-delay product where the fit has a power model, at the core counts and "
            "frequencies asked; warns where a query lies outside the measured core counts or "
            "frequencies. With --workload: MPET from a running daemon's measurements (below): "
            "t(n) with an interval, calibrated on the target's other workloads where it can "
            "be (its level stated). Exit 1 when nothing can be predicted or the daemon does not answer, 2 "
            "on unusable input.")
    p = subparsers.add_parser("predict", help="predict time (and energy) from a saved fit; "
                              "with --workload, a workload on a platform it never ran on "
                              "(--from P --to T) or beyond one core (--on P) by MPET",
                              description=desc)
    p.add_argument("--fit", metavar="FIT.json",
                   help="file written by 'opptune fit --save'")
    p.add_argument("--cores", metavar="1,2,4", help="core counts (with --fit)")
    p.add_argument("--freq", default="", metavar="MHz,MHz",
                   help="CPU frequencies in MHz; every core count is predicted at each")
    p.add_argument("--group", help="only groups whose label contains this text")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of a table (shape: docs/json-output.md)")
    from .mpet_predict_cli import add_predict_options
    add_predict_options(p)
    p.set_defaults(func=cmd_predict)

    desc = ("How prediction error falls with the number of measurements: for each training "
            "size, fit each model on random subsets of each group's configurations and measure "
            "its error on the rest (median MAPE of time, MSE of speedup). Says which sizes, "
            "groups and fits it left out and why.")
    p = subparsers.add_parser("eval", help="prediction error vs number of measurements",
                              description=desc)
    p.add_argument("--data", required=True, metavar="FILE.csv", help=TIDY_HELP)
    p.add_argument("--train-sizes", default="4,8,16,32,64,128", metavar="N1,N2",
                   help="numbers of training configurations (default: %(default)s)")
    p.add_argument("--reps", type=int, default=10,
                   help="random subsets per size (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random subsets")
    p.add_argument("--models", default="", metavar="M1,M2",
                   help="models to compare (default: amdahl, usl, memwall, and the krr, svr "
                        "and dtree learners where scikit-learn is installed)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (summary, what was left out, every fit) instead "
                        "of the table (shape: docs/json-output.md)")
    p.add_argument("--out", metavar="DIR", help="also write eval.jsonl and a plot, eval.png")
    p.add_argument("--time-from-speedup", action="store_true",
                   help="where time_s is empty, use 1/speedup from a 'speedup' column as a "
                        "relative time")
    p.add_argument("--group", default="", help="only groups whose label contains this text")
    _zero_times_option(p)
    p.set_defaults(func=cmd_eval)


def _zero_times_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zero-times", choices=ZERO_TIME, default="error",
                   help="a time of 0 in the CSV (a run shorter than its timer's resolution) is "
                        "an error (default) or read as missing")


def _groups(path: str, zero_time: str = "error") -> list[tuple[str, Observations]]:
    return [(g.label, median_reps(g.obs)) for g in read_tidy(path, zero_time=zero_time)]


def _prior(label: str, obs: Observations, groups: list[tuple[str, Observations]]
           ) -> Any:
    """A prior-based prediction (models/prior.py) for a group too small to fit, from the
    other groups of its platform (the label's first part); None when there are too few."""
    from .models.prior import StoredGroup, fit_prior
    platform, _, workload = label.partition("/")
    others = _platform_others(label, groups)
    # every group, labelled: this workload elsewhere first, platforms near by MPET last
    stored = [StoredGroup(lab.partition("/")[2], lab.partition("/")[0], o)
              for lab, o in groups if lab != label]
    try:
        return fit_prior(obs, others, workload=workload, platform=platform, stored=stored)
    except NotEnoughData:
        return None


def _platform_others(label: str, groups: list[tuple[str, Observations]]
                     ) -> list[Observations]:
    """The other groups of the label's platform (its first part), as the daemon gathers
    them (recommend.platform_others)."""
    return platform_others(label.split("/"), [(lab.split("/"), o) for lab, o in groups])


class UsageError(ValueError):
    """A command-line value that cannot be used (exit 2, one line)."""


def _numbers(text: str, option: str, whole: bool = False) -> list[float]:
    """Comma-separated positive numbers of ``option`` (whole numbers where ``whole``)."""
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or not all(math.isfinite(v) and v > 0 and (not whole or v == int(v))
                           for v in vals):
        kind = "whole numbers >= 1" if whole else "numbers > 0"
        raise UsageError(f"{option} needs comma-separated {kind}, e.g. "
                         f"{'1,2,4' if whole else '1000,1400'}; got {text!r}")
    return vals


def plain(x: Any, raw: tuple[str, ...] = ()) -> Any:
    """``x`` as strict JSON values: numpy scalars and arrays as Python numbers and lists,
    NaN and infinities (no value) as None. Values under a dict key in ``raw`` are kept as
    they are (a model's saved state must reload exactly, NaN and infinity included)."""
    if isinstance(x, dict):
        return {str(k): v if k in raw else plain(v, raw) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v, raw) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def dump_json(obj: Any) -> str:
    """Strict JSON (no NaN or Infinity tokens, which JSON does not have)."""
    return json.dumps(plain(obj), allow_nan=False)


def measured_range(obs: Observations) -> dict[str, Any]:
    """The measured core counts and frequencies (MHz; None when the runs carry none) of a
    group: ``predict`` warns when a query leaves them."""
    ok = np.isfinite(obs.time_s) & (obs.time_s > 0)
    cores = obs.cores[ok]
    fq = (np.asarray(obs.freq_mhz, float)[ok] if obs.freq_mhz is not None
          else np.array([]))
    fq = fq[np.isfinite(fq)]
    return {"cores": [int(c) for c in np.unique(cores)],
            "freq_mhz": [float(f) for f in np.unique(fq)] if fq.size else None}


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _table(title: str, head: list[str], rows: list[list[Any]], fold: tuple[str, ...] = ()
           ) -> None:
    """Rows as a table. Cells are never cut: columns in ``fold`` wrap their long cells onto
    more lines, the others keep their widest cell whole (the table grows past the terminal's
    width rather than eliding a group label or a number)."""
    cells = [[_fmt(c) for c in r] for r in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        for r in [head, *cells]:
            print("  ".join(r))
        return
    t = Table(title=title)
    need = 1
    for j, h in enumerate(head):
        widest = max([len(h), *(len(r[j]) for r in cells)])
        if h in fold:
            # wide enough for its longest comma-separated item, so folds fall between items
            item = max([len(h), *(len(x) for r in cells for x in r[j].split(", "))])
            width = min(max(item + 1, 24), 48)
            t.add_column(h, overflow="fold", min_width=width)
            need += width + 3
        else:
            t.add_column(h, no_wrap=True, min_width=widest, overflow="ignore")
            need += widest + 3
    for r in cells:
        t.add_row(*r)
    console = Console()
    if console.width < need:
        console = Console(width=need)
    console.print(t)


# -- fit / predict ----------------------------------------------------------------------------

def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written (checked before a fit that may take minutes), or None."""
    p = Path(path)
    if p.is_dir():
        return os.strerror(errno.EISDIR)
    if not p.parent.is_dir():
        return os.strerror(errno.ENOENT)
    if not os.access(p if p.exists() else p.parent, os.W_OK):
        return os.strerror(errno.EACCES)
    return None


def cmd_fit(args: argparse.Namespace) -> int:
    why = _unwritable(args.save) if args.save else None
    if why:
        print(f"opptune fit: --save {args.save}: cannot write: {why}", file=sys.stderr)
        return 2
    try:
        groups = _groups(args.data, args.zero_times)
    except TidyError as exc:
        print(f"opptune fit: {exc}", file=sys.stderr)
        return 2
    named = None if args.candidates in ("all", "daemon") else [
        c for c in args.candidates.split(",") if c]
    out, rows, power_rows = [], [], []
    # the platform's other groups replayed through each group's split size its interval,
    # as in the daemon (fitter.fit_group); replays of this run's choice only
    replays = ReplayCache()

    def candidates(o: Observations) -> list[str] | None:
        return candidates_for(o) if args.candidates == "daemon" else named

    def choice(o: Observations, target: Any = None) -> Any:
        return choose(o, candidates(o)).model
    for label, obs in groups:
        entry: dict[str, Any] = {"group": label, "model": None, "params": None,
                                 "quality": None, "members": None, "cv": None, "fit_ms": None,
                                 "measured": measured_range(obs), "state": None, "interval": None,
                                 "power": None, "error": None}
        power = fit_power(obs)
        if power is not None:
            entry["power"] = power
            power_rows.append([label, power.get("form", "-"),
                               f"{power['quality']['mape']:.2f}" if "quality" in power else "",
                               power.get("error") or ", ".join(
                                   f"{k}={v:.4g}" for k, v in power["params"].items())])
        try:
            t0 = time.perf_counter()
            if args.model == "auto":
                sel = choose(obs, candidates(obs))
                model = with_pooled(sel.model, obs, None, _platform_others(label, groups),
                                    choice, replays)
                entry["cv"] = [{k: r.get(k) for k in CV_KEYS} for r in sel.table()]
            else:
                model = registry.get(args.model).fit(obs)
            entry["fit_ms"] = 1e3 * (time.perf_counter() - t0)
        except NotEnoughData as exc:
            model = _prior(label, obs, groups) if args.model == "auto" else None
            if model is None:
                entry["error"] = str(exc)
                out.append(entry)
                rows.append([label, "-", "", "", str(exc)])
                continue
            entry["fit_ms"] = 1e3 * (time.perf_counter() - t0)
        except ValueError as exc:            # unknown model name
            print(f"opptune fit: {exc}", file=sys.stderr)
            return 2
        entry.update({k: v for k, v in model.describe().items() if k in entry})
        if hasattr(model, "to_state"):
            entry["state"] = model.to_state()
            # the state is the wrapped model's: the calibrated / pooled interval beside it
            entry["interval"] = interval_state(model)
        out.append(entry)
        params = ", ".join(f"{k}={v:.4g}" for k, v in model.params.items())
        if model.quality.get("prior_based"):
            params = (f"prior-based: {model.quality.get('prior_source')}; a best guess with a "
                      "wide interval, not a fit")
        rows.append([label, model.name, f"{model.quality['mape']:.2f}",
                     f"{entry['fit_ms']:.0f}", params])
    if args.json:
        print(dump_json(out))
    else:
        _table(f"fits of {args.data}", ["group", "model", "train MAPE %", "fit ms", "parameters"], rows,
               fold=("parameters",))
        if power_rows:
            _table(f"power models of {args.data} (W over cores x frequency)",
                   ["group", "form", "train MAPE %", "parameters"], power_rows,
                   fold=("parameters",))
    if args.save:
        # states keep NaN/Infinity (Python's JSON reads them back) so that predict reloads
        # exactly what was fitted; everything else is strict JSON
        saved = plain({"format": FIT_FORMAT, "data": args.data, "fits": out},
                      raw=("state", "interval"))
        try:
            Path(args.save).write_text(json.dumps(saved, default=float, indent=1))
        except OSError as exc:  # the disk filled, or the directory went, while fitting
            print(f"opptune fit: --save {args.save}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
    return 0 if any(e["error"] is None for e in out) else 1     # 1: no group could be fitted


def fit_power(obs: Observations) -> dict[str, Any] | None:
    """The power model fitted alongside the time model where the runs carry power or energy
    (models/energy.py): its description and state, or its error; None without such columns."""
    if obs.power_w is None and obs.energy_j is None:
        return None
    try:
        fitted = PowerModeler().fit(obs)
    except NotEnoughData as exc:
        return {"error": str(exc)}
    return {**fitted.describe(), "form": fitted.form, "state": fitted.to_state()}


def load_fit(entry: dict[str, Any]) -> Any:
    """A fitted model back from one saved entry (analytic models only)."""
    if not isinstance(entry.get("state"), dict):
        raise ValueError(f"group {entry.get('group')}: model {entry.get('model')} was saved "
                         "without parameters that can be reloaded")
    modeler = registry.get(entry["model"])
    for key, val in entry["state"].get("options", {}).items():
        setattr(modeler, key, val)
    return with_interval(modeler.from_state(entry["state"]), entry.get("interval"),
                         lambda name, state: registry.get(name).from_state(state))


FIT_FORMAT = "opptune-fits/1"


def read_fits(path: str) -> list[dict[str, Any]]:
    """The saved entries of a file written by ``opptune fit --save``; UsageError naming the
    file and what is wrong with it otherwise."""
    remake = "write one with: opptune fit --data FILE.csv --save FIT.json"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a saved fit (not UTF-8 text); {remake}") from None
    try:
        saved = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path} is not a saved fit (not JSON: line {exc.lineno} column "
                         f"{exc.colno}: {exc.msg}); {remake}") from None
    if not isinstance(saved, dict) or saved.get("format") != FIT_FORMAT:
        raise UsageError(f"{path} is JSON but not a saved fit (no \"format\": "
                         f"\"{FIT_FORMAT}\"); {remake}")
    fits = saved.get("fits")
    if not isinstance(fits, list) or not all(isinstance(e, dict) and isinstance(
            e.get("group"), str) for e in fits):
        raise UsageError(f"{path}: 'fits' must be a list of fitted groups, each with a "
                         f"'group' label; the file is damaged; {remake}")
    return fits


def outside(measured: dict[str, Any] | None, cores: float, freq: float) -> list[str] | None:
    """The axes ("cores", "freq_mhz") on which a query point lies beyond the measured range
    of a fit ([] inside it); None when the saved fit does not record its range."""
    if not isinstance(measured, dict) or not measured.get("cores"):
        return None
    axes = []
    if not min(measured["cores"]) <= cores <= max(measured["cores"]):
        axes.append("cores")
    fq = measured.get("freq_mhz")
    if fq and math.isfinite(freq) and not min(fq) <= freq <= max(fq):
        axes.append("freq_mhz")
    return axes


def warn_extrapolation(entry: dict[str, Any], query: Observations,
                       beyond: list[list[str] | None]) -> None:
    """One stderr line per group whose query leaves the measured cores or frequencies."""
    m = entry.get("measured")
    parts = []
    for axis, values, unit in (("cores", query.cores, ""), ("freq_mhz", query.freq_mhz, " MHz")):
        out = sorted({float(v) for v, b in zip(values, beyond) if b and axis in b})
        if out:
            lo, hi = min(m[axis]), max(m[axis])
            name = "cores" if axis == "cores" else "frequency"
            parts.append(f"{name} {', '.join(f'{v:g}' for v in out)}{unit} outside the "
                         f"measured {lo:g}-{hi:g}{unit}")
    if parts:
        print(f"warning: group {entry['group']}: {'; '.join(parts)}: those predictions are "
              "extrapolated (less reliable; measure there to be sure)", file=sys.stderr)
    elif any(b is None for b in beyond):
        print(f"warning: group {entry['group']}: the saved fit does not record its measured "
              "range (fit saved by an older version), so extrapolation cannot be flagged",
              file=sys.stderr)


def cmd_predict(args: argparse.Namespace) -> int:
    mpet = (args.source, args.target, args.workload, getattr(args, "on", None),
            getattr(args, "edits", None), getattr(args, "edits_file", None))
    if args.fit is None or any(mpet):
        from .mpet_predict_cli import cmd_predict_mpet
        if args.fit is not None:
            print("opptune predict: give either --fit FILE --cores N (a saved fit) or "
                  "--workload A with --from P --to T or --on P (MPET), not both",
                  file=sys.stderr)
            return 2
        fit_opts = [o for o, v in (("--cores", args.cores), ("--freq", args.freq),
                                   ("--group", args.group)) if v]
        if fit_opts:
            # MPET predicts n = 1..the target's cores at its measured frequency: ignoring
            # them would print something other than what was asked
            print(f"opptune predict: {', '.join(fit_opts)} "
                  f"{'goes' if len(fit_opts) == 1 else 'go'} with --fit FILE, not with the "
                  "MPET forms (they predict n = 1 up to the cores the target was measured on)",
                  file=sys.stderr)
            return 2
        return cmd_predict_mpet(args)
    daemon_opts = [o for o, v in (("--size", args.size), ("--daemon", args.daemon),
                                  ("--config", args.config)) if v is not None]
    if daemon_opts:
        # they choose the daemon's measurements MPET predicts from; a saved fit has its own
        print(f"opptune predict: {', '.join(daemon_opts)} "
              f"{'goes' if len(daemon_opts) == 1 else 'go'} with the MPET forms (--workload A "
              "with --from P --to T or --on P), not with --fit FILE", file=sys.stderr)
        return 2
    if not args.cores:
        print("opptune predict: --fit needs --cores, e.g. --cores 1,2,4", file=sys.stderr)
        return 2
    try:
        entries = read_fits(args.fit)
        cores = _numbers(args.cores, "--cores", whole=True)
        freqs = _numbers(args.freq, "--freq") if args.freq else [math.nan]
    except UsageError as exc:
        print(f"opptune predict: {exc}", file=sys.stderr)
        return 2
    cc, ff = np.meshgrid(cores, freqs, indexing="ij")
    query = Observations.query(cc.ravel(), ff.ravel())
    out, rows = [], []
    for e in entries:
        if e.get("error") or (args.group and args.group not in e["group"]):
            continue
        try:
            model = load_fit(e)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # a damaged or foreign entry: the other groups can still be predicted
            print(f"warning: group {e['group']}: cannot load its fit "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        pr = model.predict(query)
        # energy and EDP where a power model was fitted alongside (models/energy.py)
        state = (e.get("power") or {}).get("state")
        extra = {} if state is None else predict_energy(model, PowerModeler().from_state(state),
                                                         query)
        beyond = [outside(e.get("measured"), query.cores[i], query.freq_mhz[i])
                  for i in range(len(query))]
        warn_extrapolation(e, query, beyond)
        for i in range(len(query)):
            rec = {"group": e["group"], "model": e["model"], "cores": int(query.cores[i]),
                   "freq_mhz": None if math.isnan(query.freq_mhz[i]) else query.freq_mhz[i],
                   "time_s": pr.value[i], "lower": pr.lower[i], "upper": pr.upper[i],
                   "level": pr.level, "extrapolated": beyond[i]}
            for key in ("power_w", "energy_j", "edp"):
                x = extra.get(key)
                rec[key] = (None if x is None else
                            {"value": x.value[i], "lower": x.lower[i], "upper": x.upper[i]})
            out.append(rec)
            rows.append([e["group"], e["model"], int(rec["cores"]), rec["freq_mhz"] or "-",
                         f"{rec['time_s']:.4g}", f"[{rec['lower']:.4g}, {rec['upper']:.4g}]"]
                        + [f"{rec[k]['value']:.4g}" if rec[k] else "-"
                           for k in ("power_w", "energy_j", "edp")])
    if not out:
        fitted = [e["group"] for e in entries if not e.get("error")]
        if not fitted:
            why = "it holds no successful fit"
        elif args.group and not any(args.group in g for g in fitted):
            why = f"no fitted group contains {args.group!r}"
        else:
            why = "none of its fits could be loaded (warnings above)"
        # a dataset of a hundred groups would make the line unreadable: the first few
        shown = ", ".join(fitted[:8]) + (f", ... ({len(fitted) - 8} more; 'opptune fit' lists "
                                         "them)" if len(fitted) > 8 else "")
        print(f"opptune predict: nothing to predict from {args.fit}: {why}"
              + (f"; fitted groups: {shown}" if fitted else ""), file=sys.stderr)
        return 1
    if args.json:
        print(dump_json(out))
    else:
        cols = ["group", "model", "cores", "MHz", "time", "90% interval",
                "power W", "energy J", "EDP J*s"]
        if not any(r["power_w"] for r in out):
            cols, rows = cols[:6], [r[:6] for r in rows]
        _table("predicted time (s)", cols, rows)
    return 0


# -- eval (seed 003 section 4.3) --------------------------------------------------------------

def _speedup(times: np.ndarray, obs: Observations, ref: np.ndarray) -> np.ndarray:
    return ref / times


def _t1_ref(obs: Observations) -> np.ndarray:
    """Measured single-core time at each row's frequency (speedup reference, eq. 1); where a
    frequency has no p = 1 row, the smallest core count's time times its cores."""
    fq = np.nan_to_num(obs.freq_mhz if obs.freq_mhz is not None else np.zeros(len(obs)), nan=0.0)
    ref = np.empty(len(obs))
    for f in np.unique(fq):
        at = fq == f
        i = np.flatnonzero(at)[np.argmin(obs.cores[at])]
        ref[at] = obs.time_s[i] * obs.cores[i]
    return ref


def default_eval_models() -> list[str]:
    avail = set(registry.available())
    return [m for m in (*ANALYTIC, *SEED003_LEARNERS) if m in avail]


def training_mask(n: int, size: int, seed: int, group_index: int, rep: int) -> np.ndarray:
    """The random training subset of one draw of ``eval``: ``size`` of ``n`` configurations,
    seeded by (seed, group index, size, rep) so every model and every later run sees the same
    draw."""
    rng = np.random.default_rng([seed, group_index, size, rep])
    train = np.zeros(n, bool)
    train[rng.choice(n, size, replace=False)] = True
    return train


def run_eval(groups: list[tuple[str, Observations]], sizes: list[int], reps: int, seed: int,
             models: list[str]) -> list[dict[str, Any]]:
    """One record per (group, model, size, rep): test MSE of speedup and MAPE of time on all
    configurations outside the random training subset (seeded per group, size and rep)."""
    records = []
    for gi, (label, obs) in enumerate(groups):
        ok = np.isfinite(obs.time_s) & (obs.time_s > 0)
        obs = obs.subset(ok)
        n = len(obs)
        ref = _t1_ref(obs) if n else np.array([])
        for size in sizes:
            if size >= n:
                continue
            for rep in range(reps):
                train = training_mask(n, size, seed, gi, rep)
                test = obs.subset(~train)
                for name in models:
                    rec = {"group": label, "model": name, "size": size, "rep": rep,
                           "n_test": int((~train).sum()), "fit_s": None, "mape": None,
                           "mse_speedup": None, "error": None}
                    try:
                        t0 = time.perf_counter()
                        fitted = registry.get(name).fit(obs.subset(train))
                        rec["fit_s"] = time.perf_counter() - t0
                        pred = fitted.predict(test).value
                        truth = test.time_s
                        rec["mape"] = float(np.mean(100 * np.abs(pred - truth) / truth))
                        rec["mse_speedup"] = float(np.mean((ref[~train] / pred - ref[~train] / truth) ** 2))
                    except NotEnoughData as exc:
                        rec["error"] = str(exc)
                    records.append(rec)
    return records


def eval_drops(groups: list[tuple[str, Observations]], sizes: list[int],
               records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``run_eval`` left out and why: one entry per (group, size) it skipped, per group
    whose rows without a time > 0 it left out, and per (group, model, size) whose fits failed
    (keys group, size, model, reason; None where an entry is about every size or model)."""
    drops: list[dict[str, Any]] = []
    for label, obs in groups:
        ok = np.isfinite(obs.time_s) & (obs.time_s > 0)
        n = int(ok.sum())
        if n < len(obs):
            drops.append({"group": label, "size": None, "model": None,
                          "reason": f"{len(obs) - n} of {len(obs)} configurations have no "
                                    "time > 0 and were left out"})
        for size in sizes:
            if size >= n:
                drops.append({"group": label, "size": size, "model": None,
                              "reason": f"size {size} >= the group's {n} configurations with a "
                                        "time: none would be left to test"})
    failed: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("error") is not None:
            failed.setdefault((r["group"], r["size"], r["model"]), []).append(r)
    reps = {}
    for r in records:
        k = (r["group"], r["size"], r["model"])
        reps[k] = reps.get(k, 0) + 1
    for (label, size, model), rs in failed.items():
        drops.append({"group": label, "size": size, "model": model,
                      "reason": f"{len(rs)} of {reps[(label, size, model)]} fits failed: "
                                f"{rs[0]['error']}"})
    return drops


def _say_drops(drops: list[dict[str, Any]], n_groups: int) -> None:
    """The drops on stderr, one line per size and model (or reason) rather than per group."""
    lines: dict[tuple, list[dict[str, Any]]] = {}
    for d in drops:
        if d["model"] is not None:
            key: tuple = (d["size"], d["model"], "")
        elif d["size"] is not None:
            key = (d["size"], None, "it has fewer configurations with a time than the size, "
                                    "so none would be left to test")
        else:
            key = (None, None, "configurations without a time > 0 left out")
        lines.setdefault(key, []).append(d)
    for (size, model, reason), ds in lines.items():
        who = "; ".join(d["group"] for d in ds[:4]) + (" ..." if len(ds) > 4 else "")
        if model is not None:
            print(f"note: eval size {size}, model {model}: fits failed in {len(ds)} of "
                  f"{n_groups} groups ({ds[0]['reason']}): {who}", file=sys.stderr)
        elif size is not None:
            print(f"note: eval left out size {size} for {len(ds)} of {n_groups} groups "
                  f"({reason}): {who}", file=sys.stderr)
        else:
            print(f"note: eval: {reason} in {len(ds)} of {n_groups} groups: "
                  + "; ".join(f"{d['group']} ({d['reason'].split(' have')[0]})" for d in ds[:4])
                  + (" ..." if len(ds) > 4 else ""), file=sys.stderr)


def summarise(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, float]]:
    """Median over groups and reps per (model, size) of MAPE and speedup MSE."""
    acc: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in records:
        if r.get("mape") is not None:
            a = acc.setdefault((r["model"], r["size"]), {"mape": [], "mse_speedup": []})
            a["mape"].append(r["mape"])
            a["mse_speedup"].append(r["mse_speedup"])
    return {k: {"median_mape": float(np.median(v["mape"])),
                "median_mse_speedup": float(np.median(v["mse_speedup"])), "fits": len(v["mape"])}
            for k, v in sorted(acc.items())}


def plot_eval(summary: dict[tuple[str, int], dict[str, float]], path: Path) -> None:
    """Median error vs number of measurements (log x), one line per model (Agg backend)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for model in sorted({m for m, _ in summary}):
        pts = sorted((s, v) for (m, s), v in summary.items() if m == model)
        xs = [s for s, _ in pts]
        axes[0].plot(xs, [v["median_mse_speedup"] for _, v in pts], marker="o", label=model)
        axes[1].plot(xs, [v["median_mape"] for _, v in pts], marker="o", label=model)
    for ax, title in zip(axes, ("median MSE of speedup", "median MAPE of time (%)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("number of measurements (training set)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def relative_time_from_speedup(obs: Observations) -> Observations:
    """Rows without a time get 1/speedup (time relative to the reference configuration; MAPE
    and speedup ratios do not depend on the unit)."""
    sp = obs.counters.get("speedup")
    if sp is None:
        return obs
    out = obs.subset(np.arange(len(obs)))
    miss = ~np.isfinite(out.time_s) & np.isfinite(sp) & (sp > 0)
    out.time_s = np.where(miss, 1.0 / np.where(sp > 0, sp, 1.0), out.time_s)
    return out


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        groups = _groups(args.data, args.zero_times)
    except TidyError as exc:
        print(f"opptune eval: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "group", ""):
        labels = [lab for lab, _ in groups]
        groups = [(lab, o) for lab, o in groups if args.group in lab]
        if not groups:
            print(f"opptune eval: no group of {args.data} contains {args.group!r}; groups: "
                  f"{', '.join(labels)}", file=sys.stderr)
            return 2
    if getattr(args, "time_from_speedup", False):
        groups = [(lab, relative_time_from_speedup(o)) for lab, o in groups]
    models = [m for m in args.models.split(",") if m] or default_eval_models()
    for m in models:
        try:
            registry.get(m)
        except (ValueError, ImportError, AttributeError) as exc:
            print(f"opptune eval: model {m}: {exc}", file=sys.stderr)
            return 2
    try:
        sizes = [int(s) for s in _numbers(args.train_sizes, "--train-sizes", whole=True)]
        if args.reps < 1:
            raise UsageError(f"--reps needs a whole number >= 1 (random subsets per size), "
                             f"got {args.reps}")
    except UsageError as exc:
        print(f"opptune eval: {exc}", file=sys.stderr)
        return 2
    records = run_eval(groups, sizes, args.reps, args.seed, models)
    if not records:
        largest = max(int(np.sum(np.isfinite(o.time_s) & (o.time_s > 0))) for _, o in groups)
        print(f"opptune eval: every training size ({args.train_sizes}) leaves no test configuration: "
              f"the largest group has {largest} configurations with a time; give smaller sizes",
              file=sys.stderr)
        return 2
    summary = summarise(records)
    if not summary:
        print(f"opptune eval: no fit succeeded ({len(records)} tried); e.g. {records[0]['model']} on "
              f"{records[0]['group']} at size {records[0]['size']}: {records[0]['error']}",
              file=sys.stderr)
        return 1
    drops = eval_drops(groups, sizes, records)
    if args.json:
        print(dump_json({
            "data": args.data, "models": models, "sizes": sizes, "reps": args.reps,
            "seed": args.seed,
            "summary": [{"model": m, "size": s, **v} for (m, s), v in summary.items()],
            "dropped": drops, "records": records}))
    else:
        _say_drops(drops, len(groups))
        _table(f"median over groups x {args.reps} reps",
               ["model", "size", "MAPE %", "MSE speedup", "fits"],
               [[m, s, f"{v['median_mape']:.2f}", f"{v['median_mse_speedup']:.4g}", v["fits"]]
                for (m, s), v in summary.items()])
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "eval.jsonl").open("w") as fh:
            for r in records:
                fh.write(dump_json(r) + "\n")
        if summary:
            plot_eval(summary, out / "eval.png")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (python3 -m opptune.daemon.fit_cli fit ...)."""
    ap = argparse.ArgumentParser(prog="opptune")
    add_parsers(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
