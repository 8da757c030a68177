"""The ``recommend`` query (``opptune recommend``): the configuration that best serves a goal
for one agent's workload, from the stored runs; with ``apply``, pushed to the agent to apply
and verify."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .errors import HandlerError
from .goal_recommend import GoalError, NoPowerData, NotMeasured, flat_scaling, recommend_goal
from .jobs import first_failure
from .objectives import Goal, format_seconds, format_watts, make_goal
from .planner import clocks_never_apply, workload_clock
from .query_worker import Deferred
from .recommender import marked_left_out, rests_on
from .store import Group
from .sweeps import check_max_cores

if TYPE_CHECKING:
    from .service import Daemon


def parse_goal(args: dict[str, Any]) -> Goal:
    """The goal in a query's args (objective, deadline, power_cap); HandlerError("bad_args")."""
    try:
        return make_goal(args.get("objective") or "time", args.get("deadline"),
                         args.get("power_cap"))
    except ValueError as exc:
        raise HandlerError("bad_args", str(exc)) from None


def _int_arg(args: dict[str, Any], key: str) -> int | None:
    v = args.get(key)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
        raise HandlerError("bad_args", f"{key.replace('_', '-')} must be a whole number >= 0, "
                                       f"not {v!r}")
    return v


def measured_groups(d: Daemon, platform_id: str, workload: str) -> list[Group]:
    """The store's groups of ``workload`` on the board ``platform_id`` (every size, variant)."""
    return [g for g in d.store.groups() if g.platform == platform_id and g.workload == workload]


def workload_groups(d: Daemon, agent: str, workload: str, size: str | None,
                    accept_load: bool | None = None
                    ) -> tuple[dict[str, Any], str, dict[str, list]]:
    """(platform description, size, variant -> runs with energy) of ``agent``'s measured
    ``workload`` (marked runs too with ``accept_load``; None: the daemon's key); HandlerError
    naming what is unknown or not measured."""
    info = d.registry.get(agent)
    if info is None:
        raise HandlerError("unknown_agent", d.registry.unknown(agent))
    groups = measured_groups(d, info.platform_id, workload)
    if not groups:
        offered = info.workload_names()
        if offered and workload not in offered:
            raise HandlerError("unknown_workload", f"agent '{agent}' does not offer "
                                                   f"{workload}; it offers "
                                                   f"{', '.join(sorted(offered))}")
        raise HandlerError("no_measurements", f"no measurements of {workload} on agent "
                                              f"'{agent}' yet; run 'opptune sweep --agent "
                                              f"{agent} --workload {workload} --wait' or "
                                              "'opptune tune' first")
    sizes = sorted({g.input for g in groups})
    if size is None:
        if len(sizes) > 1:
            raise HandlerError("bad_args", f"{workload} was measured at sizes "
                                           f"{', '.join(sizes)}: choose one with --size")
        size = sizes[0]
    elif size not in sizes:
        raise HandlerError("no_measurements", f"no measurements of {workload} at size "
                                              f"'{size}' on agent '{agent}'; measured sizes: "
                                              f"{', '.join(sizes)}")
    runs = {g.variant: d.store.group_energy_runs(g, accept_load) for g in groups
            if g.input == size}
    platform = info.platform or d.store.platform(info.platform_id) or {}
    return platform, size, runs


def recommend_steps(d: Daemon, agent: str, workload: str, goal: Goal, size: str | None,
                    cluster: int | None, max_cores: int | None,
                    accept_load: bool | None = None
                    ) -> tuple[Callable[[], Any], Callable[[Any], dict[str, Any]]]:
    """(the fit, which needs neither store nor socket: it runs off the service loop; the
    recommendation as a JSON-able map made of its result, see docs/json-output.md). The runs
    are read from the store here, on the loop; HandlerError naming what is unknown or not
    measured."""
    info = d.registry.get(agent)
    if info is not None:  # an unknown agent is named by workload_groups
        check_max_cores(info, max_cores, cluster, measures=False)
    platform, size, runs = workload_groups(d, agent, workload, size, accept_load)
    tolerance = d.config.tolerance if goal.objective == "time" else 0.0
    verify_runs = d.config.verify_reps

    def compute() -> Any:
        try:
            return recommend_goal(goal, platform, runs, cluster=cluster, max_cores=max_cores,
                                  tolerance=tolerance, verify_runs=verify_runs)
        except NotMeasured as exc:
            raise HandlerError("no_measurements", f"no recommendation for {workload} on "
                                                  f"'{agent}': {exc}") from None
        except NoPowerData as exc:
            raise HandlerError("no_power", f"no recommendation for {workload} on '{agent}': "
                                           f"{exc}") from None
        except GoalError as exc:
            raise HandlerError("no_model", f"no recommendation for {goal.describe()} of "
                                           f"{workload} on '{agent}': {exc}") from None

    def finish(r: Any) -> dict[str, Any]:
        out = r.as_dict()
        out.update(agent=agent, workload=workload, size=size, applied=None, clock=None)
        info = d.registry.get(agent)
        if out["freq_khz"] is None:
            # a command on a virtual board runs on the agent's machine: no policy of the
            # board's sets its clock ("policy0 governor's choice" said one did)
            kind = info.workload_kind(workload) if info else None
            out["clock"] = workload_clock(platform, kind, out["cpus"])
            if clocks_never_apply(platform, kind, "") is not None:
                out["freq_per_policy"] = {}
        out["scaling"] = None
        flat = flat_scaling(runs) if info and info.workload_kind(workload) != "kernel" else None
        if flat:
            lo, hi, speedup = flat
            out["scaling"] = (
                f"its runs at {hi} cores were only x{speedup:.2f} as fast as at {lo}: the "
                "program does not run faster with more cores; a command gets its thread count "
                "as {threads} in its arguments or in its threads_env variable "
                "(OMP_NUM_THREADS by default): check that it reads one")
        group = Group(info.platform_id if info else "", workload, size, out.get("variant", ""))
        out["rests_on"] = rests_on(d.store, group, accept_load=accept_load, never_clean=(
            d.remeasure.never_clean.get((agent, workload, size))))
        return out

    return compute, finish


