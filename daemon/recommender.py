"""Fits and recommendations: queue a group's fit, turn a fitted model into a configuration
pushed to the agent, and judge the agent's verification of it ("verified" only within a
prediction interval narrow enough to confirm the prediction, "unconfirmed" within a wider one,
else "off"). Groups whose fit or recommendation failed are kept with the
reason for the status (``fit_errors``)."""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from typing import Any, Callable

from ..shared.config import DaemonConfig
from ..shared.records import RecordError, RunRecord
from ..shared.standing import WHILE_RUNNING
from ..shared.target_text import measured_text
from .fitter import FitOutcome, FitRequest, Fitter, set_clock_rows, workload_key
from .planner import clock_text, workload_clock
from .recommend import (FitSetting, fit_setting, platform_others, recommend,
                        target_observations)
from .registry import Registry
from .remeasure import never_clean_text
from .store import Group, ResultIn, Store

log = logging.getLogger("opptune.daemon")

# A daemon's claim on a group it is fitting; a claim this old is taken over by another daemon
# (its holder died mid-fit). Fits take seconds.
FIT_LEASE_S = 300.0
# the note on a recommendation the agent's restart dropped from the board (its error text)
DROPPED = "dropped at the agent's restart: "
ENDED = "no longer in force: "  # its process exited while the agent ran (shared/standing.py)
# the states of a verification whose time was judged against the prediction (drift reads
# them; "marked" was not judged: its board was busy)
JUDGED = ("verified", "unconfirmed", "off")


