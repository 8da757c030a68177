"""MPET scenarios (b) and (c) around mpet_predict (seed 000, section 3.2, Figure 7).

Pure. (b) scalability of a not-yet-parallel workload: its profile reduced to n = 1
(``serial_profile``) and ``mpet_predict.predict_scalability``; ``scalability_band`` gives its
interval, calibrated on the platform's other workloads (``serial_errors``) or, with too few,
the spread of the single candidates' curves (``candidate_band``). (c) a virtual workload: the
user edits the scaling parameters of a measured (or predicted) workload (``parse_edit``,
``apply_edits``) and t(n) follows from eq. 3-4 (``edited_curve``).

An edit is ``NAME=VALUE`` or ``NAME.ELEMENT=VALUE``: NAME one of R l w c d s j (Table 1),
``q`` (the cpu-time ratio n t(n)/t(1), the trend of workloads without runtime parameters) or
``t1`` (seconds); ELEMENT one of eq. 8's m_base b_base m_nu b_nu m_ht b_ht; VALUE a number
(the curve becomes that constant, or the element that value) or ``Fx`` (every element, i.e.
the curve at every n, times F).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .mpet_curve import ELEMENTS, PARAMS, eval_curve, feature_vector, gauss, \
    runtime_params_valid, time_curve
from .mpet_database import MpetDatabase
from .mpet_interval import calibrated_band, takes_part
from .mpet_predict import SEED_SC, Selection, largest_log_error, predict_scalability

EDITABLE = (*PARAMS, "q", "t1")


class EditError(ValueError):
    """An edit that names nothing editable or gives an unusable value; the message says which."""


@dataclass(frozen=True)
class Edit:
    name: str            # R .. j, q or t1
    element: str | None  # one of ELEMENTS, or None for the whole curve
    factor: bool         # value multiplies (``2x``) rather than replaces
    value: float

    def __str__(self) -> str:
        target = self.name + (f".{self.element}" if self.element else "")
        return f"{target}={self.value:g}{'x' if self.factor else ''}"


def parse_edit(text: str) -> Edit:
    """``l=2x``, ``l=0.1``, ``R.m_base=0.9``, ``t1=0.5x`` -> Edit; EditError otherwise."""
    if "=" not in text:
        raise EditError(f"--set {text!r}: write NAME=VALUE, e.g. l=2x or w.b_base=0.05")
    lhs, rhs = (x.strip() for x in text.split("=", 1))
    name, _, element = lhs.partition(".")
    if name not in EDITABLE:
        raise EditError(f"--set {text!r}: unknown parameter {name!r}; editable: "
                        f"{', '.join(EDITABLE)}")
    if element and (name == "t1" or element not in ELEMENTS):
        raise EditError(f"--set {text!r}: unknown element {element!r}; "
                        + ("t1 is one number" if name == "t1"
                           else f"elements: {', '.join(ELEMENTS)}"))
    factor = rhs.lower().endswith("x")
    try:
        value = float(rhs[:-1] if factor else rhs)
    except ValueError:
        value = math.nan
    # a whole curve (R..j, q) is a share or ratio of time, never negative; one element (a
    # gradient, a segment's offset) may be
    negative = value < 0 and (factor or not element)
    if not math.isfinite(value) or negative or (name == "t1" and value <= 0):
        raise EditError(f"--set {text!r}: give a number, or a factor like 2x (>= 0)"
                        + ("; t1 must be > 0" if name == "t1" else ""))
    return Edit(name, element or None, factor, value)


def _slot(name: str) -> int:
    return 6 * (len(PARAMS) if name == "q" else PARAMS.index(name))


def apply_edits(t1: float, sc: np.ndarray, edits: list[Edit]) -> tuple[float, np.ndarray]:
    """(t1, sc) after the edits, in order. Editing a runtime parameter of a profile whose
    runtime parameters are invalid (an external command) is refused: t(n) would not use it."""
    sc = np.array(sc, dtype=float)
    valid = runtime_params_valid(sc)
    for e in edits:
        if e.name == "t1":
            t1 = t1 * e.value if e.factor else e.value
            continue
        # the profile edited: A's own, or in scenario (b) the one predicted from the
        # candidates' scaling, which has their runtime parameters or none
        if e.name != "q" and not valid:
            raise EditError(f"--set {e}: this profile has no runtime parameters (an external "
                            f"command or runs without MPET accounting; from only its 1-core "
                            f"runs, candidates without them); edit q (the cpu-time ratio n "
                            f"t(n)/t(1)) or t1 instead")
        if e.name == "q" and valid:
            raise EditError(f"--set {e}: this profile's t(n) follows the runtime parameters R l "
                            f"w c d s j (from only its 1-core runs, the candidates'); edit "
                            f"those (q only drives profiles without them)")
        i = _slot(e.name)
        part = sc[i: i + 6]
        if e.element is None:
            if e.factor:
                part[:] = part * e.value
            else:
                # a constant curve: the offset, every gradient and segment offset 0
                part[:] = np.where(np.isfinite(part), 0.0, np.nan)
                part[1] = e.value
        else:
            k = ELEMENTS.index(e.element)
            if not math.isfinite(part[k]):
                raise EditError(f"--set {e}: element {e.element} is invalid for this profile "
                                f"(its platform has no such breakpoint, or no runs beyond it)")
            part[k] = part[k] * e.value if e.factor else e.value
    return t1, sc


def edited_curve(t1: float, sc: np.ndarray, ns, n_nu: int | None, n_ht: int | None,
                 edits: list[Edit] = (), unedited: np.ndarray | None = None) -> list[float]:
    """t(n) of eq. 3-4 for an edited profile; EditError where the edits leave no time, i.e.
    U(n) = 1 - (l + w + c + d + s + j)(n) <= 0, R(n) <= 0, or t(n) not finite and positive,
    or where an element edit of ``edits`` takes a share below 0 at some n (a share of time: a
    negative lock wait would raise U(n) above 1 and shorten t(n)), or, where the fitted
    ``unedited`` sc is already below 0 there (the least-squares line through a measured lock
    wait of 0, 0.15, 0.29, 0.47 at n = 1..4 has l(1) = -0.005), below that. A whole curve's
    factor or constant (>= 0) makes no share negative that the fit had not."""
    ns = list(ns)
    if runtime_params_valid(sc):
        arr = np.asarray(ns, dtype=float)
        shares = {p: eval_curve(sc[_slot(p): _slot(p) + 6], arr, n_nu, n_ht, gauss(p))
                  for p in PARAMS[1:]}
        for p in dict.fromkeys(e.name for e in edits
                               if e.name in shares and e.element is not None):
            floor = np.zeros(len(ns)) if unedited is None else np.minimum(0.0, eval_curve(
                unedited[_slot(p): _slot(p) + 6], arr, n_nu, n_ht, gauss(p)))
            # a share fitted to 0 at n = 1 evaluates to -1e-16: rounding, not an edit
            below = [(n, v) for n, v, f in zip(ns, shares[p], floor) if v < f - 1e-9]
            if below:
                n, v = below[0]
                raise EditError(f"the edits make {p}(n) negative at n = {n} ({v:.3g}): it is a "
                                f"share of time; give elements that keep it >= 0")
        over = sum(shares.values())
        r = eval_curve(sc[0:6], arr, n_nu, n_ht)
        for n, o, rn in zip(ns, over, r):
            if o >= 1 or rn <= 0:
                raise EditError(f"the edits leave no useful time at n = {n}: R(n) = {rn:.3g}, "
                                f"l+w+c+d+s+j = {o:.3g} (U(n) = 1 - that must stay above 0)")
    t = [float(x) for x in time_curve(t1, sc, ns, n_nu, n_ht)]
    bad = [n for n, x in zip(ns, t) if not (math.isfinite(x) and x > 0)]
    if bad:
        raise EditError(f"the edits give no positive time at n = {bad[0]}; undo or soften them")
    return t


def backwards_edits(t1: float, sc: np.ndarray, edits: list[Edit], ns, n_nu: int | None,
                    n_ht: int | None) -> list[str]:
    """A sentence per factor edit of a share (l w c d s j) that moves it the other way than
    it reads at some n: F times it moves it against F where what it scales is below 0, so t(n)
    shortens under F > 1 (lengthens under F < 1). A whole share (``l=2x``) where it is below 0:
    a fitted line may dip below 0 (the lock wait 0, 0.15, 0.29, 0.47 at n = 1..4 fits l(1) =
    -0.005), which eq. 3 takes as it is; one element (``l.b_base=0.5x``) that is below 0 (that
    line's offset), at every n it acts on. Each edit is judged on the profile as the edits
    before it left it."""
    if not runtime_params_valid(sc):
        return []
    arr = np.asarray(list(ns), dtype=float)
    out = []
    for i, e in enumerate(edits):
        if not e.factor or e.value == 1 or e.name not in PARAMS[1:]:
            continue
        before = apply_edits(t1, sc, edits[:i])[1]
        part = before[_slot(e.name): _slot(e.name) + 6]
        if e.element is not None:
            out += _backwards_element(e, part, arr, n_nu, n_ht)
            continue
        curve = eval_curve(part, arr, n_nu, n_ht, gauss(e.name))
        below = [(int(n), float(v)) for n, v in zip(arr, curve) if v < -1e-9]
        if below:
            at = ", ".join(str(n) for n, _ in below[:6]) + (", ..." if len(below) > 6 else "")
            n0, v0 = below[0]
            way, t = (("further below 0", "shorter") if e.value > 1
                      else ("nearer 0" if e.value > 0 else "0", "longer"))
            out.append(f"{e}: {e.name}(n) is below 0 at n = {at} ({e.name}({n0}) = {v0:.3g}: "
                       f"a fitted line dipping below a share measured near 0), so {e.value:g} "
                       f"times it is {way} there and t(n) {t}: the edit reads backwards at "
                       f"those n")
    return out


def scale_only_edits(edits: list[Edit]) -> list[str]:
    """A sentence per factor edit of a whole ratio curve that is 1 at n = 1 (q, and R by its
    definition): F times it at every n is F times every t(n), t1=Fx's effect, so the
    speed-up t(1)/t(n) is unchanged, which such an edit does not read as."""
    out = []
    for e in edits:
        if e.name in ("q", "R") and e.element is None and e.factor and e.value != 1:
            out.append(f"{e}: {e.name}(n) is 1 at n = 1 (a ratio to t(1)), so {e.value:g} "
                       f"times it at every n is {e.value:g} times every t(n), as "
                       f"t1={e.value:g}x: the speed-up t(1)/t(n) is unchanged; to change how "
                       f"it scales, edit its slope ({e.name}.m_base) or another parameter")
    return out


def _backwards_element(e: Edit, part: np.ndarray, arr: np.ndarray, n_nu: int | None,
                       n_ht: int | None) -> list[str]:
    """backwards_edits' sentence for a factor edit of one element of a share (``part``, its
    six elements as the edits before left them): where the element is below 0, F times it
    moves the share against F at every n it acts on."""
    k = ELEMENTS.index(e.element or "")
    value = float(part[k])
    if not value < -1e-12:  # not below 0, or invalid (NaN: apply_edits refuses it)
        return []
    after = part.copy()
    after[k] = value * e.value
    moved = (eval_curve(after, arr, n_nu, n_ht, gauss(e.name))
             - eval_curve(part, arr, n_nu, n_ht, gauss(e.name)))
    at = [str(int(n)) for n, m in zip(arr, moved) if abs(m) > 1e-12]
    if not at:
        return []
    way, t = ("lowers", "shorter") if e.value > 1 else ("raises", "longer")
    return [f"{e}: {e.element} of {e.name}(n) is below 0 ({value:.3g}), so {e.value:g} times "
            f"it {way} {e.name}(n) at n = {', '.join(at[:6])}{', ...' if len(at) > 6 else ''} "
            f"and t(n) is {t} there: the edit reads backwards at those n"]


def serial_profile(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The profile as a not-yet-parallel workload has it: t(1), parameters and counters at
    n = 1 only (seed 000 Table 3: t(1) and pc(1))."""
    def one(per_n: Mapping | None) -> dict:
        per_n = per_n or {}
        return {1: per_n[k] for k in per_n if float(k) == 1.0}
    return {"t": one(profile.get("t")), "params": one(profile.get("params")),
            "counters": one(profile.get("counters"))}


