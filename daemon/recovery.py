"""``opptune recover``: results of jobs the store never issued, taken in on the operator's word.

A daemon stores only the results of jobs it issued to the agent sending them (``unknown_job``
otherwise, and the agent keeps such results in its outbox's ``rejected`` table). When the
store was replaced (an empty one after a lost disk, or an older backup restored), the agents'
unacknowledged results belong to jobs the new store never heard of: measurements that are not
deleted, but lost to the user. ``opptune recover --agent A`` opens agent A for a while: the
daemon asks the agent to send its ``unknown_job`` results again (a ``resend`` message, now or
at its next hello), and stores each result of a job it does not know under a job row of state
``recovered`` (final: never sent, resumed, expired or cancelled), owned by that agent, for the
workload and input of its first result. Only the results of the agent's own platform are
taken (as for any job), so that one agent cannot fill another's groups.

``--also CODE`` asks for the results kept under other refusals too (``too_large`` after
``max_message_bytes`` was raised, ``bad_record`` after an upgrade): the daemon checks them again
as any result.

The opening is kept in the store (its ``recovery`` table): a daemon restarted meanwhile keeps
it, and in a fleet every daemon on the store takes the agent's results and asks it, where it is
connected, within a second of the opening (``Recovery.opened_since``). A job already
recovered is known to the store and stays open to its further results."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from .errors import HandlerError

log = logging.getLogger("opptune.daemon.recovery")

RECOVERED = "recovered"  # the state of a job row made for results of a job the store lacked
DEFAULT_FOR_S = 3600.0  # how long an agent stays open to unknown jobs after `opptune recover`
MAX_FOR_S = 7 * 86400.0
CODES = ["unknown_job"]  # the refusals whose results the agent is asked for again
# others an operator may ask for with them (``--also``), once what refused them changed: an
# older daemon's checks (bad_record, unknown_type), a limit raised (too_large)
CODE_RE = re.compile(r"[a-z][a-z_]{0,39}")
MAX_CODES = 8
RECOVER_SINCE = "0.7.0"  # the first agent that takes a ``resend``


class Recovery:
    """Which agents are open to results of unknown jobs, and until when: the store's
    openings, which every daemon on it shares."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._asked: dict[str, str] = {}  # resend message id -> agent (an older agent's refusal)
        # each agent's opening looked at last (a new one is told by its time changing, not by
        # comparing times: another daemon of the fleet may run on a host whose clock is
        # behind); the ones before this daemon started are asked at each agent's hello
        self._known = {r["agent"]: r["opened"] for r in store.recoveries()}
        self._told: dict[str, float] = {}  # agent -> the opening this daemon asked it for

    def open(self, agent: str, until: float, now: float, codes: list[str] | None = None
             ) -> None:
        self.store.open_recovery(agent, until, list(codes or CODES), now)

    def _open(self, agent: str, now: float) -> dict[str, Any] | None:
        row = next(iter(self.store.recoveries(agent)), None)
        return row if row is not None and row["until"] > now else None

    def codes(self, agent: str, now: float) -> list[str]:
        row = self._open(agent, now)
        return row["codes"] if row is not None else CODES

    def until(self, agent: str, now: float) -> float | None:
        """When ``agent`` stops being open (None: it is not)."""
        row = self._open(agent, now)
        return row["until"] if row is not None else None

    def told(self, agent: str, now: float) -> None:
        """This daemon asked ``agent`` for its opening now open."""
        row = self._open(agent, now)
        if row is not None:
            self._told[agent] = row["opened"]

    def opened_since(self, now: float) -> list[str]:
        """The agents opened (by any daemon on the store) since the last call and still
        open, that this daemon has not asked for that opening. One read of the openings, a
        row per agent ever opened."""
        rows = self.store.recoveries()
        new = [r for r in rows if self._known.get(r["agent"]) != r["opened"]]
        self._known = {r["agent"]: r["opened"] for r in rows}
        return [r["agent"] for r in new
                if r["until"] > now and self._told.get(r["agent"]) != r["opened"]]

    def asked(self, msg_id: str, agent: str) -> None:
        if len(self._asked) >= 10_000:
            self._asked.clear()
        self._asked[msg_id] = agent

    def refused(self, msg_id: str | None) -> str | None:
        """The agent whose refusal of the resend ``msg_id`` this is (an agent older than the
        ``resend`` message), else None."""
        return self._asked.pop(msg_id, None) if msg_id else None


