"""`opptune eval-mpet`: seed 000's leave-one-out evaluation over CSVs of measurements, several
CSVs as one database (``--combine``) or a running daemon's store (``--daemon``).

Reads the repository's tidy CSVs (platform, workload, variant, cores, time_s, hw_* columns),
turns them into the MPET database (daemon.models.mpet_database) and prints Table 5's figures for
MPET beside the naive t(1)/n and the source platform's curve.

Platform = ``platform`` (with ``:variant`` when the variant is not empty or "all": XU3 big/little
are different cores), and ``@<freq_mhz>MHz`` where that platform's rows carry more than one
``freq_mhz``: each frequency is a platform of its own (a workload's speed and scaling change with
the clock; its runs at several frequencies are no repeats). Breakpoints (seed 000 section 3.1),
unless the CSV has ``n_nu``/``n_ht``:
- n_ht = hw_phys_cores when more threads than physical cores were run (SMT or oversubscription);
- n_nu = physical cores / sockets when hw_cpu says "(N sockets)" or the board is a known
  dual-socket one (KNOWN_SOCKETS), else hw_l3_shared_by when
  the last-level cache is shared by fewer cores than the machine has (two dies), else for a
  heterogeneous "all-*" variant the core count of its "big" variant (the second cluster
  joins there);
- otherwise absent.
Optional columns ``R, l, w, c, d, s, j`` (runtime MPET parameters) and ``counter.NAME`` go into
the profile; repeated runs of one core count are reduced to their median.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .models.mpet_curve import PARAMS
from .models.mpet_eval import (KINDS, METHODS, evaluate, evaluate_nested, evaluate_scalability,
                               operating_points)
from .models.mpet_database import MpetDatabase
from .models.mpet_predict import (DEFAULT_SC, DEFAULT_T1, RATIO_SC, RATIO_T1, SEED_SC,
                                  SEED_T1)
from ..shared.config import DaemonConfig
from .datasets import find_data, not_found_hint
from .mpet_answer import clock_queries, merge_answer, store_rows, write_store_csv
from .objectives import fewest_within
from .progress import terminal_counter, terminal_progress
from .analysis_args import DEFAULT_DATA, SETUPS, STORE_TIMEOUT_S

SEED_TABLE5 = {"t1": 0.154, "scaling": 0.127, "full": 0.199}
# the operating point's rule, the recommender's: the fewest cores within its default
# tolerance (5 %) of the best
TOLERANCE = DaemonConfig.tolerance
# --scenario b's one setup (predict_scalability with the seed's sc selection), named in its
# results as the SETUPS are in scenario a's
SCENARIO_B_SETUP = ("scalability", "the seed's sc selection: up to 10 other workloads on the "
                    "platform by D_a, eq. 16, over the 1-core profile's elements, weighted "
                    "with k = 3, eq. 22; f = 1 in eq. 21")
# Sockets the CSV columns do not tell: xplat_npb_minife's SOURCE.md lists these boards as
# "2x Xeon" while their hw_l3_shared_by column counts both sockets' cores.
KNOWN_SOCKETS = {"Supermicro_X10DRi": 2, "Supermicro_X9DR3-F": 2}


class MpetInputError(ValueError):
    """Unusable input; the message says what and what to do."""


# optional numeric columns besides counter.*: the runtime parameters and the topology
# the most cpus a Linux kernel can run (CONFIG_NR_CPUS at most 8192): more is a typo
MAX_CORES = 8192
NUMERIC_COLUMNS = frozenset((*PARAMS, "n_nu", "n_ht", "hw_phys_cores", "hw_l3_shared_by"))


def _float(text: str | None) -> float | None:
    if text is None or not str(text).strip():
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _number_or_empty(text: str | None) -> bool:
    try:
        float(text or "nan")
    except ValueError:
        return False
    return True


def read_error(path, exc: Exception) -> MpetInputError:
    """A CSV that cannot be read, in one message: an OSError by its strerror (its str()
    repeats the errno and the path)."""
    if isinstance(exc, UnicodeDecodeError):
        # no offset: the decoder sees the file in chunks, so exc.start is within one
        why = (f"not a text file (it holds bytes such as 0x{exc.object[exc.start]:02x} that "
               f"are not UTF-8)")
    else:
        why = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else str(exc)
    hint = not_found_hint(str(path)) if isinstance(exc, FileNotFoundError) else ""
    return MpetInputError(f"cannot read {path}: {why}; give a CSV of measurements{hint}")


def load_csv(path: str | Path) -> tuple[dict, dict]:
    """(profiles, platforms) of an MPET database from one tidy CSV (see the module docstring)."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = set(reader.fieldnames or ())
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise read_error(path, exc)
    need = {"platform", "workload", "cores", "time_s"}
    if not columns:
        raise MpetInputError(f"{path}: the file is empty; give a CSV with columns platform, "
                             f"workload, cores and time_s (one row per run)")
    if need - columns:
        raise MpetInputError(f"{path}: missing {', '.join(sorted(need - columns))}; the CSV "
                             f"needs columns platform, workload, cores and time_s (one row "
                             f"per run)")
    if not rows:
        raise MpetInputError(f"{path}: no rows of measurements under its header; give a CSV "
                             f"with one row per run")
    times: dict[tuple, dict[int, list[float]]] = {}
    extra: dict[tuple, dict[int, dict[str, list[float]]]] = {}
    hw: dict[str, dict] = {}
    freqs: dict[str, set[str]] = {}
    for r in rows:
        freqs.setdefault(_platform_name(r), set()).add(_freq_label(r))
    for i, r in enumerate(rows, start=2):
        variant = (r.get("variant") or "").strip()
        plat = _platform_name(r)
        if len(freqs[plat]) > 1 and _freq_label(r):
            plat += f"@{_freq_label(r)}MHz"
        work = (r["workload"] or "").strip()
        cores, t = _float(r.get("cores")), _float(r.get("time_s"))
        if not plat or not work or cores is None or not 1 <= cores <= MAX_CORES \
                or cores != int(cores) or t is None or t <= 0:
            raise MpetInputError(f"{path} line {i}: need a platform, a workload, cores from 1 "
                                 f"to {MAX_CORES} (integer) and time_s > 0; fix or remove the "
                                 f"row")
        n = int(cores)
        for col, val in r.items():
            # an optional number given as text would otherwise read as missing, unsaid (nan,
            # as the store's CSV may write an uncounted value, stays missing)
            if (col in NUMERIC_COLUMNS or (col or "").startswith("counter.")) and \
                    not _number_or_empty(val):
                raise MpetInputError(f"{path} line {i}: {col} {val!r} is not a number; give "
                                     f"a number or leave the cell empty")
        times.setdefault((work, plat), {}).setdefault(n, []).append(t)
        for col, val in r.items():
            if col in PARAMS or (col or "").startswith("counter."):
                v = _float(val)
                if v is not None:
                    extra.setdefault((work, plat), {}).setdefault(n, {}).setdefault(
                        col, []).append(v)
        info = hw.setdefault(plat, {"row": r, "variant": variant, "base": r["platform"].strip(),
                                    "at": plat[len(_platform_name(r)):], "nmax": 0})
        info["nmax"] = max(info["nmax"], n)
    profiles = {}
    for key, per_n in times.items():
        prof = {"t": {n: float(np.median(v)) for n, v in per_n.items()}, "params": {},
                "counters": {}}
        for n, cols in extra.get(key, {}).items():
            for col, vals in cols.items():
                where = "params" if col in PARAMS else "counters"
                name = col if col in PARAMS else col[len("counter."):]
                prof[where].setdefault(n, {})[name] = float(np.median(vals))
        profiles[key] = prof
    return profiles, _breakpoints(hw)


