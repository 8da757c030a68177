"""The MPET modes of ``opptune predict`` over a running daemon's measurements (seed 000):
(a) ``--workload A --from P --to T``, migration; (b) ``--on P``, scalability from 1-core runs;
(c) ``--set``/``--edits``, a virtual workload with edited parameters."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from . import mpet_predict_text as text
from .mpet_answer import build_database
from .options import parse_frequencies


def add_predict_options(p: argparse.ArgumentParser) -> None:
    """``opptune predict``'s MPET modes, beside its --fit mode."""
    g = p.add_argument_group(
        "MPET (a running daemon's measurements; seed 000 scenarios): "
        "(a) --workload A --from P --to T: migration to a platform known through its suite; "
        "(b) --workload A --on P: scaling on P from A's 1-core runs only; "
        "(c) add --set NAME=VALUE (or --edits FILE.json) to either: a virtual workload, A with "
        "edited parameters")
    g.add_argument("--workload", help="workload measured on --from (or --on)")
    g.add_argument("--from", dest="source", metavar="P[,P2...]",
                   help="platform id or agent name where the workload was measured; several, "
                        "comma-separated, or 'all' (every platform it was measured on but "
                        "--to): the seed's multiple reference platforms, which let MPET check "
                        "its transfers (docs/mpet.md: much closer than from one)")
    g.add_argument("--to", dest="target", metavar="T",
                   help="platform id or agent name known through its suite "
                        "('opptune characterize'); NAME:cluster<i> for one cluster of a "
                        "big.LITTLE board ('opptune characterize --per-cluster')")
    g.add_argument("--on", dest="on", metavar="P",
                   help="platform id or agent name: predict on the platform the workload was "
                        "measured on: from its 1-core runs only (scenario b), or, with --set, "
                        "from its whole measured profile edited (scenario c)")
    g.add_argument("--set", dest="edits", action="append", default=[], metavar="NAME=VALUE",
                   help="edit a parameter of the workload's profile before predicting "
                        "(repeatable): NAME one of R l w c d s j (MPET Table 1), q (cpu-time "
                        "ratio, for workloads without runtime parameters) or t1; NAME.ELEMENT "
                        "edits one element (m_base b_base m_nu b_nu m_ht b_ht); VALUE a number "
                        "(constant curve / that element) or a factor such as 2x")
    g.add_argument("--edits", dest="edits_file", metavar="FILE.json",
                   help="edits as a JSON object {\"NAME\": VALUE, ...} (same forms as --set, "
                        "applied before them)")
    g.add_argument("--size", help="only measurements of this size class")
    g.add_argument("--daemon", help="daemon endpoint (default: the bind address of --config; "
                                    "without one tcp://127.0.0.1:5555)")
    g.add_argument("--config", help="daemon configuration (default /etc/opptune/daemon.toml)")
    g.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for an answer (default %(default)g)")


class MpetUsage(ValueError):
    pass


