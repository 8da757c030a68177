"""Operator subcommands `opptune fit` and `opptune predict` (its --fit form; the MPET forms
are mpet_predict_cli's), and the helpers `opptune eval` (eval_cli) shares with them.

analysis_args registers their parsers; each command is ``func(args) -> exit code``.
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
from .datasets import find_data, not_found_hint
from .fitter import candidates_for, with_pooled
from .models.calibrate import interval_state, with_interval
from .models.pooled import ReplayCache
from .recommend import platform_others
from .options import parse_frequencies
from .tidy import TidyError, median_reps, read_tidy

# models.energy and models.select (scipy.stats, over a second to import) are imported where
# fit and predict use them: every 'opptune' command builds this module's parsers, and
# 'opptune status' or 'sweep' should not wait for scipy

CV_KEYS = ("name", "cv_mape", "fit_ms", "error")  # one row of a fit's "cv" list
PIPED_WIDTH = 120  # the width a table with a fold column keeps to where output is piped


def _groups(path: str, zero_time: str = "error") -> list[tuple[str, Observations]]:
    """The groups of ``path`` (fit, eval): a file, or a shipped dataset named as the docs
    write it; a file that is not there is refused with the datasets found by name."""
    found = find_data(path)
    try:
        groups = read_tidy(found, zero_time=zero_time)
    except TidyError as exc:
        if not Path(found).exists():
            raise TidyError(f"{exc}{not_found_hint(path)}") from None
        raise
    return [(g.label, median_reps(g.obs)) for g in groups]


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

        from .console import UNBOUNDED_WIDTH, make_console
    except ImportError:
        print(title)
        for r in [head, *cells]:
            print("  ".join(r))
        return
    console = make_console()
    # piped (no screen, console.py's unbounded width) a fold column would stretch to its
    # longest cell, one very wide line per row; it wraps to keep the table near PIPED_WIDTH
    piped = console.width >= UNBOUNDED_WIDTH
    fixed = 1 + sum(max([len(h), *(len(r[j]) for r in cells)]) + 3
                    for j, h in enumerate(head) if h not in fold)
    t = Table(title=title)
    need = 1
    for j, h in enumerate(head):
        widest = max([len(h), *(len(r[j]) for r in cells)])
        if h in fold:
            # wide enough for its longest comma-separated item, so folds fall between items
            item = max([len(h), *(len(x) for r in cells for x in r[j].split(", "))])
            width = min(max(item + 1, 24), 48)
            most = max(width, PIPED_WIDTH - fixed - 3) if piped else None
            t.add_column(h, overflow="fold", min_width=width, max_width=most)
            need += width + 3
        else:
            t.add_column(h, no_wrap=True, min_width=widest, overflow="ignore")
            need += widest + 3
    for r in cells:
        t.add_row(*r)
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
    if named == []:
        print(f"opptune fit: --candidates {args.candidates!r} names no model; give model names "
              "separated by commas, 'daemon' (the default) or 'all'", file=sys.stderr)
        return 2
    out, rows, power_rows = [], [], []
    # the platform's other groups replayed through each group's split size its interval,
    # as in the daemon (fitter.fit_group); replays of this run's choice only
    replays = ReplayCache()
    from .models.select import choose

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
    from .models.energy import PowerModeler
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
        raise UsageError(f"--fit {path}: cannot read it: {exc.strerror or exc}; give the file "
                         f"a fit was saved to, or {remake}") from None
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
            asked = f"{name} {', '.join(f'{v:g}' for v in out)}{unit}"
            parts.append(f"{asked} outside the measured {lo:g}-{hi:g}{unit}" if lo < hi
                         else f"{asked}, where only {lo:g}{unit} was measured")
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
        fit_opts = [o for o, v in (("--cores", args.cores), ("--group", args.group)) if v]
        if fit_opts:
            # MPET predicts n = 1..the target's cores: ignoring them would print something
            # other than what was asked (--freq MHz picks the target's clock)
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
        freqs = parse_frequencies(args.freq, "MHz") if args.freq else [math.nan]
    except UsageError as exc:  # a ValueError too: caught first, its text names what it is
        print(f"opptune predict: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # parse_frequencies' (its text does not name the option)
        print(f"opptune predict: --freq {exc}", file=sys.stderr)
        return 2
    from .models.energy import PowerModeler, predict_energy
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
        measured_f = sorted(set((e.get("measured") or {}).get("freq_mhz") or []))
        if not args.freq and len(measured_f) > 1:
            lo, hi = f"{measured_f[0]:g}", f"{measured_f[-1]:g}"
            print(f"warning: group {e['group']} was fitted over {lo}-{hi} MHz: without --freq "
                  "its time is at no particular frequency and it has no power, energy or EDP; "
                  f"give --freq, e.g. --freq {lo},{hi}", file=sys.stderr)
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
                        + [f"{rec[k]['value']:.4g}" if rec[k] and math.isfinite(
                            rec[k]["value"]) else "-" for k in ("power_w", "energy_j", "edp")])
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