# a set whose every time stays this close to its fewest-core time did not time completions
FLAT_TOLERANCE = 0.10


def flat_note(path: str | Path, profiles: dict) -> str | None:
    """Why the figures of ``path`` mean nothing where no workload's time changes with the
    cores (every profile of two core counts or more within FLAT_TOLERANCE of its time at the
    fewest cores, on every platform: a fixed measurement window, not a completion time), or
    where no workload was measured at two core counts (its scaling errors are 0 by
    construction: a trend of one point); None where any time changes with the cores."""
    spans = [p["t"] for p in profiles.values() if len(p["t"]) > 1]
    if profiles and not spans:
        return (f"{path}: no workload is measured at more than one core count, so each "
                f"prediction's trend is one point: its scaling errors are 0 by construction "
                f"and full is t(1)'s; add runs at more core counts for figures on scaling")
    if not spans or any(abs(t[n] / t[min(t)] - 1) > FLAT_TOLERANCE for t in spans for n in t):
        return None
    return (f"{path}: no workload's time changes with the cores (within "
            f"{FLAT_TOLERANCE:.0%} of its time at the fewest cores, on every platform): its "
            f"time_s is not a completion time (a fixed measurement window?), so its "
            f"evaluation says nothing about scaling")


def _platform_name(r: dict) -> str:
    variant = (r.get("variant") or "").strip()
    return r["platform"].strip() + (f":{variant}" if variant and variant != "all" else "")