class Recommender:
    def __init__(self, config: DaemonConfig, store: Store, registry: Registry, fitter: Fitter,
                 send: Callable[[bytes, str, dict[str, Any]], bool], stats: dict[str, int]):
        self.config = config
        self.store = store
        self.registry = registry
        self.fitter = fitter
        self.send = send
        self.stats = stats
        self._fit_errors: dict[Group, dict[str, Any]] = {}
        self.drift: Any = None  # drift.Drift, set by the service
        # Daemons sharing one database claim a group in the store before fitting it, so two
        # never fit it at once. ``owner``: this daemon's claims (the service sets its
        # instance id). A group being fitted here, or claimed by another daemon, waits in
        # ``_waiting`` (requests merged) and is requested again when free (``retry_waiting``).
        self.owner = uuid.uuid4().hex[:12]
        self._fitting: set[Group] = set()
        self._waiting: dict[Group, tuple[str | None, str | None, bool]] = {}

    def fit_errors(self) -> list[dict[str, Any]]:
        """Groups whose last fit (or recommendation) failed: group, error, agent, job_id."""
        return [{k: e[k] for k in ("group", "error", "agent", "job_id")}
                for _, e in sorted(self._fit_errors.items())]

    def request_fit(self, group: Group, agent: str | None = None, job_id: str | None = None,
                    recommend_after: bool = True) -> None:
        """Queue a fit of ``group`` from its stored successful runs (once this daemon holds
        the group's claim; until then the request waits)."""
        if group in self._fitting or not self.store.claim_fit(group, self.owner, time.time(),
                                                              FIT_LEASE_S):
            prev = self._waiting.get(group)
            if prev is not None and prev[0] and not agent:  # keep whom to recommend to
                agent, job_id, recommend_after = prev
            self._waiting[group] = (agent, job_id, recommend_after)
            return
        self._fitting.add(group)
        try:
            self._submit(group, agent, job_id, recommend_after)
        except Exception:
            self._fitting.discard(group)
            self.store.release_fit(group, self.owner)
            raise

    def retry_waiting(self) -> None:
        """Request again the fits that waited for their group's claim."""
        for group in [g for g in self._waiting if g not in self._fitting]:
            self.request_fit(group, *self._waiting.pop(group))

    def release_claims(self) -> None:
        """Give back every claim (at shutdown: other daemons need not wait for the lease)."""
        for group in self._fitting | set(self._waiting):
            self.store.release_fit(group, self.owner)

    def _fit_finished(self, group: Group) -> None:
        self._fitting.discard(group)
        if group not in self._waiting:
            self.store.release_fit(group, self.owner)

    def _submit(self, group: Group, agent: str | None, job_id: str | None,
                recommend_after: bool) -> None:
        setting = self._setting(agent, group, self.store.group_runs(group))
        rows = setting.rows
        target = None
        try:
            # what the fit will be asked: the push's candidates, within the cores measured
            # (push); the whole board's made the choice forward-chain to core counts never
            # measured, which no push of this model predicts
            target = target_observations(self._platform(agent, group), setting.axis,
                                         max_cores=setting.measured_cores, order=setting.order)
        except Exception as exc:  # no target: the choice falls back to k-fold validation
            log.warning("no query grid for %s: %s", "/".join(group), exc)
        # the platform's other groups: their replays size the interval (fitter.fit_group,
        # recommend.platform_others); with too few core counts to fit, every stored group
        # may give a prior
        prior = len({c for c, _, _ in rows}) < 2
        keys = [g for g in self.store.groups() if g != group]
        pool = platform_others(group, [(g, g) for g in keys])
        wanted = set(keys) if prior else set(pool)
        runs = {g: self.store.group_runs(g) for g in keys if g in wanted}
        # each through its own fit setting (its cluster's physical cores, the runs' rules)
        board = self._platform(agent, group)
        others = [fit_setting(board, g.variant, runs[g]) for g in pool]
        # this workload elsewhere first, then the platform's, then platforms near by MPET
        stored = [(workload_key(g), g.platform, r) for g, r in runs.items()] if prior else ()
        self.fitter.submit(FitRequest(group, rows, agent, job_id, recommend_after,
                                      target=target, phys_cores=setting.phys_cores, others=others,
                                      stored=stored, outliers_left_out=setting.outliers_left_out))

    def _platform(self, agent: str | None, group: Group) -> dict[str, Any]:
        """The board's description: the connected agent's, else the stored one."""
        info = self.registry.get(agent) if agent else None
        return (info.platform if info else None) or self.store.platform(group.platform) or {}

    def _clock_text(self, agent: str | None, group: Group, freq_khz: int | None,
                    cpus: list[int]) -> str:
        """A recommendation's frequency in the log's words, as recommend says it: where none
        is set, what its cpus run at (planner.workload_clock), not a governor's always."""
        if freq_khz is not None:
            return clock_text(freq_khz)
        info = self.registry.get(agent) if agent else None
        return clock_text(None, workload_clock(
            self._platform(agent, group),
            info.workload_kind(group.workload) if info else None, list(cpus)))

    def _setting(self, agent: str | None, group: Group, rows: Any) -> FitSetting:
        """A ``cluster<i>`` variant fits and recommends within that cluster; the frequency
        axis comes from the group's runs, so the candidate grid has one exactly when the model
        does (recommend.fit_setting)."""
        return fit_setting(self._platform(agent, group), group.variant, rows)

    def on_fit(self, out: FitOutcome) -> None:
        try:
            self._on_fit(out)
        finally:
            self._fit_finished(out.request.group)
            self.retry_waiting()

    def _on_fit(self, out: FitOutcome) -> None:
        req = out.request
        name = "/".join(req.group)
        if out.error or out.model is None:
            why = f"no model: {out.error or 'the fit gave none'}" + self._marked_note(req.group)
            # a group refitted as its runs arrive fails alike each time: said once, until
            # its reason changes (it read 'no successful runs' where all were marked)
            same = (self._fit_errors.get(req.group) or {}).get("error") == why
            log.log(logging.DEBUG if same else logging.WARNING, "%s: %s", name, why)
            self._fit_failed(req.group, why, req.agent, req.job_id)
            return
        self._fit_errors.pop(req.group, None)
        d = out.description
        self.store.save_fit(req.group, d.get("model", out.model.name), d.get("params", {}),
                            d.get("quality", {}), out.runners_up, time.time())
        self.stats["fits"] += 1
        log.info("fitted %s: %s in %.3f s", name, d.get("model"), out.seconds)
        if out.model.quality.get("prior_based"):
            # a best guess from other workloads' curves: shown (model "prior"), never pushed
            source = out.model.quality.get("prior_source") or (
                f"the curves of {int(out.model.quality.get('n_groups', 0))} other workloads "
                "on this platform")
            marked = self._marked_note(req.group)
            # core counts measured with marked runs only: measuring them is not what is missing
            why = (f"no recommendation: only a prior-based prediction ({source})"
                   + (marked or "; measure a second core count for a fitted model"))
            log.info("%s: %s", name, why)
            self._fit_failed(req.group, why, req.agent, req.job_id)
            return
        if req.recommend and req.agent and self.config.auto_recommend:
            self.push(req.agent, req.group, out.model, req.job_id, req.rows)

    def _marked_note(self, group: Group) -> str:
        """Why runs are missing from the fit when the board was busy ("" when none were)."""
        basis = rests_on(self.store, group)
        if not basis["marked_runs"] or basis["marked_used"]:
            return ""
        return (f"; {basis['marked_runs']} runs marked for interference were left out "
                f"({'; '.join(basis['offenders'])}): they are measured again when the "
                "board is quiet, or fitted under that load with accept_load = true "
                "(opptune recommend/demo --accept-load)")

    def _fit_failed(self, group: Group, error: str, agent: str | None,
                    job_id: str | None) -> None:
        self.stats["fit_errors"] = self.stats.get("fit_errors", 0) + 1
        self._fit_errors[group] = {"group": group.as_dict(), "error": error, "agent": agent,
                                   "job_id": job_id}

    def push(self, agent: str, group: Group, model: Any, job_id: str | None = None,
             rows: Any = None) -> dict[str, Any] | None:
        """Recommend (cores, frequency) for ``group`` from ``model`` and push it to ``agent``.

        Candidates: cores 1..k of the group's cpu order (the board's, or its cluster's), k the
        most cores measured in the group, and, when the group was measured at two or more
        frequencies, every frequency the policies of the candidate cpus offer. A group
        measured at one frequency is recommended at it."""
        if rows is None:
            rows = self.store.group_runs(group)
        setting = self._setting(agent, group, rows)
        freqs = setting.freqs_khz
        platform = self._platform(agent, group)
        # A model fitted on 1..k cores does not support pushing n >> k unasked (a sweep capped
        # at 2 of 32 cpus had 29 pushed, its interval -2..+863 %): what the daemon pushes by
        # itself stays within the measured core counts; recommend/tune take explicit limits.
        measured = setting.measured_cores
        try:
            r = recommend(model, platform, self.config.tolerance, setting.axis,
                          max_cores=measured, order=setting.order)
            beyond = ""
            if measured and measured < len(setting.order):
                full = recommend(model, platform, self.config.tolerance, setting.axis,
                                 order=setting.order)
                if full.best_cores > measured:
                    beyond = (f"; the model's best, {full.best_cores} cores "
                              f"({full.best_time_s:.4g} s), lies beyond the {measured} cores "
                              "measured: not pushed, sweep more cores to try it")
        except ValueError as exc:
            log.warning("no recommendation for %s: %s", "/".join(group), exc)
            self._fit_failed(group, f"no recommendation: {exc}", agent, job_id)
            return None
        if r.freq_khz is None and freqs and len(freqs) == 1:
            r.freq_khz = r.best_freq_khz = freqs[0]  # measured there only: keep it there
        # nobody asked for it to stay: verified, then the board goes back to rest
        rec = self.send_config(agent, group, r.cpus, r.freq_khz, r.predicted_time_s, r.lower_s,
                               r.upper_s, getattr(model, "name", None), keep=False)
        log.info("recommend %s for %s: %d cores at %s, predicted %.4g s (best %d cores, "
                 "%.4g s)%s%s", rec["config_id"], "/".join(group), r.cores,
                 self._clock_text(agent, group, r.freq_khz, r.cpus), r.predicted_time_s,
                 r.best_cores, r.best_time_s, beyond,
                 "" if rec["state"] == "pushed" else " (not sent)")
        return rec

    def send_config(self, agent: str, group: Group, cpus: list[int], freq_khz: int | None,
                    predicted: float | None, lower: float | None, upper: float | None,
                    model: str | None, target: dict[str, Any] | None = None,
                    keep: bool = True, goal: dict[str, Any] | None = None) -> dict[str, Any]:
        """Push a configuration to ``agent`` for it to apply and verify (its ``applied`` is
        judged by :meth:`applied`), to ``target`` where given (agent/targets.py: a pid or a
        systemd unit); store it as a recommendation ("pushed" or "unsent"). ``keep``: it stays
        in force on the board after its verification (a user applied it); stored, so a
        recommendation sent later (:meth:`send_unsent`) keeps it. ``goal``: the goal it was
        chosen for when not time (``{"objective", "energy_j": {"value", "lower", "upper"}}``):
        its verification is judged on energy too (:func:`judge`)."""
        info = self.registry.get(agent)
        rec = {"config_id": "cfg-" + uuid.uuid4().hex[:20], "agent": agent, **group.as_dict(),
               "cores": len(cpus), "cpus": list(cpus), "threads": len(cpus),
               "freq_khz": freq_khz, "predicted_time_s": predicted, "predicted_lower_s": lower,
               "predicted_upper_s": upper, "model": model, "keep": keep, "goal": goal}
        body = self._config_body(rec)
        if target is not None:
            body["target"] = target
        sent = info is not None and info.identity is not None and self.send(
            info.identity, "config", body)
        rec["state"] = "pushed" if sent else "unsent"
        if not sent and target is not None:
            # sent when the agent returns, it would run the workload, not retune the process
            rec["error"] = ("not sent: the agent was not reachable; a configuration for a "
                            "running process is not sent later, apply it again")
        self.store.save_recommendation(rec, time.time())
        if sent:
            self.stats["configs_pushed"] += 1
        return rec

    def _config_body(self, rec: dict[str, Any]) -> dict[str, Any]:
        """The ``config`` message's body for stored recommendation ``rec``."""
        body = {"config_id": rec["config_id"], "workload": rec["workload"],
                "size": rec["input"], "cpus": list(rec["cpus"]), "threads": rec["threads"],
                "freq_khz": rec["freq_khz"], "reps": self.config.verify_reps,
                "predicted_time_s": rec["predicted_time_s"]}
        if rec["variant"]:
            body["variant"] = rec["variant"]  # verification runs join the group they came from
        if rec.get("keep") is not None:  # stored before keep was: absent, it stays
            body["keep"] = bool(rec["keep"])
        return body

    def send_unsent(self, agent: str, identity: bytes) -> int:
        """Send ``agent`` (just connected) the recommendations made while it was away: the
        newest of each group, once, each with its stored ``keep``. Returns how many were
        sent."""
        sent = 0
        for rec in self.store.take_unsent(agent, time.time()):
            if self.send(identity, "config", self._config_body(rec)):
                sent += 1
                self.stats["configs_pushed"] += 1
                log.info("recommend %s for %s/%s/%s: sent now that agent %s is back",
                         rec["config_id"], rec["platform"], rec["workload"], rec["input"],
                         agent)
            else:
                self.store.update_recommendation(rec["config_id"], "unsent", time.time())
        return sent

    def applied(self, agent: str, msg: dict[str, Any], rec: dict[str, Any], now: float) -> None:
        """The agent's ``applied`` for recommendation ``rec``: store its verification runs,
        judge the measured time against the prediction interval, refit (without a new push);
        or note the agent's refusal."""
        body = msg["body"]
        if not body["ok"]:
            error = body.get("error") or "refused without a reason"
            self.store.update_recommendation(body["config_id"], "refused", now, error=error)
            log.warning("config %s refused by %s: %s", body["config_id"], agent, error)
            return
        stored: list[ResultIn] = []
        for i, raw in enumerate(body.get("records") or []):
            try:
                stored.append(ResultIn(f"{msg['id']}:{i}", agent, body["config_id"], i,
                                       RunRecord.from_dict(raw), raw))
            except RecordError as exc:
                log.warning("applied %s: verification record %d ignored: %s",
                            body["config_id"], i, exc)
        if stored:
            self.store.insert_results(stored, now)
        verified = body.get("time_s")
        if verified is None:
            times = [r.record.time_s for r in stored if r.record.ok and r.record.time_s
                     is not None]
            verified = statistics.median(times) if times else None
        energies = [r.record.energy_j for r in stored if r.record.ok and r.record.energy_j
                    is not None]
        energy = statistics.median(energies) if energies else None
        state, note = judge(rec, verified, energy)
        if verified is None and body.get("measured"):  # a running pid or unit: no run time
            state, note = "applied", measured_text(body["measured"])
        marks = [r.record.marked for r in stored if r.record.ok and r.record.marked]
        if marks and state in JUDGED and not self.config.accept_load:
            # a busy board's time says nothing of the configuration: neither verified nor off
            # (which would count towards drift)
            judged = (f"under that load: {note}" if note and note.startswith("time ")
                      else f"under that load its time was "
                           f"{note or 'within the prediction interval'}")
            state, note = "marked", (
                f"not verified: {len(marks)} of {len(stored)} verification runs marked "
                f"({marks[-1]}); {judged}")
        self.store.update_recommendation(body["config_id"], state, now,
                                         verified_time_s=verified, error=note,
                                         verified_energy_j=energy)
        log.info("config %s measured by %s: %s s (predicted %s s): %s%s", body["config_id"],
                 agent, verified, rec.get("predicted_time_s"), state,
                 f", {note}" if note else "")
        group = Group(rec["platform"], rec["workload"], rec["input"], rec["variant"])
        if self.drift is not None and self.drift.verdict(agent, group, state, now):
            return  # re-characterising: the sweep's fit recommends again
        # Verification runs are measurements too: refit, but do not push again.
        self.request_fit(group, recommend_after=False)

    def dropped(self, agent: str, text: str, others: bool = False) -> None:
        """The agent's hello says it dropped the configuration in force (``text``: 'CONFIG_ID:
        why', agent/standing.py), at its restart or, its process exited, while it ran: note
        it on that recommendation. Its state stays
        the verdict of its verification (drift and tune read it); the note says it is no
        longer in force, and that the board is at its original settings, or, where ``others``,
        that the configurations of its other targets stand. Noted once, however many hellos
        repeat it."""
        config_id, sep, why = text.partition(": ")
        rec = self.store.recommendation(config_id) if sep else None
        if rec is None or rec["agent"] != agent or any(
                lead in (rec.get("error") or "") for lead in (DROPPED, ENDED)):
            return
        lead = ENDED if WHILE_RUNNING in why else DROPPED
        note = f"{lead}{why}; " + ("the other applied configurations stand" if others
                                   else "the board is at its original settings")
        # ``updated`` kept: the verdict is as old as it was (drift orders verdicts by it)
        self.store.update_recommendation(
            config_id, rec["state"], rec["updated"], verified_time_s=rec["verified_time_s"],
            error=f"{rec['error']}; {note}" if rec.get("error") else note,
            verified_energy_j=rec.get("verified_energy_j"))
        log.info("config %s of agent %s: %s", config_id, agent, note)

    def replaced(self, agent: str, before: str | None, rec: dict[str, Any], now: float) -> None:
        """Recommendation ``rec`` was applied on ``agent``'s board to stay in force, where
        ``before`` (a config id; None: nothing) stood: the board holds one configuration in
        force (agent/apply.py), so ``before`` is noted replaced by it, its state kept (drift
        and tune read the verdict). ``rec`` itself stands, applied again after a replacement
        too."""
        if rec.get("replaced_by") is not None:
            self.store.set_replaced(rec["config_id"], None, None)
        if before is None or before == rec["config_id"]:
            return
        old = self.store.recommendation(before)
        if old is None or old["agent"] != agent:
            return
        self.store.set_replaced(before, rec["config_id"], now)
        log.info("config %s of agent %s no longer in force: replaced by %s", before, agent,
                 rec["config_id"])