def recovered_job(job_id: str, workload: str, size: str, of: int) -> dict[str, Any]:
    """The job row for the results of ``job_id``, a job the store never issued: its points are
    not known (only the runs that arrive say them); ``of`` its runs as the agent counted them."""
    return {"job_id": job_id, "workload": workload, "size": size, "points": [], "reps": 0,
            "warmup": 0, "expected": max(0, int(of))}


def parse_for_s(args: dict[str, Any]) -> float:
    value = args.get("for_s", DEFAULT_FOR_S)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value <= MAX_FOR_S:
        raise HandlerError("bad_args", f"recover args.for_s must be a number of seconds in "
                                       f"(0, {MAX_FOR_S:g}]")
    return float(value)


def parse_codes(args: dict[str, Any]) -> list[str]:
    """unknown_job and the refusal codes ``args.also`` adds."""
    also = args.get("also", [])
    if not isinstance(also, list) or len(also) > MAX_CODES or not all(
            isinstance(c, str) and CODE_RE.fullmatch(c) for c in also):
        raise HandlerError("bad_args", f"recover args.also must be a list of at most "
                                       f"{MAX_CODES} refusal codes, e.g. [\"too_large\"]")
    return CODES + sorted(set(also) - set(CODES))


def answer(d: Any, args: dict[str, Any]) -> dict[str, Any]:
    """``opptune recover``: open ``args.agent`` (every agent the daemon knows when absent) for
    ``args.for_s`` seconds and ask each connected one for its results again (refused as
    unknown_job, and as the codes ``args.also`` names). ``{"agents": [{"agent", "known",
    "told", "via", "until", "codes", "jobs", "runs"}]}``: known: it said hello to
    a daemon of this store; told: the resend went to its connection (False: it is asked at
    its next hello here); via: the endpoint of the daemon of the fleet it is connected to
    instead (None: none); jobs, runs: recovered so far for it."""
    agent = args.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent):
        raise HandlerError("bad_args", "recover args.agent must be non-empty text")
    now = time.time()
    until = now + parse_for_s(args)
    codes = parse_codes(args)
    # an agent not heard yet is opened too: right after a store was replaced, the operator
    # may run this before the agents are back (the reply says it is unknown: a misspelt id?)
    names = [agent] if agent is not None else [a.agent_id for a in d.registry.all()]
    out = []
    for name in names:
        d.recovery.open(name, until, now, codes)
        told = ask(d, name, now)
        # a fleet: the daemon holding its connection asks it (its tick reads the opening)
        via = None if told else d.registry.via(name, now)
        jobs, runs = d.store.recovered_counts(name)
        out.append({"agent": name, "known": d.registry.get(name) is not None, "told": told,
                    "via": via.endpoint if via is not None else None, "until": until,
                    "codes": codes, "jobs": jobs, "runs": runs})
        log.info("agent %s: results of jobs this store never issued are stored as recovered "
                 "until %s (opptune recover); %s", name,
                 time.strftime("%H:%M:%S", time.localtime(until)),
                 "asked for them now" if told else "asked at its next hello")
    return {"agents": out}


def ask(d: Any, agent: str, now: float) -> bool:
    """Send ``agent`` the resend of its ``unknown_job`` results (and the codes its opening
    names), if it is connected here."""
    from ..shared import protocol
    from .service import DAEMON_ID  # here: service imports this module
    info = d.registry.get(agent)
    identity = getattr(info, "identity", None)
    if identity is None:
        return False
    msg = protocol.make("resend", DAEMON_ID, {"codes": d.recovery.codes(agent, now)})
    if not d.link.send(identity, msg):
        return False
    d.recovery.asked(msg["id"], agent)
    d.recovery.told(agent, now)
    return True


def tick(d: Any, now: float) -> None:
    """Ask the agents connected here that were opened since the last tick, by this daemon
    or by another on the store (`opptune recover` run there)."""
    for agent in d.recovery.opened_since(now):
        info = d.registry.get(agent)
        if info is not None and info.alive(d.config.agent_timeout_s, now):
            ask(d, agent, now)