def _freq_label(r: dict) -> str:
    """The row's frequency as a platform name's suffix ("1800", "1.5e+03" -> "1500"); "" where
    the cell is empty or not a number."""
    f = _float(r.get("freq_mhz"))
    return f"{f:g}" if f is not None and f > 0 else ""


def _breakpoints(hw: dict) -> dict:
    out = {}
    for plat, info in hw.items():
        r, nmax = info["row"], info["nmax"]
        phys = _float(r.get("hw_phys_cores"))
        n_nu, n_ht = _float(r.get("n_nu")), _float(r.get("n_ht"))
        if n_ht is None and phys and nmax > phys:
            n_ht = phys
        if n_nu is None:
            m = re.search(r"(\d+)\s*sockets", r.get("hw_cpu") or "")
            sockets = int(m.group(1)) if m else KNOWN_SOCKETS.get(r.get("hw_system") or "", 1)
            l3 = _float(r.get("hw_l3_shared_by"))
            if sockets > 1 and phys:
                n_nu = phys / sockets
            elif l3 and phys and l3 < phys:
                n_nu = l3
            elif info["variant"].startswith("all-"):
                big = hw.get(f"{info['base']}:big{info['at']}")
                n_nu = big["nmax"] if big and big["nmax"] < nmax else None
        out[plat] = {"n_nu": int(n_nu) if n_nu else None, "n_ht": int(n_ht) if n_ht else None,
                     "nmax": nmax}
    return out


def combine_csvs(paths: list[str], rows: list[dict[str, Any]], out: Any) -> None:
    """Write ``rows`` and every CSV of ``paths`` as one CSV at ``out`` (the union of their
    columns): several per-board files evaluated as one database."""
    fields: list[str] = list(rows[0]) if rows else []
    every = list(rows)
    for path in paths:
        load_csv(path)  # each file checked alone: its errors name its own lines
        try:
            with open(path, newline="") as fh:
                r = csv.DictReader(fh)
                every += list(r)
                fields += [f for f in r.fieldnames or [] if f not in fields]
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise read_error(path, exc)
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(every)