def answer_recommend(d: Daemon, args: dict[str, Any]) -> Deferred:
    """The ``recommend`` query: args agent, workload, [size, objective, deadline, power_cap,
    cluster, max_cores, accept_load, apply]. The fit runs off the service loop
    (query_worker.py); pushing the result (``apply``) is done back on the loop."""
    agent, workload = args.get("agent"), args.get("workload")
    if not isinstance(agent, str) or not isinstance(workload, str):
        raise HandlerError("bad_args", "recommend needs args.agent and args.workload (text)")
    size = args.get("size")
    if size is not None and not isinstance(size, str):
        raise HandlerError("bad_args", "recommend args.size must be text")
    goal = parse_goal(args)
    target = args.get("target")
    if target is not None and not isinstance(target, dict):
        raise HandlerError("bad_args", "recommend args.target must be a map (agent/targets.py)")
    accept_load = args.get("accept_load")
    if accept_load is not None and not isinstance(accept_load, bool):
        raise HandlerError("bad_args", "recommend args.accept_load must be true or false")
    fit, make_out = recommend_steps(d, agent, workload, goal, size,
                                    _int_arg(args, "cluster"), _int_arg(args, "max_cores"),
                                    accept_load)

    def compute() -> Any:
        try:
            return fit()
        except HandlerError as exc:
            if exc.code != "no_model":
                raise
            return exc  # finish, on the loop, says which runs the fit was without

    def finish(r: Any) -> dict[str, Any]:
        if isinstance(r, HandlerError):
            raise HandlerError(r.code, f"{r}{marked_note(d, agent, workload, size, accept_load)}"
                                       f"{failed_note(d, agent, workload)}")
        out = make_out(r)
        if args.get("apply"):
            # a configuration that breaks the user's limits is never pushed (withheld)
            out["applied"] = apply(d, out, target) if out["met"] else withheld(out)
        return out

    return Deferred(compute, finish)


def failed_note(d: Daemon, agent: str, workload: str) -> str:
    """Where every run of ``agent``'s ``workload`` failed: '; its N runs on A all failed
    (why the newest job's failed)' and where each job's reason is (empty otherwise)."""
    runs = ok = 0
    for row in d.store.workload_outcomes(agent):
        if row["workload"] == workload:
            runs, ok = runs + row["runs"], ok + row["ok"]
    if not runs or ok:
        return ""
    error = first_failure(d.store, [j["job_id"] for j in d.store.jobs_for(agent, workload)])
    return ((f"; its {runs} runs on '{agent}' all failed" if runs != 1
             else f"; its one run on '{agent}' failed") + (f" ({error})" if error else "")
            + f": 'opptune status --agent {agent}' gives each job's reason")


def marked_note(d: Daemon, agent: str, workload: str, size: str | None,
                accept_load: bool | None) -> str:
    """Why a fit had too few runs where the board was busy: '; N runs marked ... left out
    (...)' and what to do (empty when none was, or the load is accepted)."""
    try:
        _, size, runs = workload_groups(d, agent, workload, size, accept_load)
    except HandlerError:
        return ""
    platform_id = d.registry.get(agent).platform_id
    return marked_left_out(
        d.store, [Group(platform_id, workload, size, variant) for variant in runs],
        "the daemon measures those points again when the board is quiet ('opptune status' "
        "follows them); or --accept-load for a recommendation that holds for the board under "
        "that load", accept_load)


