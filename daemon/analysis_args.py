"""The parsers of the commands on files of measurements: ``opptune fit``, ``predict``, ``eval``
and ``eval-mpet``, and the words of their options that the commands share. fit_cli, eval_cli,
mpet_cli and mpet_predict_cli run them; kept apart so that building every command's parser loads
none of numpy, scipy, pyperf or rich (those modules do)."""

from __future__ import annotations

import argparse
from typing import Any

TIDY_HELP = ("CSV file, one row per run: platform, workload, variant, cores, freq_mhz, time_s "
             "(optional: input, or size where there is no input column; rep, energy_j, "
             "power_w, counters); a dataset shipped with opptune also by its folder name, from "
             "any directory: loghin_multicore_energy or data/loghin_multicore_energy/data.csv "
             "(xplat_npb_minife, armpm_xu3_parsec, bench_suite_* too)")

# what a time of 0 in a CSV can be read as (tidy.read_tidy's zero_time)
ZERO_TIME = ("error", "missing")

DEFAULT_DATA = ("data/loghin_multicore_energy/data.csv", "data/xplat_npb_minife/data.csv")
SETUPS = {
    "default": "seed counts, eq. 21/23 on q(n) values, geometric mean, t(1) candidates by "
               "validated transfers, sc candidates by the seed's distances (eq. 16-19) where "
               "the runtime parameters are there, else by ratio distances or validated "
               "transfers, whichever predicted the target's other workloads better",
    "q-ratio": "the default with sc candidates by ratio distances only (the default before "
               "the chosen sc)",
    "ratio": "the q-ratio setup with t(1) candidates by ratio distances and eq. 22's weights "
             "(the default before validated transfers)",
    "sc-distance": "the ratio setup with candidates by sc distances (eq. 16-19) as in the seed",
    "seed": "seed setup of section 4.1, eq. 21/23 as written",
    "nested": "settings chosen per workload by leave-one-out without that workload",
}
STORE_TIMEOUT_S = 30.0  # a store's profiles and every clock's: more than a status query


def _fit(args: argparse.Namespace) -> int:
    from .fit_cli import cmd_fit
    return cmd_fit(args)


def _predict(args: argparse.Namespace) -> int:
    from .fit_cli import cmd_predict
    return cmd_predict(args)


def _eval(args: argparse.Namespace) -> int:
    from .eval_cli import cmd_eval
    return cmd_eval(args)


def _eval_mpet(args: argparse.Namespace) -> int:
    from .mpet_cli import cmd_eval_sources
    return cmd_eval_sources(args)


def add_fit_parsers(subparsers: Any) -> None:
    """Add fit and predict to an argparse subparsers object."""
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
    p.set_defaults(func=_fit)

    desc = ("With --fit FILE: run time (with a 90 % interval), and power, energy and "
            "energy-delay product where the fit has a power model, at the core counts and "
            "frequencies asked; warns where a query lies outside the measured core counts or "
            "frequencies. With --workload: MPET from a running daemon's measurements (below): "
            "t(n) with an interval, calibrated on the target's other workloads where it can "
            "be (its level stated), and the core count to run at there. Exit 1 when nothing "
            "can be predicted or the daemon does not answer, 2 on unusable input.")
    p = subparsers.add_parser("predict", help="predict time (and energy) from a saved fit; "
                              "with --workload, a workload on a platform it never ran on "
                              "(--from P --to T) or beyond one core (--on P) by MPET",
                              description=desc)
    p.add_argument("--fit", metavar="FIT.json",
                   help="file written by 'opptune fit --save'")
    p.add_argument("--cores", metavar="1,2,4", help="core counts (with --fit)")
    p.add_argument("--freq", default="", metavar="MHz,MHz",
                   help="CPU frequencies in MHz, or with a unit (1.4GHz); every core count is "
                        "predicted at each (with "
                        "--fit); with the MPET forms one frequency, the clock of the platform "
                        "predicted on (--to or --on; default: the highest its profiles were "
                        "measured at)")
    p.add_argument("--group", help="only groups whose label contains this text")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of a table (shape: docs/json-output.md)")
    from .mpet_predict_cli import add_predict_options
    add_predict_options(p)
    p.set_defaults(func=_predict)


def _zero_times_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zero-times", choices=ZERO_TIME, default="error",
                   help="a time of 0 in the CSV (a run shorter than its timer's resolution) is "
                        "an error (default) or read as missing")


def add_eval_parser(subparsers: Any) -> None:
    """Add eval to an argparse subparsers object."""
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
    p.set_defaults(func=_eval)