def run(paths: list[str], max_factor: float | None = None, setup: str = "default",
        single_reference: bool = False, scenario: str = "a",
        progress: Callable[[str], None] | None = None,
        count: Callable[[str, int, int], None] | None = None,
        note: Callable[[str], None] | None = None) -> list[dict]:
    """Evaluate each CSV with one of SETUPS (optionally bounded sc factors; with
    ``single_reference`` each profile from each other platform of its workload alone); with
    ``scenario`` "b", scenario (b) instead (``evaluate_scalability``). ``progress`` is told
    what each evaluation is about to do (it takes seconds to minutes), ``count(what, i, n)``
    how far it is, ``note`` a warning about a set's figures (flat_note)."""
    if scenario == "b":
        given = [opt for opt, on in (("--setup", setup != "default"),
                                     ("--max-factor", max_factor is not None),
                                     ("--single-reference", single_reference)) if on]
        if given:
            raise MpetInputError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} "
                                 f"not apply to --scenario b (it "
                                 f"predicts on the measured platform from the 1-core runs, "
                                 f"with the seed's scaling candidates); leave it out")
    if max_factor is not None and not max_factor > 1:
        raise MpetInputError(f"--max-factor {max_factor:g}: give a number above 1, or leave "
                             f"it out for eq. 21 as written")
    if setup not in SETUPS:
        raise MpetInputError(f"--setup {setup}: use one of {', '.join(sorted(SETUPS))}")
    if setup == "nested" and single_reference:
        raise MpetInputError("--single-reference does not apply to --setup nested (its "
                             "settings are chosen with every reference); leave one of them out")
    if setup == "nested" and max_factor is not None:
        raise MpetInputError("--max-factor does not apply to --setup nested (its grid fixes "
                             "the settings); leave one of them out")
    t1_sel, sc_sel = (SEED_T1, SEED_SC) if setup == "seed" else (DEFAULT_T1, DEFAULT_SC)
    if setup in ("q-ratio", "ratio", "sc-distance"):
        sc_sel = RATIO_SC
    if setup in ("ratio", "sc-distance"):
        t1_sel = RATIO_T1
    if setup == "sc-distance":
        t1_sel = dataclasses.replace(t1_sel, basis="sc")
        sc_sel = dataclasses.replace(sc_sel, basis="sc")
    sc_sel = dataclasses.replace(sc_sel, max_factor=max_factor)
    results = []
    for path in paths:
        profiles, platforms = load_csv(path)
        db = MpetDatabase(profiles, platforms)
        flat = flat_note(path, profiles)
        if flat and note:
            note(flat)
        if progress:
            progress(f"{path}: leave-one-out over {len(profiles)} profiles of "
                     f"{len({w for w, _ in profiles})} workloads on {len(platforms)} "
                     f"platforms...")
        start = time.perf_counter()
        done = (lambda i, n: count("predictions", i, n)) if count else None
        if scenario == "b":
            res = evaluate_scalability(db, done=done)
        elif setup == "nested":
            res = evaluate_nested(db, done=count)
        else:
            res = evaluate(db, t1_sel, sc_sel, single_reference=single_reference, done=done)
        elapsed = time.perf_counter() - start
        n = len(res["cases"])
        if n == 0 and scenario == "b":
            raise MpetInputError(f"{path}: no platform holds two workloads measured at one "
                                 f"core and more; nothing to evaluate for scenario b")
        if n == 0:
            k = len(platforms)
            raise MpetInputError(f"{path}: no workload is measured on two platforms that share "
                                 f"another workload (it holds {k} platform{'s' * (k != 1)}); "
                                 f"nothing to evaluate: add another platform's measurements "
                                 f"(--combine evaluates several --data files and the store as "
                                 f"one database)")
        results.append({"data": str(path), "profiles": len(profiles),
                        "platforms": len(platforms),
                        "workloads": len({w for w, _ in profiles}), "predictions": n,
                        "setup": SCENARIO_B_SETUP[0] if scenario == "b" else setup,
                        "ms_per_prediction": 1000 * elapsed / n,
                        "summary": res["summary"], "interval": res["interval"],
                        "chosen": res.get("chosen"), "skipped": res["skipped"],
                        "cases": res["cases"], "breakpoints": platforms,
                        "max_factor": max_factor, "seed_table5_gmean": SEED_TABLE5,
                        "references": "one" if single_reference else "all",
                        "scenario": scenario,
                        "operating_point": {
                            "tolerance": TOLERANCE,
                            **operating_points(res["cases"], fewest_within, TOLERANCE)}})
    return results


def _pct(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.1f}"


