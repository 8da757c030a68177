"""What ``opptune predict``'s MPET modes say: the prediction as text (stdout), its notes on
stderr (sizes or clocks mixed, core counts left out for interference, more references), the
interval in words, and JSON made printable."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any


def note_mixed_sizes(data: dict[str, Any], sizes: dict[tuple, str], plats: list[str]) -> None:
    """Without --size a profile is taken at whichever size has most core counts: say so on
    stderr when the platforms the prediction reads mix sizes (times of different inputs)."""
    if not sizes or len({s for (_, p), s in sizes.items() if p in plats}) < 2:
        return
    parts = []
    for plat in plats:
        mine = {w: s for (w, p), s in sorted(sizes.items()) if p == plat}
        text = (next(iter(mine.values())) if len(set(mine.values())) == 1
                else _per_workload(mine, str))
        parts.append(f"{data['platforms'][plat]['board']}: {text}")
    print(f"opptune predict: note: the profiles used mix sizes ({'; '.join(parts)}); give "
          f"--size S to use one", file=sys.stderr)


def _per_workload(mine: dict[str, Any], word: Any) -> str:
    """'w1 small, w2 medium' for a few workloads; past 8 counted per value with three names
    each (a board holding hundreds of workloads made a note of 40 kB)."""
    if len(mine) <= 8:
        return ", ".join(f"{w} {word(v)}" for w, v in mine.items())
    groups: dict[str, list[str]] = {}
    for w, v in mine.items():
        groups.setdefault(word(v), []).append(w)
    return ", ".join(
        f"{v} for {len(ws)} workload{'s' if len(ws) != 1 else ''} ({', '.join(ws[:3])}"
        f"{', ...' if len(ws) > 3 else ''})"
        for v, ws in sorted(groups.items(), key=lambda g: -len(g[1])))


def _mhz(f: Any) -> str:
    # no frequency set: a board without cpufreq, or runs left to the governor (imported
    # runs, a sweep with frequency_grid "none"), so nothing more is claimed
    return f"{f:g} MHz" if isinstance(f, (int, float)) else "its own clock (no frequency set)"


def _clocks_text(fs: list[float]) -> str:
    if len(fs) > 1:
        return f"{', '.join(f'{f:g}' for f in fs)} MHz (its profiles mix clocks)"
    return _mhz(fs[0] if fs else None)


def note_mixed_clocks(data: dict[str, Any], clocks: dict[tuple, Any], plats: list[str],
                      skip: tuple | None = None) -> None:
    """Each profile is taken at the highest frequency its workload was measured at on the
    board: say on stderr where the profiles of one platform the prediction reads were taken
    at different clocks (a workload swept at a lower clock only), so their times are no
    transfer of one platform."""
    parts = []
    for plat in plats:
        mine = {w: f for (w, p), f in sorted(clocks.items(), key=str)
                if p == plat and (w, p) != skip}
        if len(set(mine.values())) > 1:
            parts.append(f"{data['platforms'][plat]['board']}: "
                         + _per_workload(mine, _mhz))
    if parts:
        print(f"opptune predict: note: the profiles used were taken at different clocks "
              f"({'; '.join(parts)}): each at the highest its workload was measured at; "
              f"sweep the others at the board's highest clock for a prediction at one",
              file=sys.stderr)


def note_marked(data: dict[str, Any], sizes: dict[tuple, str], plats: list[str]) -> None:
    """Say on stderr which core counts of the profiles used on ``plats`` are missing because
    every run there was marked for interference (the daemon's ``marked_points``): t(n) stops
    short of the board's cores, or a curve has a gap, for that reason."""
    left: dict[str, dict[str, set[int]]] = {}
    for m in data.get("marked_points") or ():
        if m["platform"] in plats and sizes.get((m["workload"], m["platform"])) == m["size"]:
            left.setdefault(m["platform"], {}).setdefault(m["workload"], set()).update(
                m["cores"])
    if not left:
        return
    parts = []
    for plat in (p for p in plats if p in left):
        works = sorted(left[plat])
        ns = sorted(set().union(*left[plat].values()))
        parts.append(f"on {data['platforms'][plat]['board']} n = {', '.join(map(str, ns))} of "
                     f"{len(works)} workload{'s' * (len(works) != 1)} ({', '.join(works)})")
    print(f"opptune predict: note: left out, every run there marked for interference: "
          f"{'; '.join(parts)}; 'opptune status' shows their re-measurement (accept_load "
          f"= true in the daemon's configuration uses them)", file=sys.stderr)


def note_under_way(data: dict[str, Any], plats: list[str]) -> None:
    """Say on stderr where a board the prediction reads has jobs not done yet (a
    characterisation under way): its suite or the workload is read as measured so far, at
    the highest clock reached so far, so the prediction may change once they are done."""
    busy = data.get("under_way") or {}
    parts = [f"{n} of agent {a} ({data['platforms'][p]['board']})"
             for p in plats for a, q in sorted(data["agents"].items())
             if q == p and (n := busy.get(a))]
    if not parts:
        return
    agents = sorted(a for p in plats for a, q in data["agents"].items()
                    if q == p and busy.get(a))
    print(f"opptune predict: note: jobs still queued or running: {'; '.join(parts)}; this "
          f"prediction rests on what is measured so far: predict again once they are done "
          f"('opptune characterize --agent {agents[0]} --wait' follows them)", file=sys.stderr)


def note_more_references(data: dict[str, Any], profiles: dict, args: argparse.Namespace,
                         srcs: list[str], dst: str) -> None:
    """Say on stderr where the workload was measured besides the references given: from more
    references MPET checks its transfers (docs/mpet.md: loghin's full error 40 % from one, 21 %
    from all)."""
    more = sorted(p for w, p in profiles if w == args.workload and p != dst and p not in srcs)
    if not more:
        return
    names = [data["platforms"][p].get("board") or p for p in more]
    # the --from to copy names the boards as the user did: by agent where they gave agents
    by_agent = all(a.strip() in data["agents"] for a in args.source.split(",") if a.strip())
    agents = {p: [a for a, q in data["agents"].items() if q == p] for p in more}
    ids = [agents[p][0] if by_agent and len(agents[p]) == 1 else p for p in more]
    print(f"opptune predict: note: {args.workload} is also measured on {', '.join(names)}: "
          f"--from {args.source},{','.join(ids)} (or --from all) predicts from those too, "
          f"which is usually much closer (docs/mpet.md)", file=sys.stderr)


def calibrated_text(factor: float, m: int, level: float, board: str, how: str,
                    workload: str) -> str:
    """A calibrated interval (``mpet_predict.calibrate``, ``scalability_band``) in words;
    its level holds where ``workload`` is as hard to predict as those m (split conformal)."""
    failed = m - round(level * (m + 1))
    return (f"t(n) times or divided by {factor:.3g}: the largest error at any n of the same "
            f"prediction for each of the {m} other workloads measured on {board}{how}"
            + (f" ({failed} of them gave no positive time: counted as outside)" if failed
               else "")
            + f"; if {workload} is as hard to predict as they are, it holds its measured t(n) "
              f"at every n with probability {100 * level:.0f} %")


def interval_text(pred: Any, data: dict[str, Any]) -> str:
    """What scenario (a)'s interval is (docs/mpet.md)."""
    from .models.mpet_interval import SINGLE_CANDIDATE_FACTOR
    if pred.calibrated:
        return calibrated_text(pred.upper[0] / pred.t[0], pred.calibrated, pred.level,
                               data["platforms"][pred.target]["board"], " (each left out in "
                               "turn)", str(pred.workload))
    return ("min..max of the single candidates' predictions around the weighted one (too few "
            "other workloads on the target to calibrate it, no stated level)"
            + (f", at least x{SINGLE_CANDIDATE_FACTOR:g} either way: it rests on a single "
               f"candidate" if pred.single_candidate else ""))


def print_prediction(out: dict[str, Any]) -> None:
    """A prediction (``_predict_migration``'s or ``_predict_on``'s answer) as text."""
    if "on" in out:
        print(f"{out['workload']}: on {out['board']} ({out['on']}) at {_mhz(out['on_mhz'])}, "
              f"MPET scenario {out['scenario']}")
    else:
        print(f"{out['workload']}: measured on " + ", ".join(
            f"{b} ({p}) at {_mhz(f)}" for b, p, f in zip(out["from_boards"], out["from"],
                                                        out["from_mhz"]))
              + f", predicted on {out['to_board']} ({out['to']}) at "
              + _clocks_text(out["to_mhz"]) + f" by MPET scenario {out['scenario']}")
    if out["edits"]:
        print("edits: " + ", ".join(out["edits"]))
    rows = out["prediction"]
    measured = any(r["measured_s"] is not None for r in rows)
    edited = any("unedited_s" in r for r in rows)
    print(f"{'n':>3}  {'t(n) s':>10}  {'interval s':>23}" +
          (f"  {'unedited s':>10}" if edited else "") +
          (f"  {'measured s':>10}" if measured else ""))
    for r in rows:
        line = f"{r['n']:>3}  {r['time_s']:>10.4g}  " + (
            f"{'-':>23}" if r["lower_s"] is None
            else f"[{r['lower_s']:>10.4g}, {r['upper_s']:>10.4g}]")
        if edited:
            line += f"  {r['unedited_s']:>10.4g}"
        if measured:
            m = r["measured_s"]
            line += f"  {m:>10.4g}" if m is not None else f"  {'-':>10}"
        print(line)
    if edited and all(math.isclose(r["time_s"], r["unedited_s"], rel_tol=1e-12)
                      for r in rows):
        print("note: the edits change no t(n): an edited curve that is 0 at every n stays 0 "
              "under a factor; set a value instead (e.g. l=0.1) or edit another parameter")
    elif edited and (moved := _barely_moved(out["edits"], rows)) is not None:
        # a factor of a share fitted near 0 (the lock wait of a workload without locks) moves
        # t(n) below the digits printed: the columns read equal, as if nothing were edited
        print(f"note: the edits change t(n) by at most {100 * moved:.2g} %: what they scale "
              f"is near 0 in this profile, and a factor keeps it near 0; set a value instead "
              f"(e.g. l=0.1) or edit another parameter")
    for why in out.get("edit_notes") or ():
        print(f"note: {why}")
    print("interval: " + out["interval"])
    op = out.get("operating_point")
    if op:
        print(f"cores: {op['cores']} ({op['time_s']:.4g} s), the fewest within "
              f"{100 * op['tolerance']:.0f} % of the fastest predicted ({op['fastest_cores']} "
              f"core{'s' if op['fastest_cores'] != 1 else ''}, {op['fastest_s']:.4g} s)")
    if out.get("single_candidate") and not out.get("interval_calibrated_on") and "on" in out:
        # a migration's notes say it, with the boards to characterize (migration_notes)
        print("note: a single candidate carries this prediction; measure more of the suite on "
              "the target (opptune characterize) for a narrower one")
    if out.get("method"):
        first = next((r["time_s"] for r in rows if r["n"] == 1), None)
        print(_method_line(out["method"], out.get("t1_s"), first))
    # the candidates' platforms by their boards' names, as the first line names them
    boards = {out.get(k): out.get(b) for k, b in (("to", "to_board"), ("on", "board"))
              if out.get(b)}
    boards.update(zip(out.get("from") or (), out.get("from_boards") or ()))
    # on the measured platform every candidate is on it: D_p is 0 and D_t is D_a
    on = "on" in out
    for name, label in (("t1", "t(1)"), ("sc", "scaling")):
        if not out["candidates"][name]:
            continue
        print(f"{label} candidates (platform, workload: "
              f"{'D_a' if on else 'D_a, D_p, D_t'}, weight):")
        for c in out["candidates"][name]:
            plat = boards.get(c["platform"], c["platform"])
            print(f"  {plat}, {c['workload']}: {_num(c['d_a'])}, "
                  + ("" if on else f"{_num(c['d_p'])}, {_num(c['d_t'])}, ")
                  + _num(c["weight"], 2)
                  + ("" if c.get("usable", True) else "  (no estimate: a measurement it "
                                                      "needs is missing; not used)"))
    for line in candidates_legend(out):
        print(line)
    for why in out.get("notes") or ():
        print(f"note: {why}")
    if measured:
        print("(measured: the workload's own runs, which the prediction did not use)")


# what D_a and the weight are, per basis that rated the candidates (docs/mpet.md): {a} the
# workload, {t} the board predicted on, {checks} what a validated transfer is checked on,
# {ratio} a ratio basis's distances
_BASIS_LEGEND = {
    "t1-validated": "D_a is how far the candidate's own transfer missed the measured times it "
                    "can be checked on ({checks}), and the weight follows that error: best "
                    "first; D_p how far from proportional the two boards' t(1) and q(n) are "
                    "over the workloads both ran",
    "t1-ratio": "{ratio}; weighted alike",
    "q-validated": "D_a is how far the candidate's own transfer of q(n) = n t(n)/t(1) missed "
                   "the curves it can be checked on ({checks}), and the weight follows that "
                   "error: best first; D_p how far from proportional the two boards' t(1) and "
                   "q(n) are over the workloads both ran",
    "q-ratio": "{ratio}; listed by D_t, weighted by D_a alone: the nearest 1, the farthest 0",
    "sc": "D_a and D_p compare fitted scaling curves (the runtime parameters R l w c d s j "
          "where recorded, the cpu-time ratio q(n) = n t(n)/t(1), counters where measured), "
          "D_a B's with {a}'s on P, D_p B's on P with B's on {t}; listed by D_t, weighted by "
          "D_a alone: the nearest 1, the farthest 0",
}
# a ratio basis's distances ({x}: what is compared), and where they fall back to the seed's
# (mpet_distance.ratio_distance)
_RATIO = ("D_a is how far from proportional the two workloads' {x} are over the boards both "
          "ran on, D_p the two boards' over the workloads both ran (where fewer than two are "
          "shared, as from one board of {a}'s, the seed's distances over the fitted curves "
          "instead)")


def candidates_legend(out: dict[str, Any]) -> list[str]:
    """Lines under the candidates saying what a candidate is and what its numbers mean, for
    a reader who has not read the seed: the columns, and per table the basis that rated it."""
    if not any(out["candidates"].values()):
        return []
    a = out["workload"]
    if "on" in out:
        return [f"(each candidate is another workload measured on {out['board']} beyond one "
                f"core: {a}'s t(n) is its own t(1) with their scaling, weighted; D_a: how "
                f"unlike {a}'s 1-core profile its profile is (0 alike, 1 unlike); weight: its "
                f"share, by D_a: the nearest 1, the farthest 0)"]
    t = out["to_board"]
    lines = [f"(each candidate is a board P where {a} was measured and a workload B measured "
             f"on P and on {t}: it gives {a} on {t} as {a} on P times B's change from P to "
             f"{t}, and the prediction is their weighted mean; D_a: how unlike {a} B is, D_p: "
             f"how unlike {t} P is, D_t: the two together, 0 alike, 1 unlike; weight: its "
             f"share, the largest 1)"]
    m = out.get("method") or {}
    for name, label in (("t1", "t(1)"), ("sc", "scaling")):
        how = _BASIS_LEGEND.get(m.get(f"{name}_basis"))
        if how and out["candidates"][name]:
            checks = (f"the other workloads on {t}" if len(out["from"]) == 1
                      else f"{a} on its other boards, the other workloads on {t}")
            x = "t(1)" if name == "t1" else "q(n) = n t(n)/t(1)"
            lines.append(f"({label}: " + how.format(
                a=a, t=t, checks=checks, ratio=_RATIO.format(a=a, x=x)) + ")")
    return lines


# below this largest relative change at any n, factor edits of curves are said to barely move
# t(n): the table's 4 significant digits show it unchanged, or changed in the last digit only
BARELY = 1e-3


def _barely_moved(edits: list[str], rows: list[dict[str, Any]]) -> float | None:
    """The largest relative change of t(n) where every edit is a factor of a curve (not t1)
    and that change is below BARELY; else None."""
    if not edits or not all(e.endswith("x") and not e.startswith("t1=") for e in edits):
        return None
    moved = max(abs(r["time_s"] / r["unedited_s"] - 1) for r in rows)
    return moved if moved < BARELY else None


def _method_line(m: dict[str, Any], t1_s: float | None = None,
                 row1_s: float | None = None) -> str:
    """``method:`` of a prediction; ``t1_s``, ``row1_s``: its t(1) and its n = 1 row."""
    # scenario b's t(1) is the workload's own ("t(1) by measured" read as a transfer's name)
    t1 = ("t(1) measured (its own 1-core runs)" if m["t1_basis"] == "measured"
          else f"t(1) by {m['t1_basis']}")
    if m["t1_basis"] == "measured" and t1_s and row1_s and abs(row1_s / t1_s - 1) >= 5e-4:
        # the row is the curve of eq. 3-4, whose fitted lines (eq. 5-7) pass near R(1) =
        # U(1) = 1, not through it: said, not hidden (docs/mpet-experiments.md)
        t1 = (f"t(1) measured ({t1_s:.4g} s, its own 1-core runs; the n = 1 row is the "
              f"fitted curve's, {100 * (row1_s / t1_s - 1):+.1f} %: its lines pass near "
              f"R(1) = U(1) = 1, not through it)")
    line = f"method: {t1}, scaling by {m['sc_basis']}"
    ch = m.get("sc_choice")
    if ch and ch.get("runtime_parameters"):
        line += (" (q-chosen: sc, the seed's distances, since the workload's profiles and the "
                 "target's suite carry the runtime parameters)")
    elif ch:
        errs = ", ".join(f"{b} {_num(100 * e, 1) if e is not None else '-'} %"
                         for b, e in ch["errors"].items())
        line += (f" (q-chosen: {ch['chosen']}, by the geometric-mean error predicting "
                 f"{ch['checked']} other workloads on the target: {errs})" if ch["checked"]
                 else f" (q-chosen: {ch['chosen']}, no other workload on the target to "
                      f"score the options)")
    if (m.get("suite_considered") or 0) < (m.get("suite_measured") or 0):
        line += (f"; candidates, checks and interval from the {m['suite_considered']} of the "
                 f"target's {m['suite_measured']} other workloads most alike it")
    return line


def _num(v: Any, digits: int = 3) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def clean(v: Any) -> Any:
    """NaN (an invalid distance or weight) as null: JSON has no NaN."""
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clean(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def migration_notes(data: dict[str, Any], args: argparse.Namespace, profiles: dict,
                    srcs: list[str], dst: str, params: bool, calibrated: int,
                    single: bool, agent_of: Any) -> list[str]:
    """What makes a migration weak, and what to do about it, in sentences (``notes`` in
    JSON, ``note:`` lines in text): the workload without runtime parameters (``params``
    false: an external command), measured at one core only, from one board where nothing
    else holds it, or an interval with too few of the target's workloads to calibrate it
    (``calibrated`` below MIN_CALIBRATION; ``single``: and one candidate carries it).
    ``agent_of(platform)`` names a board's agent for the advice."""
    a, board = args.workload, (lambda p: data["platforms"][p]["board"])
    size = f" --size {args.size}" if args.size else ""
    notes = []
    if not params:
        notes.append(f"{a}'s runs record no runtime parameters (R l w c d s j: an external "
                     f"command records them only where its output carries an mpet object, "
                     f"docs/mpet.md), so they take no part: its scaling candidates are rated "
                     f"by its measured cpu-time ratio q(n) = n t(n)/t(1), and --set edits "
                     f"only q and t1")
    if all(len(profiles[(a, p)]["t"]) == 1 for p in srcs):
        notes.append(f"{a} was measured at 1 core only on {', '.join(map(board, srcs))}: its "
                     f"scaling on {board(dst)} is its candidates' alone, nothing of its own; "
                     f"'opptune sweep --agent {agent_of(srcs[0])} --workload {a}{size}' "
                     f"measures it over the cores")
    elsewhere = [p for w, p in profiles if w == a and p != dst and p not in srcs]
    if len(srcs) == 1 and not elsewhere:
        notes.append(f"from one board MPET cannot check how {a} relates to the other "
                     f"workloads elsewhere (on the evidence sets one reference is about twice "
                     f"as far off as several, docs/mpet.md): measure {a} on a second board "
                     f"and give both, --from {args.source},P2")
    from .models.mpet_interval import MIN_CALIBRATION
    if calibrated < MIN_CALIBRATION:
        agents = ", ".join(f"'opptune characterize --agent {agent_of(p)}{size}'"
                           for p in [*srcs, dst])
        notes.append(f"the interval is not calibrated"
                     + (" and a single candidate carries the prediction" if single else "")
                     + f": fewer than {MIN_CALIBRATION} other workloads were measured both on "
                       f"{board(dst)} and where {a} was; {agents} measure the suite there, for "
                       f"an interval with a stated level")
    return notes


def records_params(profile: dict) -> bool:
    """Whether a profile's runs recorded MPET's runtime parameters (R..j) at some n."""
    return any(isinstance(v, (int, float)) and math.isfinite(v)
               for per_n in (profile.get("params") or {}).values() for v in per_n.values())


def serial_notes(data: dict[str, Any], args: argparse.Namespace, plat: str, profile: dict,
                 agent: str) -> list[str]:
    """Scenario (b)'s weak case in a sentence: 1-core runs without runtime parameters and
    without counters tell the workload apart from none of the others, so its candidates are
    not chosen by likeness to it."""
    one = lambda k: {n: v for n, v in (profile.get(k) or {}).items()  # noqa: E731
                     if float(n) == 1.0}
    if records_params({"params": one("params")}) or any(one("counters").values()):
        return []
    a, board = args.workload, data["platforms"][plat]["board"]
    beyond = any(n > 1 for n in profile["t"])
    size = f" --size {args.size}" if args.size else ""
    return [f"{a}'s 1-core runs record no runtime parameters and no counters, so nothing "
            f"measured at one core tells it apart from the other workloads on {board}: the "
            f"candidates' distances compare their own curves, not their likeness to {a}, and "
            f"the prediction is about the board's typical scaling; "
            + (f"its own runs beyond one core (measured, beside) say more" if beyond else
               f"'opptune sweep --agent {agent} --workload {a}{size}' measures it over the "
               f"cores")]