def apply(d: Daemon, rec: dict[str, Any], target: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Push ``rec`` (from :func:`recommend_steps`) to its agent to apply and verify, to
    ``target`` (a running pid or a systemd unit; None: run the workload); the stored
    recommendation (config_id, state "pushed" or "unsent") follows in the status."""
    info = d.registry.get(rec["agent"])
    if info is None or info.identity is None:
        raise HandlerError("agent_offline", d.registry.offline_text(rec["agent"],
                                                                    "; nothing was pushed"))
    group = Group(info.platform_id, rec["workload"], rec["size"], rec["variant"])
    t = rec["time_s"]
    # a goal other than time is kept with it: an energy goal's verification is judged on the
    # energy measured too (recommender.judge)
    goal = None if rec["goal"]["objective"] == "time" else {
        "objective": rec["goal"]["objective"], "energy_j": dict(rec["energy_j"])}
    stored = d.recommender.send_config(rec["agent"], group, rec["cpus"], rec["freq_khz"],
                                       t["value"], t["lower"], t["upper"], rec["model"],
                                       target=target, goal=goal)
    out = {"config_id": stored["config_id"], "state": stored["state"],
           "reason": stored.get("error"), "not_kept": not_kept_text(info, rec, target)}
    if target is None:  # how long its verification takes: the agent runs it this many times
        out["verify_runs"] = d.config.verify_reps
    return out


def not_kept_text(info: Any, rec: dict[str, Any], target: dict[str, Any] | None
                  ) -> str | None:
    """Why a configuration applied to stay will not stay on the board: its agent is older
    than configurations kept in force (its hello says nothing of what stands, the daemon's
    capability test, not a version compare); None where it keeps it, or where nothing of it
    would stay anyway (the governor's clock, run as a command)."""
    if info.keeps or (rec.get("freq_khz") is None and target is None):
        return None
    version = f"opptune {info.version}" if info.version else "an opptune of unknown version"
    return (f"agent {info.agent_id} runs {version}, older than configurations kept in force: "
            "it applies and verifies this one, then leaves the board to its next job's "
            "clocks, and keeps nothing after its restart; upgrade that agent to keep it")


# the goal's limits: (Goal.as_dict key, the command-line option, its value as it is typed)
LIMITS = (("deadline_s", "--deadline", format_seconds),
          ("power_cap_w", "--power-cap", format_watts))


def _goal_args(rec: dict[str, Any]) -> str:
    """The options that ask for ``rec``'s goal again, e.g. "--size small --deadline 0.001s"."""
    goal = rec["goal"]
    words = [f"--size {rec['size']}"]
    if goal["objective"] != "time":
        words.append(f"--objective {goal['objective']}")
    words += [f"{opt} {fmt(goal[key]).replace(' ', '')}" for key, opt, fmt in LIMITS
              if goal.get(key) is not None]
    return " ".join(words)


def _broken(rec: dict[str, Any]) -> list[str]:
    """The options of the limits ``rec``'s predicted (or measured) time and power break; all
    the goal sets where none does by its value (broken by its interval's bound)."""
    goal = rec["goal"]
    given = [(key, opt) for key, opt, _ in LIMITS if goal.get(key) is not None]
    value = {"deadline_s": rec["time_s"]["value"], "power_cap_w": rec["power_w"]["value"]}
    broken = [opt for key, opt in given
              if value[key] is not None and value[key] > goal[key]]
    return broken or [opt for _, opt in given]


def withheld(rec: dict[str, Any], tune: bool = False, budget_spent: bool = False
             ) -> dict[str, Any]:
    """The ``applied`` of a recommendation that breaks its goal's limits (``met`` false):
    nothing is pushed, and the reason says what to do instead (:func:`advice`)."""
    where = "applied" if tune else f"pushed to {rec['agent']}"
    return {"config_id": None, "state": "withheld",
            "reason": f"{rec['note']}; nothing was {where}: "
                      f"{advice(rec, tune, budget_spent)}"}


def advice(rec: dict[str, Any], tune: bool = False, budget_spent: bool = False) -> str:
    """What to do about a recommendation that breaks its goal's limits: relax them, measure
    more, or leave them out. ``tune``: said for ``opptune tune``, which has measured what it
    found worth measuring, or what ``budget_spent`` let it."""
    opts = " or ".join(_broken(rec))
    todo = [f"relax {opts}"]
    unmeasured = rec["n_candidates"] - rec["n_configurations"]
    # measuring more helps only where a configuration not measured yet may meet the limits
    # by its predicted interval (an older daemon's answer does not say: where any is left)
    could = rec.get("could_meet", unmeasured)
    if tune and budget_spent and could:
        todo.append("tune again with a larger --budget")
    if not tune and could and unmeasured > 0:
        todo.append(f"measure more configurations with 'opptune tune --agent {rec['agent']} "
                    f"--workload {rec['workload']} {_goal_args(rec)}'")
    alone = Goal(rec["goal"]["objective"]).describe()
    todo.append(f"leave {opts} out for the best configuration for {alone} alone")
    text = f"{', '.join(todo[:-1])}{', or ' if len(todo) > 2 else ' or '}{todo[-1]}"
    if not could and unmeasured > 0 and (budget_spent or not tune):
        text += (f" (measuring more would not help: none of the {unmeasured} configuration"
                 f"{'s' if unmeasured != 1 else ''} not measured is predicted, within its "
                 "interval, to meet them)")
    return text