def format_table(res: dict) -> str:
    scenario_b = res.get("scenario") == "b"
    setups = dict([SCENARIO_B_SETUP]) if scenario_b else SETUPS
    setup = f"setup {res['setup']} ({setups[res['setup']]})"
    if scenario_b:
        setup = ("scenario b (from the 1-core runs: each profile cut to n = 1 and predicted "
                 "from the other workloads on its platform; its own t(1), so the full error "
                 f"is the scaling error), {setup}")
    if res["max_factor"]:
        setup += f", sc factors bounded to [1/{res['max_factor']:g}, {res['max_factor']:g}]"
    if res["references"] == "one":
        setup += (", each from one reference platform at a time (as 'opptune predict --from P' "
                  "with one P)")
    counts = ", ".join(f"{res[k]} {k[:-1] if res[k] == 1 else k}"
                       for k in ("predictions", "workloads", "platforms"))
    lines = [f"{res['data']}: {counts}, {setup}, {res['ms_per_prediction']:.1f} ms per "
             f"prediction (evaluation time / predictions)",
             f"{'kind':<8} {'method':<11} {'gmean%':>7} {'median%':>8} {'p70%':>6} {'p80%':>6} "
             f"{'p95%':>6} {'max%':>7}  seed gmean%"]
    for k in KINDS:
        for m in METHODS:
            s = res["summary"][m][k]
            # scenario b's full rows would repeat its scaling rows: the header says so
            if not s.get("count") or (scenario_b and k == "full"):
                continue
            # the seed's Table 5 is of migration (scenario a) only
            seed = f"{100 * SEED_TABLE5[k]:.1f}" if m == "mpet" and not scenario_b else ""
            lines.append(f"{k:<8} {m:<11} {_pct(s['gmean']):>7} {_pct(s['median']):>8} "
                         f"{_pct(s['p70']):>6} {_pct(s['p80']):>6} {_pct(s['p95']):>6} "
                         f"{_pct(s['max']):>7}  {seed}")
    iv = res["interval"]
    line = (f"interval: the measured t(n) inside the predicted interval at every n in "
            f"{iv['covered']} of {iv['count']} predictions")
    if iv.get("width") is not None:
        line += f" (median width x{iv['width']:.1f}, the largest upper/lower over n)"
    if iv.get("calibrated"):
        line += (f"; {iv['calibrated']} calibrated on the "
                 f"{'platform' if scenario_b else 'target'}'s other workloads "
                 f"(mean nominal level {100 * iv['level']:.0f} %)")
    if iv["count"] - iv.get("calibrated", 0):
        line += (f"; {iv['count'] - iv.get('calibrated', 0)} by the candidates' band (too "
                 f"few other workloads to calibrate on: no stated level)")
        if not scenario_b:
            line += (f", {iv['single']} of them resting on one candidate (at least [t/2, "
                     f"2t])")
    lines.append(line)
    op = res.get("operating_point")
    if op:
        names = {"mpet": "MPET", "naive": "t(1)/n", "same_curve": "the source's curve",
                 "measured": "the measured t(n)"}
        lines.append(
            f"operating point (the fewest cores within {100 * op['tolerance']:.0f} % of the best "
            f"predicted t(n)): measured there within {100 * op['tolerance']:.0f} % of the "
            f"measured best in " + "; ".join(
                f"{names[m]} {100 * op[m]['within']:.0f} % (slower by {_pct(op[m]['mean'])} % "
                f"on average, {_pct(op[m]['p95'])} % at the 95th percentile"
                + (f"; no choice from {op[m]['failed']} curve{'s' * (op[m]['failed'] != 1)} "
                   f"without a positive time" if op[m].get("failed") else "") + ")"
                for m in names if (op.get(m) or {}).get("count")))
    if res["skipped"]:
        # --single-reference skips a profile once per reference, in the same words
        seen: dict[str, int] = {}
        for s in res["skipped"]:
            text = f"{s['workload']} on {s['platform']} ({s['why']})"
            seen[text] = seen.get(text, 0) + 1
        lines.append(f"skipped {len(res['skipped'])}: " + "; ".join(
            text + (f" x{k}" if k > 1 else "") for text, k in list(seen.items())[:3]))
    return "\n".join(lines)


def cmd_eval_mpet(args) -> int:
    paths = args.data or [find_data(p) for p in DEFAULT_DATA]
    try:
        results = run(paths, args.max_factor, args.setup, args.single_reference, args.scenario,
                      _tty_progress(), terminal_counter("opptune eval-mpet"), _stderr_note())
    except MpetInputError as exc:
        print(f"opptune eval-mpet: {exc}", file=sys.stderr)
        return 2
    print_results(results, args.json)
    return 0


def _tty_progress(rename: tuple[str, str] | None = None) -> Callable[[str], None] | None:
    """A line on stderr per evaluation, where stderr is a terminal; ``rename``: (temporary
    file, what to call it)."""
    say = terminal_progress("opptune eval-mpet")
    if say is None or rename is None:
        return say
    return lambda what: say(what.replace(*rename))


def _stderr_note(rename: tuple[str, str] | None = None) -> Callable[[str], None]:
    """``run``'s note on a set's figures as a line on stderr; ``rename`` as for
    ``_tty_progress``."""
    def note(text: str) -> None:
        if rename is not None:
            text = text.replace(*rename)
        print(f"opptune eval-mpet: note: {text}", file=sys.stderr)
    return note


