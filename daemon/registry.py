"""Known agents: identity on the socket, platform, last seen and whether they are alive."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

log = logging.getLogger("opptune.daemon")


@dataclass
class Claim:
    """A connection that said hello as an agent: which agent process (``instance``) on which
    board, and when it last spoke."""
    hello_at: float
    instance: str | None
    platform_id: str
    board: str
    last_seen: float
    machine: str | None = None  # its hello's hashed machine id and boot id (None: not said)
    boot: str | None = None


@dataclass
class AgentInfo:
    agent_id: str
    platform_id: str
    platform: dict[str, Any] = field(default_factory=dict)
    workloads: list[Any] = field(default_factory=list)
    identity: bytes | None = None  # routing id of its DEALER; None until it speaks to this daemon
    last_seen: float = 0.0
    outbox: int | None = None  # results waiting on the agent, from its last heartbeat
    outbox_full: str | None = None  # why its outbox takes no new runs, from that heartbeat
    instance: str | None = None
    doctor: dict[str, Any] | None = None  # its last hello's report (agent/doctor.py)
    doctor_at: float | None = None
    # the configurations a user applied that are in force on the board, one per target,
    # oldest first (its hello's, then each applied to stay: shared/standing.py); empty: none,
    # or an older agent that does not say
    standings: list[dict[str, Any]] = field(default_factory=list)
    standings_dropped: list[str] = field(default_factory=list)  # why its restart dropped each
    # whether its hello says what stands (the field, even nil): an agent older than the field
    # keeps nothing in force after a verification, whatever the daemon pushed
    keeps: bool = False
    # whether it keeps one per target (its hello's ``standings``); else one per board: a
    # configuration applied to stay replaces the one in force, whatever its target
    per_target: bool = False
    # whether it said hello to this daemon since its start: else what stands on its board
    # is not known here (loaded from the store, or held by another daemon of the fleet)
    heard: bool = False
    # until it does: what stood as of its last hello to a daemon of this store (and the
    # configurations applied after it), kept in the store (schema 19): {"standings",
    # "dropped", "at"}; None: none kept
    stored_standings: dict[str, Any] | None = None
    version: str | None = None  # the opptune version its hello sent (agent_version)
    # the hashed machine id and boot id its hello sent (agent/machine_id.py; None: not said)
    machine: str | None = None
    boot: str | None = None
    # the connections that said hello with this id, by identity (two live ones: two boards
    # or agents share the id); ``clash``: the identity of the other one while they do
    claims: dict[bytes, Claim] = field(default_factory=dict)
    clash: bytes | None = None
    clash_since: float | None = None
    # where the holder of a clash is another board connected to another daemon of the fleet
    # (Registry.claim_elsewhere): its claim as the store keeps it, and that daemon's endpoint
    held_via: tuple[Claim, str] | None = None
    # (workloads, {name: program digest}) of the last ``program`` asked (ingest: per result)
    _programs: Any = field(default=None, repr=False, compare=False)

    def alive(self, timeout_s: float, now: float | None = None) -> bool:
        return self.identity is not None and ((now or time.time()) - self.last_seen) <= timeout_s

    def workload_names(self) -> list[str]:
        names = []
        for w in self.workloads:
            name = w.get("name") if isinstance(w, dict) else w
            if isinstance(name, str):
                names.append(name)
        return names

    def program(self, name: str) -> str | None:
        """The program digest of workload ``name`` in its hello (agent/workloads.py); None
        where the hello gives none (an older agent, an unknown workload)."""
        cache = self._programs
        if cache is None or cache[0] is not self.workloads:
            cache = self._programs = (self.workloads, {
                w["name"]: w["program"] for w in self.workloads
                if isinstance(w, dict) and isinstance(w.get("name"), str)
                and isinstance(w.get("program"), str) and w["program"]})
        return cache[1].get(name)

    def workload_kind(self, name: str) -> str | None:
        """"kernel" or "command", as the hello describes ``name``; None when it does not."""
        for w in self.workloads:
            if isinstance(w, dict) and w.get("name") == name:
                kind = w.get("kind")
                return kind if isinstance(kind, str) else None
        return None

    def workload_sizes(self, name: str) -> list[str]:
        for w in self.workloads:
            if isinstance(w, dict) and w.get("name") == name:
                sizes = w.get("sizes")
                if isinstance(sizes, list):
                    return [str(s) for s in sizes]
        return []


class Via(NamedTuple):
    """Where an agent not connected to this daemon is online: the endpoint of the daemon of
    the fleet that holds it, and when that daemon last heard it (the store's last_seen)."""
    endpoint: str
    last_seen: float


class Registry:
    """Agents by id. Loaded from the store at start so results of agents that said hello to an
    earlier daemon instance are still accepted.

    With ``store`` and ``instance`` (this daemon's), :meth:`elsewhere` reads from the store
    which agents other daemons sharing it hold: the store is where daemons of a fleet learn
    of each other's agents, when asked (status, a refusal), not on the ingest path."""

    def __init__(self, timeout_s: float, store: Any = None, instance: str | None = None,
                 keyring: Any = None, started: float | None = None):
        self.timeout_s = timeout_s
        self.started = started  # the daemon's start (heard_unrecorded's lower bound)
        self.keyring = keyring  # with CURVE: an unknown agent may be one whose key waits
        self.store, self.instance = store, instance
        self._agents: dict[str, AgentInfo] = {}
        self._dirty: dict[str, float] = {}  # last_seen updates not yet written to the store
        # the clashes another daemon refuses for ids held here, logged once each while on
        self._refusals_logged: set[tuple[str, str | None, str]] = set()

    def __contains__(self, agent_id: str) -> bool:
        return agent_id in self._agents

    def __len__(self) -> int:
        return len(self._agents)

    def get(self, agent_id: str) -> AgentInfo | None:
        return self._agents.get(agent_id)

    def all(self) -> list[AgentInfo]:
        return sorted(self._agents.values(), key=lambda a: a.agent_id)

    def unknown(self, agent: Any) -> str:
        """"no agent 'X' (known agents: a, b)": the refusal of a query naming no known agent;
        where another daemon of the fleet holds it, where to send the request instead; where
        its key is not accepted, the command that lets it in."""
        away = self._away_text(agent) if isinstance(agent, str) else None
        if away is not None:
            return away
        known = ", ".join(a.agent_id for a in self.all()) or "none yet"
        return f"no agent '{str(agent)[:64]}' (known agents: {known})"

    def elsewhere(self, now: float | None = None) -> dict[str, Via]:
        """The agents online through another daemon sharing the store (it heard them and
        beat within ``timeout_s``) and not alive here, by id. An agent this daemon did not
        know yet (its hello went to the other daemon after this one started) is added, not
        connected here."""
        if self.store is None:
            return {}
        now = time.time() if now is None else now
        out = {}
        for a in self.store.agents_elsewhere(self.instance, now - self.timeout_s):
            if self._held_elsewhere(a, now):
                out[a["id"]] = Via(a["endpoint"], a["last_seen"])
        return out

    def _held_elsewhere(self, a: dict[str, Any], now: float) -> bool:
        """Whether the agent of stored row ``a``, which another daemon heard, is not alive
        here; one this daemon did not know is added, and a known one takes the version its
        hello there stored."""
        info = self._agents.get(a["id"])
        if info is None:
            self.load(a["id"], a["platform"], self.store.platform(a["platform"]) or {},
                      a["workloads"], a["last_seen"], a["doctor"], a["doctor_at"],
                      a["agent_version"])
        elif info.alive(self.timeout_s, now):
            return False  # it moved away only now: it answers here until it times out
        elif info.heard and a["last_seen"] <= info.last_seen:
            # no daemon but this one raised it since: this one stopped hearing it before it
            # timed out (its key rejected or revoked), not another that holds it
            return False
        else:
            info.version = a["agent_version"]
        return True

    def heard_unrecorded(self, now: float, started: float) -> dict[str, float]:
        """The agents online through a daemon sharing the store that does not say which (it
        records no ``daemons`` row: one older than schema 11; it raises their last_seen
        each second): heard within ``timeout_s``, after this daemon ``started`` (what was
        heard before is no sign of it: an earlier instance of this one), not alive here and
        held by no daemon that answers; their last_seen, by id. Unknown ones are added."""
        if self.store is None:
            return {}
        out = {}
        for a in self.store.agents_heard_unrecorded(self.instance,
                                                    max(now - self.timeout_s, started)):
            if self._held_elsewhere(a, now):
                out[a["id"]] = a["last_seen"]
        return out

    def offline_text(self, agent: str, what: str = "") -> str:
        """Why nothing can be sent to ``agent`` now (:meth:`_away_text`), else that it has
        not said hello to this daemon since it started. ``what`` follows the first clause."""
        return self._away_text(agent, what) or (
            f"agent '{agent}' has not connected to this daemon instance{what}: start its "
            f"opptune-agent (or wait for its hello; 'opptune status' lists the agents "
            f"connected) and try again")

    def _away_text(self, agent: str, what: str = "") -> str | None:
        """Why ``agent`` is not here, where that is known: another daemon of the fleet holds
        it (send the request there); its hello was refused (key pending, rejected, revoked:
        the command that lets it in); the daemon that last heard it records no address (an
        older one, or one that stopped since: when it was heard and what to do). None
        otherwise."""
        now = time.time()
        via = self.via(agent, now)
        if via is not None:
            return elsewhere_text(agent, via.endpoint, what)
        why = self.keyring.refusal_of(agent) if self.keyring is not None else None
        if why:
            return f"agent '{agent[:64]}' has not been let in: {why}{what}"
        heard = (self.heard_unrecorded(now, self.started).get(agent)
                 if self.started is not None else None)
        if heard is not None:
            # status shows such an agent as alive '?': the two cases look alike in the store
            return (f"agent '{agent}' was heard {max(0.0, now - heard):.0f} s ago through "
                    f"another daemon sharing the store that does not record its address (an "
                    f"older one), or through one that stopped since{what}: send the request "
                    f"to the daemon the agent's configuration names (its 'daemon' setting), or "
                    f"wait for its hello here ('opptune status' lists the agents connected)")
        return None

    def via(self, agent_id: str, now: float | None = None) -> Via | None:
        """Where ``agent_id`` is online if through another daemon (:meth:`elsewhere`)."""
        return self.elsewhere(now).get(agent_id)

    def load(self, agent_id: str, platform_id: str, platform: dict[str, Any],
             workloads: list[Any], last_seen: float, doctor: dict[str, Any] | None = None,
             doctor_at: float | None = None, version: str | None = None) -> AgentInfo:
        """Add an agent known from the store (not connected to this instance yet), with the
        doctor report and the version of its last hello, and what stood on its board then."""
        info = AgentInfo(agent_id, platform_id, platform, workloads, None, last_seen,
                         doctor=doctor, doctor_at=doctor_at, version=version,
                         stored_standings=self.store.standings_of(agent_id)
                         if self.store is not None else None)
        self._agents[agent_id] = info
        return info

    def claim(self, agent_id: str, identity: bytes, platform_id: str, platform: dict[str, Any],
              instance: str | None, now: float, machine: str | None = None,
              boot: str | None = None) -> Claim | None:
        """Note a hello of ``agent_id`` from ``identity``; the claim of the connection that
        holds the id where another board (:func:`other_board`: another platform, machine or
        boot) holds it and is alive: the id clashes, the hello is not to replace it. A hello
        of the same board replaces the holder (an agent's restart looks so; the old one
        speaking on shows the clash)."""
        info = self._agents.get(agent_id)
        if info is None:
            return None
        for ident in [i for i, c in info.claims.items()
                      if i != info.identity and now - c.last_seen > self.timeout_s]:
            del info.claims[ident]  # gone agent processes (restarts)
        claim = info.claims[identity] = Claim(now, instance, platform_id,
                                              board_name(platform, platform_id), now,
                                              machine, boot)
        holder = self._live_holder(info, identity, now)
        if holder is None or not other_board(holder, claim):
            return None
        self._clashes(info, identity, now)
        return holder

    def _live_holder(self, info: AgentInfo, identity: bytes, now: float) -> Claim | None:
        """The claim of the connection holding ``info``'s id, where it is another one than
        ``identity`` and alive."""
        holder = info.claims.get(info.identity) if info.identity is not None else None
        if (info.identity == identity or holder is None
                or now - holder.last_seen > self.timeout_s):
            return None
        return holder

    def claim_elsewhere(self, agent_id: str, identity: bytes, platform_id: str,
                        platform: dict[str, Any], instance: str | None, now: float,
                        machine: str | None = None, boot: str | None = None
                        ) -> tuple[Claim, str] | None:
        """Where :meth:`claim` found no live holder here: (the holder's claim, the endpoint
        of its daemon) where the store says another daemon of the fleet heard another board
        (:func:`other_board`) of ``agent_id`` within ``timeout_s`` (schema 20 keeps its ids):
        the id clashes across daemons and the hello is not to be taken. The holder's own
        hello failing over here is the same board, and is taken."""
        row = self._row_elsewhere(agent_id, now)
        if row is None:
            return None
        claim = Claim(now, instance, platform_id, board_name(platform, platform_id), now,
                      machine, boot)
        held = self._stored_claim(row)
        if not other_board(held, claim):
            return None
        info = self._agents.get(agent_id) or self.load(
            agent_id, row["platform"], self.store.platform(row["platform"]) or {},
            row["workloads"], row["last_seen"], row["doctor"], row["doctor_at"],
            row["agent_version"])
        info.claims[identity] = claim
        info.held_via = (held, row["endpoint"])
        self._clashes(info, identity, now)
        return info.held_via

    def _row_elsewhere(self, agent_id: str, now: float) -> dict[str, Any] | None:
        """The store's row of ``agent_id`` where another daemon answering holds it and heard
        it within ``timeout_s`` (with that daemon's ``endpoint``); None otherwise."""
        if self.store is None:
            return None
        rows = self.store.agents_elsewhere(self.instance, now - self.timeout_s, agent_id)
        return rows[0] if rows else None

    def _stored_claim(self, row: dict[str, Any]) -> Claim:
        """The holder's claim as the store's agents ``row`` keeps it (no agent instance)."""
        return Claim(row["last_seen"], None, row["platform"],
                     board_name(self.store.platform(row["platform"]), row["platform"]),
                     row["last_seen"], row.get("machine"), row.get("boot"))

    def _held_via_live(self, info: AgentInfo, now: float) -> bool:
        """Whether the board holding ``info``'s id through another daemon is still heard
        there, as the store says; the store is read only once the claim at hand is older
        than ``timeout_s`` (heartbeats raise its last_seen there all along)."""
        if info.held_via is None:
            return False
        held, _ = info.held_via
        if now - held.last_seen <= self.timeout_s:
            return True
        row = self._row_elsewhere(info.agent_id, now)
        other = info.claims.get(info.clash) if info.clash is not None else None
        if row is None or other is None:
            return False
        held = self._stored_claim(row)
        info.held_via = (held, row["endpoint"])
        return other_board(held, other)

    def _clashes(self, info: AgentInfo, identity: bytes, now: float) -> None:
        if info.clash == identity:
            return
        info.clash, info.clash_since = identity, now
        if info.held_via is not None:
            held, where = info.held_via[0], f" through the daemon at {info.held_via[1]}"
        else:
            held, where = info.claims[info.identity], ""  # type: ignore[index]
        _log_clash(info.agent_id, held, where, info.claims[identity], " too")

    def clash(self, agent_id: str, now: float | None = None) -> tuple[Claim, Claim] | None:
        """(holder, other) while two live connections say they are ``agent_id``."""
        info = self._agents.get(agent_id)
        if info is None or info.clash is None:
            return None
        now = time.time() if now is None else now
        other = info.claims.get(info.clash)
        if info.held_via is not None:
            # one of them stopped: the other board's next message ends it (seen)
            if other is None or now - other.last_seen > self.timeout_s \
                    or not self._held_via_live(info, now):
                return None
            return info.held_via[0], other
        holder = self._live_holder(info, info.clash, now)
        if holder is None or other is None or now - other.last_seen > self.timeout_s:
            info.clash = info.clash_since = None  # one of them stopped
            return None
        return holder, other

    def refused_here(self, now: float) -> list[dict[str, Any]]:
        """The clashes this daemon refuses for an id another daemon of the fleet holds, as
        :meth:`Store.save_clashes` keeps them for the holder's daemon to show (it never
        hears the other board)."""
        out = []
        for info in self._agents.values():
            if info.held_via is None or info.clash is None:
                continue
            pair = self.clash(info.agent_id, now)
            if pair is None:
                continue
            other = pair[1]
            out.append({"agent": info.agent_id, "since": info.clash_since or now,
                        "last_seen": other.last_seen,
                        "claim": {"board": other.board, "platform": other.platform_id,
                                  "instance": other.instance, "machine": other.machine,
                                  "boot": other.boot}})
        return out

    def refused_elsewhere(self, now: float) -> dict[str, tuple[Claim, Claim, str, float]]:
        """{agent id: (its holder's claim here, the other board's, the endpoint of the
        daemon that refuses it, since when)} for the ids this daemon holds, alive, that
        another daemon of the fleet refuses another board for (:meth:`refused_here` there)."""
        if self.store is None:
            return {}
        out: dict[str, tuple[Claim, Claim, str, float]] = {}
        for row in self.store.clashes_elsewhere(self.instance, now - self.timeout_s):
            info = self._agents.get(row["agent"])
            holder = (info.claims.get(info.identity) if info is not None
                      and info.identity is not None and info.held_via is None else None)
            if holder is None or row["agent"] in out or not info.alive(self.timeout_s, now):
                continue
            c = row["claim"]
            text = {k: c.get(k) if isinstance(c.get(k), str) else None
                    for k in ("board", "platform", "instance", "machine", "boot")}
            other = Claim(row["since"], text["instance"], text["platform"] or "?",
                          text["board"] or "?", row["last_seen"], text["machine"],
                          text["boot"])
            out[row["agent"]] = (holder, other, row["endpoint"], row["since"])
        return out

    def log_refused_elsewhere(self, now: float) -> None:
        """Log each clash :meth:`refused_elsewhere` finds once, in the words of the refusing
        daemon's line (this daemon's log would say nothing else of it)."""
        seen = set()
        for agent, (holder, other, endpoint, _) in self.refused_elsewhere(now).items():
            key = (agent, other.instance, endpoint)
            seen.add(key)
            if key not in self._refusals_logged:
                _log_clash(agent, holder, "", other,
                           f" to the daemon at {endpoint}, which refuses it")
        self._refusals_logged = seen

    def hello(self, agent_id: str, identity: bytes, platform_id: str, platform: dict[str, Any],
              workloads: list[Any], now: float,
              doctor: dict[str, Any] | None = None,
              standings: list[dict[str, Any]] | None = None,
              standings_dropped: list[str] | None = None, instance: str | None = None,
              keeps: bool = False, per_target: bool = False,
              version: str | None = None, machine: str | None = None,
              boot: str | None = None) -> AgentInfo:
        info = self._agents.get(agent_id)
        if info is None:
            info = self._agents[agent_id] = AgentInfo(agent_id, platform_id)
        if identity not in info.claims:
            info.claims[identity] = Claim(now, instance, platform_id,
                                          board_name(platform, platform_id), now, machine,
                                          boot)
        info.machine, info.boot = machine, boot
        info.held_via = None  # it holds the id here now: a clash is one of this daemon's
        info.platform_id, info.platform, info.workloads = platform_id, platform, workloads
        info.identity, info.last_seen = identity, now
        info.doctor, info.doctor_at = (doctor, now) if doctor else (None, None)
        info.standings, info.standings_dropped = list(standings or []), list(standings_dropped
                                                                              or [])
        info.keeps, info.per_target, info.version = keeps, per_target, version
        info.heard = True
        return info

    def seen(self, agent_id: str, identity: bytes, now: float) -> AgentInfo | None:
        """Note that ``agent_id`` spoke from ``identity``; None when it is unknown, or must
        say hello again (its hello lost to another board's, which is gone now).

        A connection other than the holder's that said hello as ``agent_id`` while the
        holder is alive is a clash: it is heard (its results are stored) but does not take
        the id over."""
        info = self._agents.get(agent_id)
        if info is None:
            return None
        claim = info.claims.get(identity)
        if info.held_via is not None and identity == info.clash:
            # refused for a board another daemon holds the id for: heard (its results are
            # stored) without raising the store's last_seen, which is the holder's
            if claim is not None:
                claim.last_seen = now
                if self._held_via_live(info, now):
                    return info
            # the holder is gone: it says hello again (not taking the id unsaid, as an
            # agent known from the store would: the store's record is to be its board's)
            info.claims.pop(identity, None)
            info.clash = info.clash_since = info.held_via = None
            return None
        if claim is not None:
            claim.last_seen = now
            if identity != info.identity:
                holder = self._live_holder(info, identity, now)
                if holder is not None and (claim.hello_at <= holder.hello_at
                                           or other_board(claim, info)):
                    self._clashes(info, identity, now)
                    self._dirty[agent_id] = now
                    return info
                if other_board(claim, info):
                    del info.claims[identity]  # its hello was not taken: it says it again
                    return None
        info.identity, info.last_seen = identity, now
        self._dirty[agent_id] = now
        return info

    def take_dirty(self) -> dict[str, float]:
        dirty, self._dirty = self._dirty, {}
        return dirty

    def alive(self, agent_id: str, now: float | None = None) -> bool:
        info = self._agents.get(agent_id)
        return info is not None and info.alive(self.timeout_s, now)


def standing_of(rec: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any] | None:
    """What stands on the board once recommendation ``rec`` is applied and verified (its
    ``applied`` body), as the agent's hello says it (agent/standing.py); None: nothing stays
    in force (run as a command, left to the governor)."""
    target = (applied.get("measured") or {}).get("target")
    if rec.get("freq_khz") is None and not isinstance(target, dict):
        return None
    out = {"config_id": rec["config_id"], "workload": rec["workload"], "size": rec["input"],
           "cpus": list(rec["cpus"]), "freq_khz": rec["freq_khz"]}
    if isinstance(target, dict):
        out["target"] = {k: target[k] for k in ("kind", "pid", "unit", "in_unit")
                         if k in target}
    return out


def elsewhere_text(agent: str, endpoint: str, what: str = "") -> str:
    """The refusal of a request that needs ``agent`` connected here, where another daemon of
    the fleet holds its connection: daemons do not forward requests to each other."""
    return (f"agent '{agent}' is connected to the daemon at {endpoint}, not to this one"
            f"{what}: send the request there (opptune ... --daemon {endpoint})")


def platform_id_of(agent_id: str, platform: dict[str, Any]) -> str:
    """The platform's id from its description ("id", then "platform_id", "fingerprint");
    an agent that sends none gets a platform of its own."""
    for key in ("id", "platform_id", "fingerprint"):
        value = platform.get(key)
        if isinstance(value, str) and value:
            return value
    return f"agent:{agent_id}"


def board_name(platform: dict[str, Any] | None, fallback: str = "?") -> str:
    """What a person calls the board: its virtual board's name, else its hostname, else its
    cpu model; ``fallback`` (e.g. the platform id) when the description has none."""
    p = platform or {}
    if p.get("virtual_board"):
        return f"{p['virtual_board']} (virtual)"
    for key in ("hostname", "model_name"):
        if isinstance(p.get(key), str) and p[key] and p[key] != "unknown":
            return p[key]
    return fallback


def other_board(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` (a Claim, an AgentInfo: their platform_id, machine, boot) are
    two boards: another platform, or another machine id or boot id where both say theirs
    (two boards of one cloned image share the machine id, not the boot id). A side that
    says neither (an older agent, a board without the files) is taken for the same board,
    as before the hello said them."""
    return a.platform_id != b.platform_id or any(
        x is not None and y is not None and x != y
        for x, y in ((a.machine, b.machine), (a.boot, b.boot)))


def _log_clash(agent: str, held: Claim, held_where: str, other: Claim, other_where: str
               ) -> None:
    """The log line of a clash: the board that holds ``agent`` (connected ``held_where``) and
    the other one (connected ``other_where``), with what to do."""
    log.warning("agent id '%s' is used by two agents at once: %s holds it%s, %s connected%s; "
                "jobs and configurations go to the first only, the results of both are stored "
                "(each run under its board's platform); set agent_id in each board's agent.toml "
                "to a name of its own (default: the host name) and restart its agent", agent,
                claim_text(held), held_where, claim_text(other), other_where)


def claim_text(c: Claim) -> str:
    """A connection claiming an agent id, as the clash's log line and status name it: with
    the start of its hashed machine id and boot id, which the agent's start line shows too
    (two boards of one host name and platform differ in no other word)."""
    ids = "".join(f", {k} {v[:8]}" for k, v in (("machine", c.machine), ("boot", c.boot)) if v)
    inst = f", agent instance {c.instance}" if c.instance else ""
    return f"board {c.board} (platform {c.platform_id}{ids}{inst})"