def _resolve(name: str, data: dict[str, Any], flag: str, size: str | None = None) -> str:
    if name in data["platforms"]:
        return name
    if name in data["agents"] and data["agents"][name] in data["platforms"]:
        return data["agents"][name]
    from .planner import cluster_platform, split_cluster
    base, variant = split_cluster(name)
    agent = base if base in data["agents"] else next(
        (a for a, p in sorted(data["agents"].items()) if p == base), None)
    # the clusters of that agent's board measured alone (characterize --per-cluster)
    board = data["agents"][agent] if agent is not None else None
    alone = sorted(f"{agent}:{v}" for b, v in map(split_cluster, data["platforms"])
                   if v and b == board)
    if variant and agent is not None:
        key = cluster_platform(data["agents"][agent], variant)
        if key in data["platforms"]:
            return key
        at = f" at size {size!r}" if size is not None else ""
        if alone:
            raise MpetUsage(f"{flag} {name!r}: {variant} of agent {agent}'s board is not "
                            f"measured alone{at}; its clusters measured alone are "
                            f"{', '.join(alone)}")
        raise MpetUsage(f"{flag} {name!r}: {variant} of agent {agent}'s board is not measured "
                        f"alone{at}; run 'opptune characterize --agent {agent} --per-cluster "
                        f"--wait'{f' --size {size}' if size else ''} first")
    if alone:
        # the board measured per cluster only: no whole-board platform
        raise MpetUsage(f"{flag} {name!r}: agent {agent}'s board is measured per cluster only"
                        f"{f' at size {size!r}' if size else ''}: give one of {', '.join(alone)}"
                        f", or run 'opptune characterize --agent {agent} --wait' to measure "
                        f"it whole")
    if size is not None and (name in data["agents"] or name in data["agents"].values()):
        # the daemon answered for that size only: the board is known, the size is not
        raise MpetUsage(f"{flag} {name!r} has no measurements of size {size!r}: leave out "
                        "--size, or give a size measured there")
    idle = sorted(a for a, p in data["agents"].items() if name in (a, p))
    if idle:
        # a board that said hello but has no runs yet: the cure is to measure it, not to
        # pick another name
        raise MpetUsage(f"{flag} {name!r}: nothing is measured on agent {idle[0]}'s board "
                        f"yet; run 'opptune characterize --agent {idle[0]} --wait' first")
    known = sorted(set(data["platforms"]) | {a for a, p in data["agents"].items()
                                             if p in data["platforms"]}
                   | {f"{a}:{v}" for b, v in map(split_cluster, data["platforms"]) if v
                      for a, p in data["agents"].items() if p == b})
    raise MpetUsage(f"{flag} {name!r} is no platform with measurements; give a platform id or "
                    f"an agent name: " + (', '.join(known) or "none measured yet; run 'opptune "
                                                 "characterize --agent AGENT --wait' first"))


def _agent_of(data: dict[str, Any], platform: str) -> str:
    """The agent name(s) the daemon knows for ``platform`` (for one cluster of a board, the
    board's), for advice ('AGENT' if none)."""
    from .planner import split_cluster
    base = split_cluster(platform)[0]
    return " / ".join(sorted(a for a, p in data["agents"].items() if p == base)) or "AGENT"


def _characterize_opts(data: dict[str, Any], platform: str) -> str:
    """``--agent NAME`` of 'opptune characterize' measuring ``platform`` (``--per-cluster``
    for one cluster of a board)."""
    from .planner import split_cluster
    return f"--agent {_agent_of(data, platform)}" + (
        " --per-cluster" if split_cluster(platform)[1] else "")


def _at_size(size: str | None, freq: float | None = None) -> str:
    """' at size S' where --size narrowed the daemon's answer (the suite may be measured at
    another size), ' at F MHz' where --freq took the platform's profiles at that clock, else
    ''."""
    return (f" at size {size!r}" if size else "") + (f" at {freq:g} MHz" if freq else "")


def _size_opt(args: argparse.Namespace) -> str:
    return f" --size {args.size}" if args.size else ""


def _read_edits(args: argparse.Namespace) -> list[Any]:
    """The --edits file's and --set edits, parsed (MpetUsage on bad input)."""
    from .models.mpet_scenarios import EditError, parse_edit
    texts: list[str] = []
    if args.edits_file:
        try:
            with open(args.edits_file) as fh:
                obj = json.load(fh)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, OSError):
                what = f"cannot open it ({(exc.strerror or str(exc)).lower()})"
            else:
                what = f"cannot read it as JSON ({exc})"
            raise MpetUsage(f"--edits {args.edits_file}: {what}; give a file holding a JSON "
                            f"object such as {{\"l\": \"2x\", \"t1\": 0.5}}")
        if not isinstance(obj, dict) or not all(isinstance(v, (str, int, float))
                                                and not isinstance(v, bool)
                                                for v in obj.values()):
            raise MpetUsage(f"--edits {args.edits_file}: give a JSON object of NAME: VALUE "
                            f"(number or text such as \"2x\"), e.g. {{\"l\": \"2x\"}}")
        for k, v in obj.items():
            try:
                parse_edit(f"{k}={v}")
            except EditError as exc:
                # parse_edit names the edit as a --set; this one is the file's entry
                why = str(exc).removeprefix(f"--set {f'{k}={v}'!r}: ")
                raise MpetUsage(f"--edits {args.edits_file}: {json.dumps(k)}: "
                                f"{json.dumps(v)}: {why}") from None
        texts += [f"{k}={v}" for k, v in obj.items()]
    texts += list(args.edits or [])
    try:
        return [parse_edit(t) for t in texts]
    except EditError as exc:
        raise MpetUsage(str(exc)) from None