def print_results(results: list[dict], as_json: bool) -> None:
    """``run``'s results on stdout: JSON (without the per-case lists) or one table each."""
    if as_json:
        for r in results:
            r.pop("cases")
        json.dump({"results": results}, sys.stdout, indent=2, allow_nan=False,
                  default=lambda o: None)
        print()
    else:
        print("\n\n".join(format_table(r) for r in results))


# -- eval-mpet over combined CSVs or the daemon's store ----------------------------------------


def cmd_eval_sources(args: argparse.Namespace) -> int:
    import tempfile
    if args.data:  # the docs' data/NAME/data.csv from any directory: the shipped copy
        args.data = [find_data(p) for p in args.data]
    # --config alone names the daemon too (its bind), as for 'opptune status'
    store = bool(args.daemon or args.config)
    given = [o for o, v in (("--size", args.size), ("--save-csv", args.save_csv),
                            ("--timeout", args.timeout)) if v is not None]
    if given and not store:
        named = " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
        print(f"opptune eval-mpet: {named} "
              f"{'goes' if len(given) == 1 else 'go'} with --daemon ENDPOINT or --config "
              "(without either no daemon is asked): give one, or leave "
              f"{'it' if len(given) == 1 else 'them'} out", file=sys.stderr)
        return 2
    if not args.combine and not store:
        return cmd_eval_mpet(args)
    if args.combine and not args.data and not store:
        print("opptune eval-mpet: --combine needs --data FILE.csv (two or more) or --daemon",
              file=sys.stderr)
        return 2
    if args.data and store and not args.combine:
        # said before asking the daemon, which may be down or slow to answer
        print("opptune eval-mpet: --data with --daemon needs --combine (one database of both)",
              file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    label = []
    if args.timeout is None:
        args.timeout = STORE_TIMEOUT_S
    if store:
        from .client import ask, daemon_endpoint
        endpoint = daemon_endpoint(args)  # with CURVE on: the operator key from --config's keys_dir
        query = {"size": args.size} if args.size else {}
        data, rc = ask("opptune eval-mpet", endpoint, "mpet_data", query,
                       timeout_s=args.timeout)
        if rc is not None:
            return rc
        # every clock characterize measured, as a CSV of the same runs holds it
        for clock in clock_queries(data):
            more, rc = ask("opptune eval-mpet", endpoint, "mpet_data",
                           {**query, "clock": clock}, timeout_s=args.timeout)
            if rc is not None:
                return rc
            merge_answer(data, more)
        rows = store_rows(data, args.size)
        if not rows and args.size:
            # what to do depends on whether other sizes are there: one more query, on this
            # error only
            every, rc = ask("opptune eval-mpet", endpoint, "mpet_data", {},
                            timeout_s=args.timeout)
            if rc is not None:
                return rc
            sizes = sorted({p["size"] for p in every["profiles"]})
            if sizes:
                print(f"opptune eval-mpet: the daemon at {endpoint} has no measurements of "
                      f"size {args.size!r}; it has {', '.join(sizes)}: give one of them, or "
                      f"leave out --size", file=sys.stderr)
                return 2
        if not rows:
            print(f"opptune eval-mpet: the daemon at {endpoint} has no measurements; run "
                  "'opptune characterize --agent AGENT --wait' first", file=sys.stderr)
            return 2
        label.append(f"store of {endpoint}")
        if args.save_csv:
            try:
                write_store_csv(args.save_csv, rows)
            except OSError as exc:
                print(f"opptune eval-mpet: --save-csv {args.save_csv}: cannot write: "
                      f"{exc.strerror or exc}", file=sys.stderr)
                return 2
    paths = list(args.data or []) if (args.combine or not store) else []
    label += paths
    with tempfile.TemporaryDirectory(prefix="opptune-eval-mpet-") as tmp:
        merged = Path(tmp) / "combined.csv"
        try:
            combine_csvs(paths, rows, merged)
            results = run([str(merged)], args.max_factor, args.setup, args.single_reference,
                          args.scenario, _tty_progress((str(merged), " + ".join(label))),
                          terminal_counter("opptune eval-mpet"),
                          _stderr_note((str(merged), " + ".join(label))))
        except MpetInputError as exc:
            print(f"opptune eval-mpet: {str(exc).replace(str(merged), ' + '.join(label))}",
                  file=sys.stderr)
            return 2
    for r in results:
        r["data"] = " + ".join(label)
    print_results(results, args.json)
    return 0