def rests_on(store: Store, group: Group, quality: dict[str, Any] | None = None,
             never_clean: list[dict[str, Any]] | None = None,
             accept_load: bool | None = None) -> dict[str, Any]:
    """What a group's fit (and so its recommendation) rests on: clean runs used, marked runs
    left out (or used, under ``accept_load``) with their reasons, MAD outliers left out (the
    fit's ``quality``; None without one: a goal's fit takes each configuration's median, which
    no outlier moves, and leaves none out), points with no clean run, and those given up on
    (``never_clean``, daemon/remeasure.py); ``text`` says it in one line."""
    accept = store.accept_load if accept_load is None else accept_load
    points = store.point_marks(group)
    # the fit's rule (fitter.set_clock_rows): runs left to the governor leave it where any
    # run had a set clock, so they are not what it rests on
    at_set_clock = set_clock_rows([(p["cores"], p["freq_mhz"]) for p in points])
    governor = sum(p["clean"] + p["marked"] for p in points) - sum(
        p["clean"] + p["marked"] for p in points if (p["cores"], p["freq_mhz"]) in at_set_clock)
    points = [p for p in points if (p["cores"], p["freq_mhz"]) in at_set_clock]
    clean = sum(p["clean"] for p in points)
    marked = sum(p["marked"] for p in points)
    reasons = list(dict.fromkeys(p["reason"] for p in points if p["reason"]))[:3]
    unclean = [{"cores": p["cores"], "freq_mhz": p["freq_mhz"], "reason": p["reason"]}
               for p in points if not p["clean"] and p["marked"]]
    outliers = None if quality is None else int(quality.get("outliers_left_out") or 0)
    parts = [f"rests on {clean} clean run{'s' if clean != 1 else ''}"]
    if marked and accept:
        parts = [f"holds for the board under its load: {clean} clean and {marked} marked "
                 f"runs used ({'; '.join(reasons)})"]
    elif marked:
        parts.append(f"{marked} marked run{'s' if marked != 1 else ''} left out "
                     f"({'; '.join(reasons)})")
    if governor:
        parts.append(f"{governor} run{'s' if governor != 1 else ''} left to the governor left "
                     "out (their clock is unknown where other runs were at a set one)")
    if outliers:
        parts.append(f"{outliers} outlier{'s' if outliers != 1 else ''} left out")
    if unclean and not accept:
        parts.append(", ".join(
            never_clean_text({"cores": p["cores"], "reason": p["reason"],
                              "freq_khz": p["freq_mhz"] and p["freq_mhz"] * 1000})
            for p in unclean))
    if never_clean and not accept:
        parts.append("the board was busy during every retry: the recommendation leaves "
                     "those points out; with --accept-load (accept_load = true) it holds for "
                     "the board under that load")
    return {"clean_runs": clean, "marked_runs": marked, "marked_used": bool(marked and accept),
            "outliers_left_out": outliers, "governor_runs_left_out": governor,
            "offenders": reasons, "unclean_points": unclean,
            "never_clean": list(never_clean or []), "accept_load": bool(accept),
            "text": "; ".join(parts)}


