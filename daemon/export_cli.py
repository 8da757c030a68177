"""``opptune export --format pyperf`` and ``opptune import``: the daemon's measurements as a
pyperf BenchmarkSuite, and pyperf results stored as measurements at a stated configuration.

The export asks the daemon for its runs (the ``runs`` query: the store stays the daemon's) and
builds the file with pyperf's own classes, so ``python -m pyperf stats|hist|compare_to`` read
it: one benchmark per workload x configuration, one pyperf run per stored run (its time_s the
value; warmups are never stored). Every successful run is in it, marked ones too, with the mark
in the run's metadata (``opptune_throttled``: the reasons), so a reader sees what the fits left
out."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
from typing import Any

from ..shared.cpus import format_cpu_list
from .scope_text import unknown_agent, unknown_workload

# Run-record fields that mark a run as not clean, each exported as opptune_<field> in the run's
# metadata where set ("marked": why, since records carry it; "throttled": older records).
MARK_FIELDS = ("throttled", "marked")


def add_parsers(sub: argparse._SubParsersAction, add_link_options) -> None:
    p = sub.add_parser(
        "export", help="write the daemon's measurements as a pyperf BenchmarkSuite (JSON) "
                       "that 'python -m pyperf stats/hist/compare_to' read",
        description="One benchmark per workload x configuration, named like "
                    "'pi_integrate/small/4cores@1400MHz' without the board, so that 'python "
                    "-m pyperf compare_to a.json b.json' matches the exports of two boards "
                    "(--agent A, then --agent B) configuration by configuration; cores, cpus, "
                    "frequencies, board, agent and variant are in its metadata; boards "
                    "measured at different clocks compare with --at-best. Runs of "
                    "several boards go in one file only with --board-in-name. Every "
                    "successful run is a value, its energy (where measured) in its metadata; "
                    "marked runs (throttled, ...) are included with the mark in their "
                    "metadata.")
    add_link_options(p)
    p.add_argument("--format", choices=("pyperf",), default="pyperf",
                   help="the file's format (pyperf, the default)")
    p.add_argument("--workload", help="only this workload")
    p.add_argument("--agent", metavar="ID", help="only this agent's runs")
    p.add_argument("--board-in-name", action="store_true",
                   help="prefix every benchmark's name with its board ('rpi4:pi_integrate/"
                        "...'): needed to export several boards' runs into one file; names "
                        "then match only exports made with it too")
    p.add_argument("--at-best", action="store_true",
                   help="one benchmark per workload x core count: the configuration measured "
                        "fastest at that core count (lowest median time of its unmarked runs; "
                        "its clock and cpus in the metadata), named without the frequency "
                        "('pi_integrate/small/2cores'), so that two boards measured at "
                        "different clocks compare core count by core count (export both with "
                        "it); by default every clock is a benchmark of its own, named with it")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json",
                   help="file to write (replaced if it exists)")
    p.set_defaults(func=cmd_export, timeout=30.0)

    p = sub.add_parser(
        "import", help="store pyperf results (a pyperformance run, your own pyperf script) as "
                       "measurements of an agent's board at a stated configuration",
        description="Each value of each benchmark becomes a run (warmups are skipped; the "
                    "pyperf metadata is kept with it) of the board of --agent at --cores "
                    "(and --freq), under a new job; fits and recommendations use them. Each "
                    "benchmark is its own workload, named after it (or --workload when the "
                    "file holds one benchmark).")
    add_link_options(p)
    p.add_argument("file", metavar="FILE.json", help="a pyperf JSON file (.json or .json.gz)")
    p.add_argument("--agent", metavar="ID", required=True,
                   help="the agent whose board measured them")
    p.add_argument("--cores", type=int, required=True, help="how many cores they ran on")
    p.add_argument("--cpus", help="which cpus, e.g. 0,1 or 0-3 (default: the first --cores "
                                  "of the board's sweep order)")
    p.add_argument("--freq", metavar="KHZ",
                   help="the frequency they ran at, in kHz or with a unit (1.4GHz) (default: "
                        "the board's own)")
    p.add_argument("--workload", help="workload name (only for a file with one benchmark; "
                                      "default: the benchmark's name)")
    p.add_argument("--size", default="default", help="the input size class (default: default)")
    p.set_defaults(func=cmd_import, timeout=30.0)


# -- export -------------------------------------------------------------------------------------

def cmd_export(args: argparse.Namespace) -> int:
    from .client import daemon_endpoint
    from .client import ask
    q = {k: getattr(args, k) for k in ("workload", "agent") if getattr(args, k)}
    data, rc = ask("opptune export", daemon_endpoint(args), "runs", q, timeout_s=args.timeout)
    if rc is not None:
        return rc
    failed = data.get("failed") or {}  # a daemon before it does not say
    if args.workload and args.workload in failed:
        return _fail("export", _all_failed(args, failed), 1)
    refusal = _unknown_filter(args, data.get("known"))
    if refusal:
        return _fail("export", refusal, 2)
    try:
        suite, summary = build_suite(data["runs"], data["boards"], args.board_in_name,
                                     args.at_best)
    except SeveralBoards as exc:
        return _fail("export", str(exc), 2)
    except ValueError as exc:  # nothing to export
        return _fail("export", f"{exc}{_scope(args)}"
                     + (f"; {_all_failed(args, failed)}" if failed else ""), 1)
    try:
        suite.dump(args.output, replace=True)
    except OSError as exc:
        return _fail("export", f"-o {args.output}: cannot write: {exc.strerror or exc}", 2)
    summary["file"] = args.output
    if args.json:
        json.dump(summary, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        marked = (f", {summary['marked_runs']} of them marked (see opptune_* metadata)"
                  if summary["marked_runs"] else "")
        best = (f" (each core count's fastest of the {summary['configurations']} "
                "configurations measured)" if args.at_best else "")
        print(f"wrote {args.output}: {summary['benchmarks']} benchmarks{best}, "
              f"{summary['values']} values{marked}; read it with 'python -m pyperf stats "
              f"{args.output}'")
    return 0


def _unknown_filter(args: argparse.Namespace, known: dict[str, list[str]] | None) -> str:
    """Why --agent/--workload name nothing the daemon has, as 'opptune report' says it;
    empty when they do (or the daemon, older, does not say what it knows)."""
    if not known:
        return ""
    if args.agent and args.agent not in known["agents"]:
        return unknown_agent(args.agent, known["agents"])
    if args.workload and args.workload not in known["workloads"]:
        return unknown_workload(args.workload, known["workloads"],
                                f" by agent {args.agent}" if args.agent else "")
    return ""


def _all_failed(args: argparse.Namespace, failed: dict[str, dict[str, Any]]) -> str:
    """The workloads (of --workload, by --agent) whose every stored run failed, why the last
    of their jobs failed, and where to read each job's reason."""
    by = f" by agent {args.agent}" if args.agent else ""
    status = "opptune status" + (f" --agent {args.agent}" if args.agent else "")
    parts = []
    for name in sorted(failed)[:3]:
        n, error = failed[name]["runs"], failed[name].get("error")
        parts.append(f"{'--workload ' if args.workload else ''}{name}: "
                     + (f"its {n} runs{by} all failed" if n != 1 else f"its one run{by} failed")
                     + (f" ({error})" if error else ""))
    more = len(failed) - len(parts)
    return ("; ".join(parts) + (f"; {more} more workloads whose runs all failed" if more else "")
            + f": nothing to export of {'it' if len(failed) == 1 else 'them'}; '{status}' "
            "gives each job's reason (the jobs that failed under the table)")