def cmd_predict_mpet(args: argparse.Namespace) -> int:
    from .client import ask, daemon_endpoint
    from .models.mpet_predict import NoCandidates
    from .models.mpet_scenarios import EditError
    on = getattr(args, "on", None)
    if on and (args.source or args.target):
        print("opptune predict: give either --on P (scaling on the measured platform) or "
              "--from P --to T (migration), not both", file=sys.stderr)
        return 2
    if on:
        missing = [] if args.workload else ["--workload"]
        usage = "--workload A --on P"
    else:
        missing = [f for f, v in (("--workload", args.workload), ("--from", args.source),
                                  ("--to", args.target)) if not v]
        usage = "--workload A --from P --to T"
    if len(missing) == 3:
        print("opptune predict: give --fit FILE --cores N (predict from a saved fit), "
              "--workload A --from P --to T (MPET migration) or --workload A --on P (MPET "
              "scaling of a 1-core workload)", file=sys.stderr)
        return 2
    if missing:
        what = "MPET scaling" if on else "MPET migration"
        print(f"opptune predict: {what} needs {', '.join(missing)} too ({usage})",
              file=sys.stderr)
        return 2
    try:
        edits = _read_edits(args)
        freq = _freq_arg(args)
    except MpetUsage as exc:
        print(f"opptune predict: {exc}", file=sys.stderr)
        return 2
    query = {"size": args.size} if args.size else {}
    flag, name = ("--on", on) if on else ("--to", args.target)
    # the platform's profiles at that clock, named as given: the daemon takes an agent name
    data, rc = ask("opptune predict", daemon_endpoint(args), "mpet_data",
                   {**query, "clock": {name: freq}} if freq is not None else query,
                   timeout_s=args.timeout)
    if rc is not None:
        return rc
    try:
        if freq is not None:
            plat = _resolve(name, data, flag, args.size)
            _check_clock(data, plat, name, freq, args)
            if any(not _same_clock(p["freq_mhz"], freq) for p in data["profiles"]
                   if p["platform"] == plat):
                # a daemon older than agent names in args.clock took the name for a platform
                # id and answered each group at its highest clock: asked again by the id
                data, rc = ask("opptune predict", daemon_endpoint(args), "mpet_data",
                               {**query, "clock": {plat: freq}}, timeout_s=args.timeout)
                if rc is not None:
                    return rc
        out = (_predict_on(data, args, edits) if on
               else _predict_migration(data, args, edits))
    except (MpetUsage, NoCandidates, EditError) as exc:
        print(f"opptune predict: {exc}", file=sys.stderr)
        return 2
    out["operating_point"] = _operating_point(out["prediction"])
    if args.json:
        json.dump(text.clean(out), sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    text.print_prediction(out)
    return 0


def _freq_arg(args: argparse.Namespace) -> float | None:
    """--freq with the MPET forms: one frequency in MHz, or None."""
    text = (getattr(args, "freq", "") or "").strip()
    if not text:
        return None
    try:
        f, = parse_frequencies(text, "MHz")  # positive and finite, or ValueError
    except ValueError:
        raise MpetUsage(f"--freq {text!r}: with --workload give one frequency in MHz, the "
                        f"clock of the platform predicted on (e.g. --freq 1400 or --freq 1.4GHz)"
                        ) from None
    return f


def _same_clock(f: float | None, freq: float) -> bool:
    """Whether ``f`` MHz is ``freq`` MHz, as the daemon matches args.clock (within 0.5)."""
    return f is not None and abs(f - freq) < 0.5


def _check_clock(data: dict[str, Any], plat: str, name: str, freq: float,
                 args: argparse.Namespace) -> None:
    """MpetUsage unless ``plat``'s profiles (of --size where given) were measured at ``freq``
    MHz."""
    clocks = data["platforms"][plat].get("clocks") or []
    if any(_same_clock(f, freq) for f in clocks):
        return
    if not clocks and data["platforms"][plat].get("cpufreq"):
        # a board that can set frequencies, swept at the governor's choice only
        raise MpetUsage(f"--freq {freq:g}: {name} was measured{_at_size(args.size)} at the "
                        f"governor's clock only; leave out --freq, or run 'opptune "
                        f"characterize {_characterize_opts(data, plat)}{_size_opt(args)}' to "
                        f"measure the min, mid and max of each policy")
    if not clocks:
        raise MpetUsage(f"--freq {freq:g}: {name} has no cpufreq (its runs are at its own "
                        f"clock); leave out --freq")
    at = _at_size(args.size)
    if len(clocks) == 1:
        # "give one of them" of one clock: what to do is leave it out, or measure the others
        raise MpetUsage(f"--freq {freq:g}: {name} was measured{at} at {clocks[0]:g} MHz only; "
                        f"leave out --freq, or run 'opptune characterize "
                        f"{_characterize_opts(data, plat)}{_size_opt(args)}' to measure the min, "
                        f"mid and max of each policy")
    raise MpetUsage(f"--freq {freq:g}: {name} was measured{at} at "
                    f"{', '.join(f'{f:g}' for f in clocks)} MHz; give one of them ('opptune "
                    f"characterize' measures the min, mid and max of each policy)")


def _operating_point(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The core count the recommender's rule takes from the predicted t(n): the fewest cores
    within the daemon's default tolerance of the fastest predicted (eval-mpet's "operating
    point" says how often such a choice held on the evidence sets); None without a positive
    predicted time."""
    from ..shared.config import DaemonConfig
    from .objectives import fewest_within
    tolerance = DaemonConfig.tolerance  # the recommender's default, as eval-mpet judges it
    ns, t = [r["n"] for r in rows], [r["time_s"] for r in rows]
    try:
        i = fewest_within(ns, t, tolerance)
    except ValueError:
        return None
    b = min((k for k in range(len(t)) if math.isfinite(t[k]) and t[k] > 0), key=t.__getitem__)
    return {"cores": ns[i], "time_s": t[i], "fastest_cores": ns[b], "fastest_s": t[b],
            "tolerance": tolerance}


def _clocks_on(clocks: dict[tuple, Any], plat: str, skip: str | None = None) -> list[float]:
    """The frequencies (MHz) the profiles on ``plat`` (but ``skip``'s) were taken at: one
    where they agree, none where the board has no cpufreq, several where they mix clocks
    (``mpet_predict_text.note_mixed_clocks`` says so)."""
    return sorted({f for (w, p), f in clocks.items()
                   if p == plat and w != skip and isinstance(f, (int, float))})


def _measured_db(data: dict[str, Any], args: argparse.Namespace, plat: str, flag: str,
                 sizes: dict[tuple, str] | None = None,
                 clocks: dict[tuple, Any] | None = None):
    """(profiles, platforms) of the answer, with the workload measured on ``plat`` (named
    on the command line by option ``flag``)."""
    profiles, platforms = build_database(data, args.size, sizes, clocks)
    _check_measured(data, profiles, args.workload, plat, getattr(args, flag), args.size,
                    _freq_arg(args), f"--{flag}")
    return profiles, platforms


def _check_measured(data: dict[str, Any], profiles: dict, workload: str, plat: str,
                    given: str, size: str | None = None, freq: float | None = None,
                    flag: str = "--from", target: str | None = None) -> None:
    """MpetUsage unless ``workload`` has a profile on ``plat`` (``given``: its name as the
    user wrote it; ``size``: --size, which narrowed the daemon's answer), saying where else
    it was measured (not ``target``, the board predicted on) to give as ``flag``."""
    if (workload, plat) in profiles:
        return
    marked = sum(m["runs"] for m in data.get("marked_only") or ()
                 if m["workload"] == workload and m["platform"] == plat)
    if marked:
        raise MpetUsage(f"workload {workload!r} on {given} has only runs "
                        f"marked for interference ({marked}), left out as in fits: wait "
                        f"until its points are measured again clean ('opptune status' "
                        f"shows remeasure), or set accept_load = true in the daemon's "
                        f"configuration to use them")
    on = sorted(w for w, p in profiles if p == plat)
    at = _at_size(size, freq)
    # what to do: the boards it was measured on, else measure it here (or mend the name)
    where = sorted({_name_of(data, p) for w, p in profiles
                    if w == workload and p not in (plat, target)})
    sweep = (f"'opptune sweep --agent {_agent_of(data, plat)} --workload {workload}"
             f"{f' --size {size}' if size else ''}{f' --freq {freq:g}MHz' if freq else ''}' "
             f"measures it there")
    if freq:
        # the answer holds the board's profiles at that clock only: it may be at another
        todo = f"leave out --freq to take it at the clock it was measured at, or {sweep}"
    elif len(where) == 1:
        todo = f"it is measured on {where[0]}: give {flag} {where[0]}, or {sweep}"
    elif where:
        todo = f"it is measured on {', '.join(where)}: give {flag} one of them, or {sweep}"
    elif (workload, target) in profiles:
        todo = (f"it is measured on {_name_of(data, target)} only, the board predicted on: "
                f"--on {_name_of(data, target)} predicts its scaling there, or {sweep}")
    else:
        todo = f"check the name, or {sweep}"
    raise MpetUsage(f"workload {workload!r} is not measured on {given}{at}: "
                    f"it has {', '.join(on) or 'nothing'}{at}; {todo}")


def _name_of(data: dict[str, Any], platform: str) -> str:
    """A platform as a user names it: its agent's name where one agent has it, else its id."""
    agents = [a for a, p in data["agents"].items() if p == platform]
    return agents[0] if len(agents) == 1 else platform


def _named_sources(args: argparse.Namespace, data: dict[str, Any]) -> list[tuple[str, str]] | None:
    """--from's platforms as (platform id, name as given), in its order, each once; None for
    'all' (known only with the profiles and the target: ``_sources``)."""
    names = [n.strip() for n in args.source.split(",") if n.strip()]
    if names == ["all"]:
        return None
    if not names or "all" in names:
        raise MpetUsage(f"--from {args.source!r}: give platform ids or agent names, "
                        f"comma-separated, or 'all'")
    out: list[tuple[str, str]] = []
    for n in names:
        p = _resolve(n, data, "--from", args.size)
        if p not in (q for q, _ in out):
            out.append((p, n))
    return out


def _sources(args: argparse.Namespace, data: dict[str, Any], profiles: dict, dst: str,
             named: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """The reference platforms: ``named``, each checked to hold the workload, or for 'all'
    every platform the workload was measured on but the target."""
    if named is None:
        got = sorted(p for w, p in profiles if w == args.workload and p != dst)
        if not got:
            sweep = f"'opptune sweep --agent AGENT --workload {args.workload}' measures it"
            if (args.workload, dst) in profiles:
                raise MpetUsage(f"--from all: workload {args.workload!r} is measured on "
                                f"{args.target} only, the board predicted on: --on "
                                f"{args.target} predicts its scaling there from its 1-core "
                                f"runs, or {sweep} on another board")
            raise MpetUsage(f"--from all: workload {args.workload!r} is measured on no board; "
                            f"check the name, or {sweep}")
        return [(p, data["platforms"][p].get("board") or p) for p in got]
    for p, n in named:
        _check_measured(data, profiles, args.workload, p, n, args.size, target=dst)
    return named


def _candidates(pred: Any) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"platform": c.platform, "workload": c.workload, "d_a": c.d_a,
                    "d_p": c.d_p, "d_t": c.d_t, "weight": c.weight, "usable": c.usable}
                   for c in cs]
            for name, cs in (("t1", pred.t1_candidates), ("sc", pred.sc_candidates))}


def _method(pred: Any) -> dict[str, Any]:
    """Which transfer rated the candidates (docs/mpet.md, docs/json-output.md)."""
    considered, of = pred.suite or (None, None)
    return {"t1_basis": pred.t1_basis, "sc_basis": pred.sc_basis, "sc_choice": pred.sc_choice,
            "suite_considered": considered, "suite_measured": of}


def _rows(ns, t, lo, hi, measured, before=None) -> list[dict[str, Any]]:
    rows = []
    for i, n in enumerate(ns):
        r = {"n": n, "time_s": t[i], "lower_s": lo[i], "upper_s": hi[i],
             "measured_s": measured.get(n)}
        if before is not None:
            r["unedited_s"] = before[i]
        rows.append(r)
    return rows


def _predict_migration(data: dict[str, Any], args: argparse.Namespace,
                       edits: list[Any]) -> dict[str, Any]:
    """Scenario (a); with edits, of the virtual workload (c): A's profile on P edited first."""
    from .models.mpet_database import MpetDatabase
    from .models.mpet_predict import predict_migration
    from .models.mpet_curve import time_curve
    from .models.mpet_scenarios import (apply_edits, backwards_edits, edited_curve,
                                        scale_only_edits)
    named = _named_sources(args, data)
    dst = _resolve(args.target, data, "--to", args.size)
    sizes: dict[tuple, str] = {}
    clocks: dict[tuple, Any] = {}
    profiles, platforms = build_database(data, args.size, sizes, clocks)
    given = _sources(args, data, profiles, dst, named)
    srcs = [p for p, _ in given]
    if srcs == [dst]:
        raise MpetUsage("--from and --to name the same platform (for a prediction on the "
                        "measured platform use --on P)")
    if dst in srcs:
        raise MpetUsage(f"--from {args.source} includes --to's platform {args.target}: leave "
                        f"it out (the prediction is for a platform the references are not)")
    suite = sorted(w for w, p in profiles if p == dst and w != args.workload)
    if not suite:
        raise MpetUsage(f"{args.target} has no suite measured"
                        f"{_at_size(args.size, _freq_arg(args))}: run "
                        f"'opptune characterize {_characterize_opts(data, dst)}{_size_opt(args)}' "
                        f"on it first")
    for src, name in given:
        if not any(p == src and w != args.workload for w, p in profiles):
            raise MpetUsage(f"{args.workload!r} is the only workload measured on {name}"
                            f"{_at_size(args.size)}: MPET relates it to other workloads "
                            f"measured on both {name} and {args.target}; run 'opptune characterize "
                            f"{_characterize_opts(data, src)}{_size_opt(args)}' first")
    db = MpetDatabase(profiles, platforms)
    before, notes = None, []
    if edits:
        # the virtual workload: A's profile edited alike on every reference
        before = predict_migration(db, args.workload, dst, refs=srcs, interval="none").t
        edited, sc_all = dict(profiles), dict(db.sc)
        for src in srcs:
            key = (args.workload, src)
            topo = platforms[src]
            t1, sc = db.t1(key), db.sc[key]
            t1e, sce = apply_edits(t1, sc, edits)
            notes += [f"{args.workload} on {data['platforms'][src]['board']}: {why}"
                      for why in backwards_edits(t1, sc, edits, sorted(profiles[key]["t"]),
                                                 topo.get("n_nu"), topo.get("n_ht"))]
            # the measured times carry the edits' relative effect (eq. 3-4 before and after),
            # so the default prediction, which reads q(n) from the times, sees them as sc does
            ns = sorted(profiles[key]["t"])
            old = time_curve(t1, sc, ns, topo.get("n_nu"), topo.get("n_ht"))
            new = edited_curve(t1e, sce, ns, topo.get("n_nu"), topo.get("n_ht"), edits, sc)
            edited[key] = {**profiles[key], "t": {n: profiles[key]["t"][n] * b / a
                                                  for n, a, b in zip(ns, old, new)}}
            sc_all[key] = sce
        db = MpetDatabase(edited, platforms, sc_all, db.counters)
        notes += scale_only_edits(edits)
    pred = predict_migration(db, args.workload, dst, refs=srcs)
    lo, hi = pred.lower, pred.upper
    measured = {} if edits else (profiles.get((args.workload, dst)) or {}).get("t") or {}
    scen = "c (virtual workload), migrated as in a" if edits else "a (migration)"
    # the notes judge the profiles a transfer reads: on a reference A's and those of the
    # workloads measured on T too, on T those measured on a reference (a command workload of
    # one board only, at no set clock, had put a clock note on every prediction from it)
    read = {k for k in profiles
            if (k[1] in srcs and (k[0] == args.workload or (k[0], dst) in profiles))
            or (k[1] == dst and any((k[0], p) in profiles for p in srcs))}
    sizes = {k: v for k, v in sizes.items() if k in read}
    clocks = {k: v for k, v in clocks.items() if k in read}
    text.note_mixed_sizes(data, sizes, [*srcs, dst])
    text.note_mixed_clocks(data, clocks, [*srcs, dst], skip=(args.workload, dst))
    text.note_marked(data, sizes, [*srcs, dst])
    text.note_under_way(data, [*srcs, dst])
    text.note_more_references(data, profiles, args, srcs, dst)
    params = any(text.records_params(profiles[(args.workload, p)]) for p in srcs)
    weak = text.migration_notes(data, args, profiles, srcs, dst, params, pred.calibrated,
                                pred.single_candidate, lambda p: _agent_of(data, p))
    return {"scenario": scen, "workload": args.workload, "from": srcs, "to": dst,
            "from_boards": [data["platforms"][p]["board"] for p in srcs],
            "to_board": data["platforms"][dst]["board"],
            "from_mhz": [clocks.get((args.workload, p)) for p in srcs],
            "to_mhz": _clocks_on(clocks, dst, skip=args.workload), "t1_s": pred.t1,
            "edits": [str(e) for e in edits], "edit_notes": notes,
            "prediction": _rows(pred.ns, pred.t, lo, hi, measured, before),
            "candidates": _candidates(pred), "single_candidate": pred.single_candidate,
            "method": _method(pred), "interval": text.interval_text(pred, data),
            "interval_level": pred.level, "interval_calibrated_on": pred.calibrated,
            "notes": weak}


def _predict_on(data: dict[str, Any], args: argparse.Namespace,
                edits: list[Any]) -> dict[str, Any]:
    """On the measured platform: scenario (b) from the 1-core runs, or with edits (c)."""
    from .models.mpet_curve import time_curve
    from .models.mpet_database import MpetDatabase
    from .models.mpet_predict import predict_scalability
    from .models.mpet_scenarios import (apply_edits, backwards_edits, edited_curve,
                                        scalability_band, scale_only_edits, with_serial)
    plat = _resolve(args.on, data, "--on", args.size)
    sizes: dict[tuple, str] = {}
    clocks: dict[tuple, Any] = {}
    profiles, platforms = _measured_db(data, args, plat, "on", sizes, clocks)
    key = (args.workload, plat)
    topo = platforms[plat]
    ns = list(range(1, int(topo.get("nmax") or 1) + 1))
    measured_t = profiles[key]["t"]
    if 1 not in measured_t:
        raise MpetUsage(f"workload {args.workload!r} has no 1-core run on {args.on}: MPET "
                        f"starts from t(1); sweep it from 1 core")
    parallel = any(n > 1 for n in measured_t)
    common = {"workload": args.workload, "on": plat, "board": data["platforms"][plat]["board"],
              "on_mhz": clocks.get(key), "edits": [str(e) for e in edits], "edit_notes": [],
              "notes": []}
    if edits and parallel:
        # (c) on the whole measured profile: no candidates, the profile's own curve edited
        db = MpetDatabase(profiles, platforms)
        t1, sc = db.t1(key), db.sc[key]
        before = [float(x) for x in time_curve(t1, sc, ns, topo.get("n_nu"), topo.get("n_ht"))]
        t1e, sce = apply_edits(t1, sc, edits)
        t = edited_curve(t1e, sce, ns, topo.get("n_nu"), topo.get("n_ht"), edits, sc)
        none = [None] * len(ns)
        common["edit_notes"] = backwards_edits(t1, sc, edits, ns, topo.get("n_nu"),
                                               topo.get("n_ht")) + scale_only_edits(edits)
        return {**common, "scenario": "c (virtual workload: the measured profile edited)",
                "t1_s": t1e, "prediction": _rows(ns, t, none, none, {}, before),
                "candidates": {"t1": [], "sc": []}, "single_candidate": False, "method": None,
                "interval": "none: the edited profile's own curve (eq. 3-4), no candidates",
                "interval_level": None, "interval_calibrated_on": 0}
    if not any(p == plat and w != args.workload for w, p in profiles):
        raise MpetUsage(f"{args.workload!r} is the only workload measured on {args.on}"
                        f"{_at_size(args.size, _freq_arg(args))}: scenario b takes the "
                        f"scaling of the other workloads there; run 'opptune characterize "
                        f"{_characterize_opts(data, plat)}{_size_opt(args)}' first")
    if not any(p == plat and w != args.workload and len(prof["t"]) > 1
               for (w, p), prof in profiles.items()):
        # the others lend their scaling (predict_scalability): one core count has none
        raise MpetUsage(f"no other workload on {args.on}{_at_size(args.size, _freq_arg(args))} "
                        f"is measured at more than one core count: scenario b takes their "
                        f"scaling; run 'opptune characterize "
                        f"{_characterize_opts(data, plat)}{_size_opt(args)}' first")
    # as eval-mpet --scenario b cuts each profile (mpet_eval.evaluate_scalability)
    db = with_serial(MpetDatabase(profiles, platforms), key)
    pred = predict_scalability(db, args.workload, plat, ns=ns)
    common["notes"] = text.serial_notes(data, args, plat, profiles[key], _agent_of(data, plat))
    t, before = pred.t, None
    if edits:
        before = t
        t1e, sce = apply_edits(pred.t1, pred.sc, edits)
        t = edited_curve(t1e, sce, ns, topo.get("n_nu"), topo.get("n_ht"), edits, pred.sc)
        common["edit_notes"] = backwards_edits(pred.t1, pred.sc, edits, ns, topo.get("n_nu"),
                                               topo.get("n_ht")) + scale_only_edits(edits)
    lo, hi, calibrated, level = scalability_band(db, pred, topo, t, tuple(edits))
    scen = ("c (virtual workload: the scaling predicted as in b, edited)" if edits
            else "b (scalability from the 1-core runs)")
    text.note_mixed_sizes(data, sizes, [plat])
    text.note_mixed_clocks(data, clocks, [plat])
    text.note_marked(data, sizes, [plat])
    text.note_under_way(data, [plat])
    measured = {} if edits else {n: v for n, v in measured_t.items() if n > 1}
    return {**common, "scenario": scen, "t1_s": pred.t1,
            "prediction": _rows(ns, t, lo, hi, measured, before),
            "candidates": _candidates(pred), "single_candidate": pred.single_candidate,
            "method": _method(pred),
            "interval": (text.calibrated_text(hi[0] / t[0], calibrated, level,
                                              data["platforms"][plat]["board"], " at more than "
                                              "one core (each from its own 1-core runs)",
                                              args.workload)
                         if calibrated else
                         "min..max of the curves each single candidate's scaling gives, around "
                         "the weighted one (too few other workloads measured there at more "
                         "than one core to calibrate it, no stated level)"
                         + (" (it rests on a single candidate)" if pred.single_candidate
                            else "")),
            "interval_level": level, "interval_calibrated_on": calibrated}