def marked_left_out(store: Store, groups: list[Group], advice: str,
                    accept_load: bool | None = None) -> str:
    """'; N runs marked for interference left out (who): ADVICE' over ``groups`` (the
    runs a fit that came out short could not use), empty when none was or the load is
    accepted: the note under a 'no recommendation' of recommend and tune."""
    n, offenders = 0, []
    for group in groups:
        basis = rests_on(store, group, accept_load=accept_load)
        if not basis["marked_used"]:
            n += basis["marked_runs"]
            offenders += basis["offenders"]
    if not n:
        return ""
    return (f"; {n} run{'s' if n != 1 else ''} marked for interference left out "
            f"({'; '.join(dict.fromkeys(offenders))}): {advice}")


# A prediction is confirmed only by an interval that could have refuted it. The choice it
# backs is one of core counts, and one doubling of cores at most halves the time: an interval
# reaching past twice the prediction, or below half of it, holds the times of configurations a
# doubling away, so a time inside it says the model was not refuted, not that it was right.
# (A push beyond the measured cores had -11..+862 %: "verified" at +266 %.)
CONFIRMS_WITHIN = 2.0


def confirms(predicted: float | None, lower: float, upper: float) -> bool:
    """Whether the interval ``lower``..``upper`` is narrow enough that a time inside it confirms
    ``predicted``: within a factor CONFIRMS_WITHIN of it both ways (without a prediction, an
    interval no wider than that factor squared)."""
    if lower <= 0:
        return False
    if not predicted or predicted <= 0:
        return upper / lower <= CONFIRMS_WITHIN ** 2
    return upper <= predicted * CONFIRMS_WITHIN and lower >= predicted / CONFIRMS_WITHIN