def candidate_band(db: Any, pred: Any, topo: Mapping[str, Any], t: list[float],
                   edits: tuple[Edit, ...] = ()) -> tuple[list[float], list[float]]:
    """Scenario (b)'s interval: min..max over the curves each single candidate's elements give
    (with the workload's own t(1), and the same edits), around the prediction ``t``; a
    candidate without weight takes no part (``mpet_interval.takes_part``)."""
    own = db.sc[(pred.workload, pred.target)]
    curves = [np.asarray(t, dtype=float)]
    for c in pred.sc_candidates:
        if not takes_part(c, pred.sc_candidates):
            continue
        sc = np.array(db.sc[(c.workload, pred.target)], dtype=float)
        sc = np.where(np.isfinite(sc), sc, own)
        try:
            t1, sc = apply_edits(pred.t1, sc, list(edits))
        except EditError:  # this candidate cannot take the edits: it gives no bound
            continue
        with np.errstate(all="ignore"):
            curve = np.asarray(time_curve(t1, sc, pred.ns, topo.get("n_nu"), topo.get("n_ht")))
        if np.all(np.isfinite(curve)) and np.all(curve > 0):
            curves.append(curve)
    stack = np.vstack(curves)
    return [float(x) for x in stack.min(axis=0)], [float(x) for x in stack.max(axis=0)]


