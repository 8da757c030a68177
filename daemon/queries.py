"""The operator's queries (``opptune status``, ``sweep``, ``fit``): what the daemon answers.

The status (status_query.py) is documented in the README: every key present every time,
null for a missing value.

Who may ask: with CURVE on, only the operator's key (the key ring refuses the rest before a
query gets here); with CURVE off, only a local socket: the daemon bound to ipc:// or loopback,
or a peer whose address is loopback (:func:`check_local`)."""

from __future__ import annotations

import ipaddress
import time
from typing import TYPE_CHECKING, Any

from .errors import HandlerError
from .registry import board_name
from .status_query import status
from .store import Group

if TYPE_CHECKING:
    from .query_worker import Deferred
    from .service import Daemon


def is_loopback_address(addr: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped 127.x (what a local TCP client comes from)."""
    try:
        ip = ipaddress.ip_address((addr or "").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def check_local(d: Daemon, identity: bytes) -> None:
    """Refuse (HandlerError ``not_local``) a query that came over plain TCP from an address
    other than loopback; the link tracks addresses only on such a bind (else it is local or
    CURVE-authenticated, and the key ring has checked the operator's key)."""
    addrs = getattr(d.link, "peer_addrs", None)
    if addrs is None:
        return
    addr = addrs.get(identity)
    if is_loopback_address(addr):
        return
    head = ("status and control queries are answered only on a local socket (ipc:// or "
            "loopback) or for the operator's key with CURVE on; this one came over plain TCP "
            f"from {addr or 'an unknown address'}")
    endpoint = str(getattr(d, "endpoint", "") or "")
    host, _, port = endpoint.partition("//")[2].rpartition(":")
    if addr and host.strip("[]") == addr:
        # 'run opptune on the daemon's host' told an operator who did just that: a bind to
        # one non-loopback address is reached from its own host over that address too
        raise HandlerError("not_local", f"{head}, the address the daemon is bound to, so no "
                                        "query is answered even on its own host: bind it to "
                                        f"tcp://0.0.0.0:{port} (opptune on its host then asks "
                                        "over loopback), or set curve = \"on\" in its "
                                        "configuration and give opptune its --config")
    raise HandlerError("not_local", f"{head}: run opptune on the daemon's host, or set "
                                    "curve = \"on\" in its configuration and give opptune "
                                    "its --config")


def answer(d: Daemon, what: str, args: dict[str, Any]) -> dict[str, Any] | Deferred:
    """The reply's data for query ``what`` (a Deferred for one that fits models: the loop
    sends it when the worker has computed it); HandlerError for an unknown query."""
    if what == "status":
        return status(d, args)
    if what == "sweep":
        return d.sweeps.query(args)
    if what == "fit":
        return {"queued": refit(d, args)}
    if what == "report":
        return report(d)
    if what == "recommend":
        from .goal_query import answer_recommend
        return answer_recommend(d, args)
    if what == "tune":
        return d.tuning.start(args)
    if what == "tune_status":
        return d.tuning.status(args)
    if what == "tune_stop":
        return d.tuning.stop(args)
    if what == "cancel":
        return cancel(d, args)
    if what == "recover":
        from .recovery import answer as recover
        return recover(d, args)
    if what == "keys":
        return keys(d, args)
    if what == "doctor":
        return doctor(d, args)
    if what == "runs":  # opptune export
        from .pyperf_query import runs
        return runs(d, args)
    if what == "import":  # opptune import
        from .pyperf_query import import_runs
        return import_runs(d, args)
    if what in ("characterize", "mpet_data"):
        from . import characterize
        return getattr(characterize, what)(d, args)
    raise HandlerError("unknown_query", f"unknown query '{what[:40]}'; known: status, sweep, "
                                        "fit, recommend, tune, tune_status, tune_stop, cancel, "
                                        "recover, report, keys, doctor, characterize, "
                                        "mpet_data, runs, import, again")


def cancel(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """``opptune cancel``: cancel the job ``args.job_id``, or every unfinished job (queued,
    sent, running, expired) of the agent ``args.agent``. ``{"jobs": [...]}``: each job's row
    with ``was``, ``cancelled`` and ``told`` (daemon/jobs.py JobTracker.cancel)."""
    job_id, agent = args.get("job_id"), args.get("agent")
    if (job_id is None) == (agent is None):
        raise HandlerError("bad_args", "cancel needs args.job_id or args.agent (text), not both")
    for name, value in (("job_id", job_id), ("agent", agent)):
        if value is not None and (not isinstance(value, str) or not value):
            raise HandlerError("bad_args", f"cancel args.{name} must be non-empty text")
    said = "cancelled by the user at " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if job_id is not None:
        return {"jobs": [d.jobs.cancel(job_id, said)]}
    mine = d.store.jobs_page(agent=agent)[0]
    if not mine and d.registry.get(agent) is None:
        raise HandlerError("unknown_agent", d.registry.unknown(agent))
    return {"jobs": [d.jobs.cancel(j["job_id"], said) for j in mine
                     if j["state"] in ("queued", "sent", "running", "expired")]}


def keys(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """``opptune keys``: args.action list (the default), accept, reject or revoke args.id."""
    if d.keyring is None:
        raise HandlerError("curve_off", "CURVE is off on this daemon (curve = \"off\", or "
                                        "\"auto\" with a loopback bind): no agent keys to manage")
    action = str(args.get("action") or "list")
    if action == "list":
        return {"keys": d.keyring.rows()}
    entry = d.keyring.decide(action, str(args.get("id") or ""))
    info = d.registry.get(entry["agent"])
    if entry["state"] != "accepted" and info is not None:
        # Nothing more goes to it: new jobs wait as "queued" for a hello the key cannot make.
        info.identity = None
    return {"key": entry}


def doctor(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """``opptune doctor --agent A``: the report A sent with its last hello (null: none)."""
    agent = args.get("agent")
    info = d.registry.get(agent) if isinstance(agent, str) else None
    if info is None:
        raise HandlerError("unknown_agent", d.registry.unknown(agent))
    return {"agent": info.agent_id, "board": board_name(info.platform, info.platform_id),
            "alive": info.alive(d.config.agent_timeout_s), "received": info.doctor_at,
            "report": info.doctor}


# the status's lists the report reads (daemon/report): every row of each
REPORT_SECTIONS = ["agents", "platforms", "runs", "fits", "recommendations"]


def report(d: Daemon) -> dict[str, Any]:
    """What ``opptune report`` draws: the status's agents with their platforms, run counts,
    fits and recommendations (every row: the page lists every group; without the other lists
    and the recommendations' ``rests_on``, which it does not draw) plus every group's
    successful runs as ``points: [{group, runs: [[cores, freq_mhz, time_s, energy_j, marked,
    left_out], ...], fit_runs: [[cores, freq_mhz, time_s], ...]}]`` (marked: for
    interference; left_out: why the fit leaves the run out, store.LEFT_OUT, or None: the
    page's medians are of the runs the fit uses, and it counts the others by reason)."""
    data = status(d, {"only": REPORT_SECTIONS}, bases=False)
    data["generated"] = time.time()
    # runs: every successful run (the plots); fit_runs: those the daemon's fit may use (not
    # throttled, not marked unless the load is accepted, since the last drift), so the
    # report's refit rests on what the daemon's does; a report before left_out reads 5
    # fields and fit_runs
    data["points"] = [{"group": g.as_dict(), "runs": [[*r[:4], r[5], r[6]] for r in runs],
                       "fit_runs": [list(r) for r in fit_runs]}
                      for g, (runs, fit_runs) in sorted(d.store.report_runs().items())]
    return data


def refit(d: Daemon, args: dict[str, Any]) -> list[dict[str, str]]:
    """Refit the stored groups matching args.platform/workload/input/variant (each
    optional); with args.recommend and args.agent, push a recommendation afterwards."""
    queued = []
    for g in d.store.groups():
        if any(args.get(k) not in (None, getattr(g, k)) for k in Group._fields):
            continue
        d.recommender.request_fit(g, agent=args.get("agent") if args.get("recommend") else None)
        queued.append(g.as_dict())
    return queued