def verdict(measured: float | None, predicted: float | None, lower: float | None,
            upper: float | None, unit: str = "s", what: str = "time") -> tuple[str, str | None]:
    """A recommendation's state after its verification runs: "verified" only when the measured
    time lies within the prediction interval stored with it and that interval confirms the
    prediction (:func:`confirms`), saying how far from the prediction and within what;
    "unconfirmed" when the time lies within an interval too wide to confirm anything (an
    extrapolated prediction's); otherwise "off" with how far off, relative to the prediction
    ("failed" when nothing was measured). ``unit`` and ``what``: of another quantity judged by
    the same rule (energy: "J", "energy")."""
    if measured is None:
        return "failed", f"no verification run gave a {what}"
    if lower is not None and upper is not None and lower <= measured <= upper:
        state = "verified" if confirms(predicted, lower, upper) else "unconfirmed"
        if not predicted:
            text = f"within its interval {lower:.4g}..{upper:.4g} {unit}"
        else:
            rel = [(v - predicted) / predicted * 100 for v in (measured, lower, upper)]
            text = (f"{rel[0]:+.1f} % of the prediction, within its interval "
                    f"{rel[1]:+.0f}..{rel[2]:+.0f} %")
        if state == "unconfirmed":
            text += (", too wide to confirm the prediction (it reaches past twice or half "
                     "of it): measure the core counts around this configuration to narrow it")
        return state, text
    if not predicted:
        return "off", "no prediction interval to compare with"
    pct = (measured - predicted) / predicted * 100
    interval = (f"interval {lower:.4g}..{upper:.4g} {unit}" if lower is not None
                and upper is not None else "no interval")
    return "off", (f"off by {pct:+.1f} % (measured {measured:.4g} {unit}, predicted "
                   f"{predicted:.4g} {unit}, {interval})")