def add_eval_mpet_parser(subparsers: Any) -> None:
    """Register `opptune eval-mpet`."""
    desc = ("Seed 000's leave-one-out evaluation of MPET migration prediction: every profile of "
            "a workload measured on two or more platforms is removed and predicted from the "
            "workload's other platforms and the other workloads measured on the target. Prints "
            "the geometric-mean error over the trend, median and 70/80/95 % percentiles for "
            "t(1), scaling and the full prediction, beside t(n) = t(1)/n and the source "
            "platform's curve. Each --data file is its own database. Exit 2 on unusable input.")
    p = subparsers.add_parser("eval-mpet", help="leave-one-out evaluation of MPET prediction",
                              description=desc)
    p.add_argument("--data", action="append", metavar="FILE.csv",
                   help="CSV: platform, workload, [variant], cores, time_s, [hw_phys_cores, hw_system, "
                        "hw_cpu, hw_l3_shared_by, n_nu, n_ht, R..j, counter.X] "
                        f"(repeatable; a dataset shipped with opptune also by its folder "
                        f"name, from any directory: bench_suite_rpi4 or "
                        f"data/bench_suite_rpi4/data.csv; default: {' and '.join(DEFAULT_DATA)})")
    p.add_argument("--setup", choices=sorted(SETUPS), default="default",
                   help="default: the seed's candidate counts and weights (section 4.1) with "
                        "eq. 21/23 applied to q(n) = n t(n)/t(1) at each core count, a "
                        "geometric mean of the factors, t(1) candidates rated and weighted "
                        "by how well their transfer predicted the workload on its other "
                        "platforms like the target (validated), sc candidates by the seed's "
                        "distances over sc (eq. 16-19) where the workload's profiles and the "
                        "target's suite carry the runtime parameters R..j (the instrumented "
                        "bench_suite), else by how far from proportional their measured q(n) "
                        "are (ratio distance) or by validated transfers of q(n), whichever "
                        "predicted the target's other workloads better (leave-one-out on the "
                        "target); "
                        "q-ratio: the default with sc by ratio distances only; "
                        "ratio: the q-ratio setup with t(1) candidates by the ratio distance "
                        "of their t(1) and eq. 22's weights; "
                        "sc-distance: the ratio setup with the seed's distances over sc "
                        "(eq. 16-19); "
                        "seed: section 4.1 exactly as written; "
                        "nested: for each workload, t(1) and sc settings chosen from a fixed "
                        "grid by leave-one-out on the database without that workload (slow: "
                        "minutes on loghin_multicore_energy)")
    p.add_argument("--max-factor", type=float, metavar="X",
                   help="not in the seed: leave out of an sc element's interpolation a "
                        "candidate whose transformation factor (eq. 21) lies outside "
                        "[1/X, X] or is negative (X > 1; default: no bound; not with "
                        "--setup nested)")
    p.add_argument("--single-reference", action="store_true",
                   help="predict each profile from each of the workload's other platforms "
                        "alone (as 'opptune predict --from P' does with one P), not from all "
                        "of them at once (the seed's evaluation, the default); one prediction "
                        "per workload, target and reference")
    p.add_argument("--scenario", choices=("a", "b"), default="a",
                   help="a: migration to another platform (the seed's evaluation, the "
                        "default); b: scalability of a not-yet-parallel workload: each "
                        "profile cut to its 1-core runs and its t(n) predicted from the other "
                        "workloads on its platform (as 'opptune predict --on P'), scaling "
                        "error beside t(1)/n (not with --setup, --max-factor or "
                        "--single-reference)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_eval_sources(p)


def add_eval_sources(p: argparse.ArgumentParser) -> None:
    """``opptune eval-mpet``'s other sources: several CSVs as one database, the store."""
    g = p.add_argument_group("other sources")
    g.add_argument("--combine", action="store_true",
                   help="evaluate the --data files as one database (e.g. the per-board "
                        "data/bench_suite_*/data.csv, each holding one platform)")
    g.add_argument("--daemon", metavar="ENDPOINT",
                   help="evaluate the measurements in this running daemon's store (what "
                        "'opptune characterize' measured, each clock a platform NAME@MHzMHz "
                        "as in a CSV; with --data and --combine, beside those files; default "
                        "with --config: the bind address of --config)")
    g.add_argument("--config",
                   help="the daemon's configuration: the store of the daemon it describes, "
                        "queried with its operator key where CURVE is on")
    g.add_argument("--size", help="with --daemon: only this size class")
    g.add_argument("--save-csv", metavar="FILE.csv",
                   help="with --daemon: also write the store's measurements as a CSV that "
                        "--data reads")
    # None: not given, so that given without a daemon it is refused (it would mean nothing)
    g.add_argument("--timeout", type=float, default=None,
                   help=f"with --daemon: seconds to wait for its answer (default "
                        f"{STORE_TIMEOUT_S:g})")
    p.set_defaults(func=_eval_mpet)