def with_serial(db: MpetDatabase, key, without=None) -> MpetDatabase:
    """``db`` with profile ``key`` cut to its 1-core runs (``serial_profile``; its sc refitted,
    the others' kept) and the profile ``without``, if given, left out."""
    topo = db.platforms.get(key[1], {})
    serial = serial_profile(db.profiles[key])
    profiles = {k: v for k, v in db.profiles.items() if k != without}
    sc = {k: v for k, v in db.sc.items() if k != without}
    sc[key] = feature_vector(serial, topo.get("n_nu"), topo.get("n_ht"), db.counters)
    return MpetDatabase({**profiles, key: serial}, db.platforms, sc, db.counters)


def serial_errors(db: MpetDatabase, workload, platform,
                  sel: Selection = SEED_SC) -> list[float]:
    """The largest |log(predicted / measured t(n))| over n of each other workload B measured
    on ``platform`` at more than one core, predicted by scenario (b) from its own 1-core runs
    as ``workload`` is (without ``workload``'s profile, which is the sequential one)."""
    errors = []
    for b in sorted({w for w, p in db.profiles if p == platform and w != workload}, key=str):
        key = (b, platform)
        t = db.profiles[key].get("t") or {}
        if 1 not in t or len(t) < 2:
            continue
        sub = with_serial(db, key, without=(workload, platform))
        errors.append(largest_log_error(
            db.profiles[key], lambda ns: predict_scalability(sub, b, platform, sel, ns=ns)))
    return [e for e in errors if e is not None]


def scalability_band(db: MpetDatabase, pred: Any, topo: Mapping[str, Any], t: list[float],
                     edits: tuple[Edit, ...] = ()) -> tuple[list[float], list[float], int,
                                                            float | None]:
    """Scenario (b)'s interval around ``t``, how many workloads calibrated it and its level:
    ``mpet_interval.calibrated_band`` of ``serial_errors``, as scenario (a)'s (level m/(m+1));
    ``candidate_band``, 0 and None with too few errors."""
    errors = serial_errors(db, pred.workload, pred.target)
    band = calibrated_band(t, errors)
    if band is None:
        return (*candidate_band(db, pred, topo, t, edits), 0, None)
    lo, hi, level = band
    return lo, hi, len(errors), level


__all__ = ["EDITABLE", "Edit", "EditError", "apply_edits", "candidate_band", "edited_curve",
           "parse_edit", "scalability_band", "scale_only_edits", "serial_errors",
           "serial_profile", "with_serial"]