# the objectives whose verification is judged on the energy measured as well as the time
ENERGY_OBJECTIVES = ("energy", "edp", "ed2p")
# worst first: the state of a verification judged on time and energy
_WORST = ("off", "unconfirmed", "verified")


# the products an objective names, E * t^k: its k and how it is written
PRODUCTS = {"edp": (1, "EDP", "J s"), "ed2p": (2, "ED2P", "J s²")}


def product_interval(rec: dict[str, Any], k: int) -> tuple[float, float, float] | None:
    """The predicted E * t^k of stored recommendation ``rec`` with an interval from the
    ends of its time and energy intervals (lower with lower, upper with upper): it holds the
    product whenever both factors lie within theirs, so it is conservative (at least as wide
    as a joint interval would be); None where a value or end is missing."""
    e = (rec.get("goal") or {}).get("energy_j") or {}
    t = (rec.get("predicted_time_s"), rec.get("predicted_lower_s"), rec.get("predicted_upper_s"))
    ends = (e.get("value"), e.get("lower"), e.get("upper"))
    if any(v is None for v in (*t, *ends)):
        return None
    return tuple(ev * tv ** k for ev, tv in zip(ends, t))  # type: ignore[return-value]


def judge(rec: dict[str, Any], time_s: float | None, energy_j: float | None
          ) -> tuple[str, str | None]:
    """Stored recommendation ``rec``'s state after verification runs that measured ``time_s``
    (their median) and ``energy_j`` (None: no meter): :func:`verdict` on time; for an energy
    goal (``rec["goal"]``) on the energy too, against its predicted interval, the worse of the
    two states, and the note says both ("time ...; energy ..."). An EDP or ED2P goal is judged
    on the product it names, against :func:`product_interval`, its note led by it ("EDP ...;
    time ...; energy ..."); where no product interval can be formed, on time and energy each.
    Runs without energy are judged on time only, and the note says so."""
    state, note = verdict(time_s, rec.get("predicted_time_s"), rec.get("predicted_lower_s"),
                          rec.get("predicted_upper_s"))
    goal = rec.get("goal") or {}
    if goal.get("objective") not in ENERGY_OBJECTIVES or state not in _WORST:
        return state, note
    predicted = goal.get("energy_j") or {}
    if energy_j is None:
        return state, (f"time {note}; energy not measured (the verification runs had no "
                       "energy meter): judged on time only")
    if predicted.get("value") is None:
        return state, (f"time {note}; energy {energy_j:.4g} J, no predicted energy to "
                       "compare with: judged on time only")
    e_state, e_note = verdict(energy_j, predicted["value"], predicted.get("lower"),
                              predicted.get("upper"), unit="J", what="energy")
    both = f"time {note}; energy {e_note}"
    k, name, unit = PRODUCTS.get(goal["objective"], (None, "", ""))
    product = product_interval(rec, k) if k and time_s is not None else None
    if product is None:
        return min((state, e_state), key=_WORST.index), both
    p_state, p_note = verdict(energy_j * time_s ** k, *product, unit=unit, what=name)
    return p_state, f"{name} {p_note}; {both}"


def off_pct(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return round((measured - predicted) / predicted * 100, 2)