def _scope(args: argparse.Namespace) -> str:
    parts = [f"{k} {getattr(args, k)}" for k in ("workload", "agent") if getattr(args, k)]
    return f" (for {', '.join(parts)})" if parts else ""


def _numbers_in_order(name: str) -> list:
    """A name as text and numbers ("w/small/10cores" after "w/small/2cores", not before)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


class SeveralBoards(ValueError):
    """Runs of several boards without board_in_name: their names would clash."""


def build_suite(runs: list[dict[str, Any]], boards: dict[str, str],
                board_in_name: bool = False, at_best: bool = False) -> tuple[Any, dict]:
    """(pyperf.BenchmarkSuite, summary) of the daemon's exported runs; ValueError when none,
    SeveralBoards when they are of several boards and ``board_in_name`` is not set. A name
    carries the board only with ``board_in_name`` (whatever the runs), so that the names of
    two exports match where their configurations do: compare_to pairs benchmarks by name.
    ``at_best``: per workload x core count only its fastest configuration (:func:`fastest`),
    named without the frequency, so that boards of different clocks compare."""
    import pyperf
    groups: dict[tuple, list[dict[str, Any]]] = {}
    skipped = 0
    for row in runs:
        r = row["record"]
        if not r.get("time_s"):  # pyperf takes values > 0 only
            skipped += 1
            continue
        key = (r["platform"], r["workload"], r["input"], r.get("variant", ""), r["cores"],
               tuple(r["cpus"]), r.get("freq_mhz"))
        groups.setdefault(key, []).append(row)
    if not groups:
        raise ValueError("the daemon has no successful runs to export")
    platforms = sorted({k[0] for k in groups})
    if len(platforms) > 1 and not board_in_name:
        names = ", ".join(boards.get(p, p) for p in platforms)
        raise SeveralBoards(f"the runs are of {len(platforms)} boards ({names}): export each "
                            "with --agent ID and compare the files ('python -m pyperf "
                            "compare_to a.json b.json'), or give --board-in-name to put them "
                            "in one file, each name prefixed with its board")
    chosen: dict[tuple, str] = {}
    measured = len(groups)
    if at_best:
        groups, chosen = fastest(groups)
    names = {key: _name(key, boards, board_in_name, not at_best) for key in groups}
    clash = {n for n in names.values() if list(names.values()).count(n) > 1}
    benchmarks, marked, values = [], 0, 0
    for key in sorted(groups, key=lambda k: (_numbers_in_order(names[k]), k[5])):
        name = names[key]
        if name in clash:  # the same cores on different cpus
            name += "/cpus" + "-".join(map(str, key[5]))
        pyruns = []
        for row in sorted(groups[key], key=lambda w: (w["record"].get("started_at") or 0,
                                                      w["record"].get("rep", 0))):
            meta = _run_metadata(name, row, boards)
            if key in chosen:
                meta["opptune_at_best"] = chosen[key]
            marked += any(k.removeprefix("opptune_") in MARK_FIELDS for k in meta)
            pyruns.append(pyperf.Run([float(row["record"]["time_s"])], metadata=meta,
                                     collect_metadata=False))
        values += len(pyruns)
        benchmarks.append(pyperf.Benchmark(pyruns))
    summary = {"benchmarks": len(benchmarks), "configurations": measured,
               "values": values, "marked_runs": marked,
               "skipped_zero_time": skipped, "names": [b.get_name() for b in benchmarks]}
    return pyperf.BenchmarkSuite(benchmarks), summary


def fastest(groups: dict[tuple, list[dict[str, Any]]]
            ) -> tuple[dict[tuple, list[dict[str, Any]]], dict[tuple, str]]:
    """(of the configurations (build_suite's keys) of each board, workload, size, variant and
    core count, the one with the lowest median time, by its runs without a mark where it has
    any (a run slowed by a neighbour says nothing of the clock); what was chosen from, per
    chosen key, for its metadata)."""
    by: dict[tuple, list[tuple[float, tuple]]] = {}
    for key, rows in groups.items():
        clean = [r for r in rows if not any(r["record"].get(f) for f in MARK_FIELDS)] or rows
        median = statistics.median(float(r["record"]["time_s"]) for r in clean)
        by.setdefault(key[:5], []).append((median, key))
    kept, said = {}, {}
    for (_, _, _, _, cores), options in by.items():
        median, key = min(options, key=lambda o: (o[0], _numbers_in_order(str(o[1][6]))))
        kept[key] = groups[key]
        said[key] = (f"the fastest of {len(options)} configuration"
                     f"{'s' if len(options) != 1 else ''} measured at {cores} "
                     f"core{'s' if cores != 1 else ''} (median {median:.4g} s)")
    return kept, said


def _name(key: tuple, boards: dict[str, str], board_in_name: bool,
          with_freq: bool = True) -> str:
    platform, workload, size, variant, cores, _cpus, freq_mhz = key
    name = f"{workload}/{size}/{cores}cores"
    if freq_mhz and with_freq:
        name += f"@{freq_mhz:g}MHz"
    if variant:
        name += f"/{variant}"
    if board_in_name:
        name = f"{boards.get(platform, platform)}:{name}"
    return name


def _run_metadata(name: str, row: dict[str, Any], boards: dict[str, str]) -> dict[str, Any]:
    """pyperf metadata of one exported run: pyperf's own keys plus opptune_* (values are
    text or numbers, never empty: pyperf refuses empty ones)."""
    r = row["record"]
    meta: dict[str, Any] = {
        "name": name, "unit": "second", "loops": 1,
        "opptune_board": boards.get(r["platform"], r["platform"]),
        "opptune_platform": r["platform"], "opptune_agent": row["agent"],
        "opptune_workload": r["workload"], "opptune_input": r["input"],
        "opptune_cores": r["cores"], "opptune_cpus": ",".join(map(str, r["cpus"])),
        "opptune_threads": r["threads"], "opptune_source": row["source"],
        "opptune_job": row["job_id"], "opptune_rep": r.get("rep", 0),
        "opptune_freq_mhz": r["freq_mhz"] if r.get("freq_mhz") else "board's own",
    }
    if r.get("variant"):
        meta["opptune_variant"] = r["variant"]
    for policy, mhz in sorted((r.get("freq_observed_mhz") or {}).items()):
        if isinstance(mhz, (int, float)) and mhz > 0:
            meta[f"opptune_freq_observed_{_key(policy)}_mhz"] = mhz
    energy = r.get("energy_j")
    if isinstance(energy, (int, float)) and energy > 0:
        # the run's energy beside its time: what an energy goal was chosen from
        meta["opptune_energy_j"] = energy
        meta["opptune_energy_source"] = r.get("energy_source") or "unknown"
    if r.get("virtual"):
        meta["opptune_virtual"] = "yes (simulated board)"
    if r.get("started_at"):
        meta["date"] = datetime.datetime.fromtimestamp(r["started_at"]).isoformat(
            " ", "seconds")
    if r.get("wall_s"):
        meta["duration"] = r["wall_s"]
    for field in MARK_FIELDS:
        meta[f"opptune_{field}"] = _mark_text(field, r)
    return {k: v for k, v in meta.items() if not isinstance(v, str) or v.strip()}


def _mark_text(field: str, r: dict[str, Any]) -> str:
    """A mark as one line of text; empty when the run is not marked so."""
    value = r.get(field)
    if not value:
        return ""
    if value is True and field == "throttled":
        reasons = (r.get("thermal") or {}).get("reasons") or []
        value = "; ".join(map(str, reasons)) or "yes"
    elif value is True:
        value = "yes"
    elif isinstance(value, dict):
        value = value.get("reason") or json.dumps(value, sort_keys=True, default=str)
    elif isinstance(value, list):
        value = "; ".join(map(str, value))
    return " ".join(str(value).split())  # pyperf refuses newlines in metadata


def _key(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in str(text))


# -- import -------------------------------------------------------------------------------------

def load_pyperf(path: str) -> Any:
    """The file as a pyperf.BenchmarkSuite; ValueError saying what is wrong with it."""
    import pyperf
    try:
        suite = pyperf.BenchmarkSuite.load(path)
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        what = f"lacks {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"not a pyperf result file ({what}); write one with a pyperf "
                         "script's -o FILE.json or pyperformance run -o FILE.json") from None
    for bench in suite.get_benchmarks():
        if bench.get_unit() != "second":
            raise ValueError(f"benchmark {bench.get_name()!r} measures {bench.get_unit()}s, "
                             "not time: only time values can be imported")
    return suite


def cpus_arg(text: str) -> list[int]:
    """--cpus as given: numbers and ranges ("0-3,8", as status and recommend write cpu sets),
    in their order and with any repeat kept, so the daemon's check (as many as cores, none
    twice) sees what the user wrote; ValueError where a part is neither."""
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(part)
        out.extend(range(first, last + 1))
    return out


def cmd_import(args: argparse.Namespace) -> int:
    from .client import daemon_endpoint
    from .client import ask
    from .options import parse_frequencies
    try:
        suite = load_pyperf(args.file)
    except ValueError as exc:
        return _fail("import", f"{args.file}: {exc}", 2)
    benchmarks = suite.get_benchmarks()
    exported = _exported(benchmarks)
    if exported:
        return _fail("import", f"{args.file} is an opptune export: {exported}; import "
                               "stores every value at the one --cores (and --freq) given, "
                               f"here {args.cores}, under the benchmark's name as a workload. "
                               "Give it pyperf's own results (a pyperf script's -o FILE.json, "
                               "pyperformance run -o FILE.json)", 2)
    if args.workload and len(benchmarks) > 1:
        return _fail("import", f"{args.file} holds {len(benchmarks)} benchmarks: --workload "
                               "names the workload of a file with one; drop it to import each "
                               "under its own name", 2)
    if args.cores < 1:
        return _fail("import", f"--cores {args.cores}: give a number of cores >= 1", 2)
    cpus = None
    if args.cpus:
        try:
            cpus = cpus_arg(args.cpus)
        except ValueError:
            return _fail("import", f"--cpus {args.cpus!r}: give cpu numbers and ranges "
                                   "separated by commas, e.g. 0,1 or 0-3,8", 2)
    freq_khz = None
    if args.freq is not None:
        try:
            freq_khz, = (int(round(f)) for f in parse_frequencies(args.freq, "kHz"))
        except ValueError as exc:
            text = (f"{args.freq!r}: give one frequency, the one they ran at"
                    if "," in args.freq else str(exc))
            return _fail("import", f"--freq {text}", 2)
    endpoint = daemon_endpoint(args)
    done: list[dict[str, Any]] = []
    for bench in benchmarks:
        stored = []
        for runs in _chunks(_pyperf_runs(bench)):
            q = {"agent": args.agent, "workload": args.workload or bench.get_name(),
                 "size": args.size, "cores": args.cores, "cpus": cpus, "freq_khz": freq_khz,
                 "file": args.file, "benchmark": bench.get_name(), "runs": runs}
            data, rc = ask("opptune import", endpoint, "import", q, timeout_s=args.timeout,
                           changes=f"'opptune status --agent {args.agent}' lists the import's "
                                   "job; running this again is safe (values already stored "
                                   "are skipped)")
            if rc is not None:
                before = [d["job_id"] for d in done + stored if d["job_id"]]
                if before:
                    print("opptune import: stored before that: " + ", ".join(
                        f"job {j}" for j in before), file=sys.stderr)
                return rc
            stored.append(data)
        done += stored
        if not args.json:
            freq = f"{freq_khz} kHz" if freq_khz else "the board's own frequency"
            last = stored[-1]
            new = sum(d["runs"] for d in stored)
            # a daemon before idempotent imports does not say
            already = sum(d.get("already_stored") or 0 for d in stored)
            what = (f"imported {new} new value{'s' if new != 1 else ''} of "
                    f"{bench.get_name()} as workload "
                    f"{last['group']['workload']} on agent {args.agent}")
            if not new:
                print(f"{what}: all {already} were already stored (skipped)")
                continue
            print(f"{what} (cpus {format_cpu_list(last['cpus'])}, {freq}): job "
                  f"{', '.join(d['job_id'] for d in stored if d['job_id'])}"
                  + (f"; {already} already stored (skipped)" if already else ""))
    if args.json:
        json.dump(done, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


def _exported(benchmarks: list[Any]) -> str | None:
    """How an ``opptune export`` file says so (each benchmark's own configuration in its
    metadata, as _run_metadata writes it); None for other pyperf files. Imported, its values
    would all be stored at --cores, each configuration a workload of its own."""
    for bench in benchmarks:
        meta = bench.get_metadata()
        if "opptune_cores" in meta:
            return (f"its {len(benchmarks)} benchmark{'s' if len(benchmarks) != 1 else ''} "
                    f"carry the configuration each ran at ({bench.get_name()!r}: "
                    f"{meta['opptune_cores']} core(s) on {meta.get('opptune_board', '?')}), "
                    "and their runs are stored in the daemon they came from")
    return None


def _pyperf_runs(bench: Any) -> list[dict[str, Any]]:
    """The benchmark's runs with values (calibration-only runs have none), each with the
    metadata that is its own (the benchmark's common metadata goes with every run)."""
    out = []
    for run in bench.get_runs():
        if run.values:
            meta = {k: v for k, v in run.get_metadata().items()
                    if isinstance(v, (str, int, float))}
            out.append({"values": list(run.values), "metadata": meta})
    return out


# the daemon refuses frames over max_message_bytes (1 MiB at most): a long benchmark goes in
# several imports of at most this many bytes of runs each
CHUNK_BYTES = 256 * 1024


def _chunks(runs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    import msgpack
    out: list[list[dict[str, Any]]] = [[]]
    size = 0
    for run in runs:
        n = len(msgpack.packb(run))
        if out[-1] and size + n > CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(run)
        size += n
    return out if out[-1] else []


def _fail(command: str, message: str, code: int) -> int:
    print(f"opptune {command}: {message}", file=sys.stderr)
    return code
