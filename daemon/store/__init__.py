"""The daemon's store: one interface, one file per back end (sqlite.py, postgres.py).

The service talks only to :class:`Store`. ``open_store`` picks the back end from the location:
a ``postgresql://`` (or ``postgres://``) URL selects PostgreSQL, anything else is an SQLite file
path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterator, NamedTuple, Sequence

from ...shared.config import is_database_url as is_url
from ...shared.records import RecordColumns, RunRecord


class Group(NamedTuple):
    """What one model is fitted to: all runs of a workload input and variant on one platform."""
    platform: str
    workload: str
    input: str
    variant: str

    def as_dict(self) -> dict[str, str]:
        return self._asdict()


def drift_ends(drift_variant: str, variant: str) -> bool:
    """Whether a drift of the group with ``drift_variant`` ends the runs from before it of the
    group with ``variant`` (same platform, workload and input): the group's own, and between
    the whole-board group (no variant) and its ``cluster<i>`` groups either way, as both
    measured the same cores before the drift; two clusters' groups stay apart. The store's
    SQL (sqlite.drift_ends_sql) says the same."""
    return drift_variant == variant or "" in (drift_variant, variant)


# why a fit leaves a successful run out (Store.report_runs), in the order the store tests
# them: received before a drift of its group ended its runs (store.drift_ends), throttled,
# a verification run of a recommendation judged off, marked for interference (where the
# load is not accepted)
LEFT_OUT = ("drift", "throttled", "off", "marked")


# states of a finished tune session (daemon/tuning.py): never resumed (stopped: by
# 'opptune tune --stop'). A daemon older than "stopped" would resume such a session, but it
# cannot open a store at schema version 14 (jobs.stopped), which came in the same round of
# changes with no release between: it has schema 13 or less and refuses a newer store at its
# start (README "Upgrading", which also has every daemon of a fleet stopped first)
TUNE_FINAL_STATES = ("done", "failed", "unmet", "stopped")
# states of a tune session going on: every state it is saved in is one of the two lists
# (open_tune_sessions names these, so that the index on state serves it)
TUNE_OPEN_STATES = ("measuring", "verifying")


class ResultIn(NamedTuple):
    """One validated result message ready to store."""
    msg_id: str
    agent: str
    job_id: str | None
    seq: int | None
    # the record; None on the daemon's ingest path for a record ``columns`` holds all the
    # daemon needs of (shared/records.py, record_columns)
    record: RunRecord | None
    raw: dict[str, Any]  # the record as received, stored whole (msgpack)
    columns: RecordColumns | None = None  # the record's stored columns; None: read from record


class Store(ABC):
    """Persistent state of the daemon. Methods are called from the service loop only."""

    @abstractmethod
    def schema_version(self) -> int: ...

    # platforms and agents
    @abstractmethod
    def save_platform(self, platform_id: str, description: dict[str, Any], now: float) -> None: ...

    @abstractmethod
    def platform(self, platform_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def save_agent(self, agent_id: str, platform_id: str, workloads: list[Any],
                   agent_version: str, now: float,
                   doctor: dict[str, Any] | None = None, daemon: str | None = None,
                   machine: str | None = None, boot: str | None = None) -> None:
        """Insert or update an agent at its hello; ``doctor`` (its report, agent/doctor.py)
        replaces the stored one with ``now`` as its time, None clears it; ``daemon``: the
        instance the hello came to; ``machine``, ``boot``: the hashed ids the hello sent
        (agent/machine_id.py; None: not said)."""

    @abstractmethod
    def touch_agents(self, last_seen: dict[str, float], daemon: str | None = None) -> None:
        """Raise agents' last_seen; ``daemon`` (an instance) becomes the holder of each agent
        it heard no earlier than the stored last_seen (another daemon heard it later: it
        holds it)."""

    @abstractmethod
    def agents(self) -> list[dict[str, Any]]:
        """Every known agent: id, platform, workloads, first_seen, last_seen, doctor,
        doctor_at, daemon (the instance that last heard it; None: unknown), machine, boot
        (the hashed ids of its last hello; None: not said, or before schema 20)."""

    @abstractmethod
    def agent(self, agent_id: str) -> dict[str, Any] | None:
        """Agent ``agent_id`` as :meth:`agents` gives it (None: never said hello)."""

    # daemons sharing the store: which one holds an agent's connection
    @abstractmethod
    def save_daemon(self, instance: str, endpoint: str, now: float,
                    version: str | None = None) -> None:
        """Record daemon ``instance`` at ``endpoint`` (running opptune ``version``) as alive at
        ``now`` (its heartbeat); an earlier daemon recorded at the same endpoint is forgotten
        (it was killed)."""

    @abstractmethod
    def drop_daemon(self, instance: str) -> None:
        """Forget ``instance`` (it stops): its agents are no longer online through it."""

    @abstractmethod
    def save_clashes(self, instance: str, clashes: list[dict[str, Any]]) -> None:
        """Daemon ``instance``'s clashes now, replacing those it saved before: each
        ``{"agent", "claim", "since", "last_seen"}``, an agent id another daemon of the fleet
        holds and the connection of another board it refuses for it (``claim``: JSON-safe)."""

    @abstractmethod
    def clashes_elsewhere(self, instance: str, since: float) -> list[dict[str, Any]]:
        """The clashes other daemons than ``instance`` saved, heard at ``since`` or later, of
        daemons whose heartbeat is that recent: agent, claim, since, last_seen and the
        refusing daemon's endpoint, by agent."""

    @abstractmethod
    def daemons(self) -> list[dict[str, Any]]:
        """Every daemon recorded as sharing the store: instance, endpoint, started,
        last_seen (its last heartbeat), version (None: a daemon older than schema 15, which
        does not record it), by endpoint. A killed daemon's row stays (its
        heartbeat ages) until a daemon starts at its endpoint or :meth:`forget_daemons`."""

    @abstractmethod
    def forget_daemons(self, before: float) -> list[dict[str, Any]]:
        """Drop the daemons whose last heartbeat is older than ``before`` (gone for good:
        a daemon that starts again writes a row of its own); the rows dropped, as
        :meth:`daemons` gives them."""

    @abstractmethod
    def agents_elsewhere(self, instance: str, since: float,
                         agent_id: str | None = None) -> list[dict[str, Any]]:
        """The agents (as :meth:`agents` gives them, plus ``endpoint``) held by a daemon other
        than ``instance`` that heard them at ``since`` or later and whose own heartbeat is
        that recent; with ``agent_id``, that agent only (a hello's look-up)."""

    @abstractmethod
    def agents_heard_unrecorded(self, instance: str, since: float) -> list[dict[str, Any]]:
        """The agents (as :meth:`agents` gives them) heard at ``since`` or later whose holder
        is no other daemon answering in ``daemons``: none recorded, this ``instance``, or a
        daemon whose heartbeat is older. Their last_seen was raised by a daemon that records
        neither itself nor the agents it holds (one older than schema 11 still running on
        the store), or by one that stopped since."""

    @abstractmethod
    def workloads(self) -> list[str]: ...

    # jobs
    @abstractmethod
    def save_job(self, agent_id: str, job: dict[str, Any], now: float, state: str = "sent") -> None:
        """Store a job body as sent to ``agent_id``."""

    @abstractmethod
    def recovered_counts(self, agent: str) -> tuple[int, int]:
        """(jobs, runs) stored as ``recovered`` for ``agent`` (``opptune recover``)."""

    @abstractmethod
    def open_recovery(self, agent: str, until: float, codes: list[str], now: float) -> None:
        """Open ``agent`` to results of jobs the store never issued until ``until``, asking
        it for the results it kept under the refusals ``codes`` (``opptune recover``); an
        opening replaces the agent's last."""

    @abstractmethod
    def recoveries(self, agent: str | None = None) -> list[dict[str, Any]]:
        """``{"agent", "until", "codes", "opened"}`` of the openings (of ``agent``), whether
        still open or not, by the time they were made."""

    @abstractmethod
    def set_job_state(self, job_id: str, state: str, reason: str | None = None,
                      now: float | None = None, only_from: Sequence[str] | None = None,
                      stopped: dict[str, Any] | None = None) -> bool:
        """Set a job's state (and reason, and ``stopped``: the agent's stop of it for its
        timeouts, shared/records.job_stop); with ``only_from``, only when its state is one of
        those. True when a row changed."""

    @abstractmethod
    def job_failures(self, job_id: str) -> tuple[int, list[str]]:
        """(successful runs of the job, the distinct error texts of its runs when none
        succeeded)."""

    @abstractmethod
    def job_errors(self, job_id: str) -> list[str]:
        """The distinct error texts of the job's failed runs, in sequence order."""

    @abstractmethod
    def job_last_run(self, job_id: str) -> dict[str, Any] | None:
        """The record (as sent) of the job's run with the highest sequence number; None
        when none is stored."""

    @abstractmethod
    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job's row; ``stopped`` is None or the agent's stop of it (also read from the
        reason of a row stored before the column)."""

    @abstractmethod
    def jobs(self) -> list[dict[str, Any]]:
        """Every job with its received count (distinct seq stored) and, of those,
        ``not_run``: the runs its agent recorded without running them (failed with no wall
        time: skipped after a cancel or a timeout, a knob not set, a program that could not
        start), so that ``received - not_run`` runs ran."""

    @abstractmethod
    def jobs_page(self, agent: str | None = None, job_ids: Sequence[str] | None = None,
                  limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """(rows as :meth:`jobs` gives them, how many match) for ``agent``'s jobs and those
        named in ``job_ids`` (each None: all); with ``limit``, at most that many: the
        unfinished first, then the most recently updated, listed in creation order."""

    @abstractmethod
    def active_jobs(self) -> list[dict[str, Any]]:
        """job_id, agent, state of every job queued, sent or running."""

    @abstractmethod
    def held_cancels(self) -> list[dict[str, Any]]:
        """job_id, agent of every job cancelled whose agent's end is not stored yet
        (``stopped.held``: the agent is to be told), oldest first. Read each second by every
        daemon of a fleet: it costs what the held rows do, not the jobs kept (schema 21)."""

    @abstractmethod
    def jobs_for(self, agent_id: str, workload: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def job_received(self, job_id: str) -> int: ...

    @abstractmethod
    def job_groups(self, job_id: str) -> list[Group]: ...

    # runs
    @abstractmethod
    def insert_results(self, items: Sequence[ResultIn], now: float) -> list[str]:
        """Store a batch idempotently in one transaction; return every id now committed
        (new and already present) in the order given."""

    # The daemon's ingest path: each result's row is built as the result is taken (so that
    # the decoded message can be freed at once), the batch's rows inserted together.
    @staticmethod
    @abstractmethod
    def result_row(msg_id: str, agent: str, job_id: str | None, seq: int | None,
                   cols: RecordColumns, raw: dict[str, Any], now: float) -> tuple:
        """The row ``insert_rows`` stores for one result (``raw``: its record as received)."""

    @abstractmethod
    def insert_rows(self, rows: Sequence[tuple]) -> None:
        """Store ``result_row``'s rows idempotently in one transaction."""

    @abstractmethod
    def stored_ids(self, msg_ids: Sequence[str]) -> set[str]:
        """The ids of ``msg_ids`` that name a stored run."""

    @abstractmethod
    def run_records(self, job_id: str) -> list[tuple[str, RunRecord]]:
        """(message id, the whole record as received) of a job's runs, in sequence order."""

    @abstractmethod
    def run_counts(self) -> list[dict[str, Any]]: ...

    @abstractmethod
    def run_counts_page(self, agent: str | None = None, limit: int | None = None
                        ) -> tuple[list[dict[str, Any]], int]:
        """(rows as :meth:`run_counts` gives them, how many there are) of ``agent``'s runs
        (None: all); with ``limit``, the rows of the most recently received runs. A row is
        ``{agent, platform, workload, input, count, failed, marked}``: ``count`` the
        successful runs, ``failed`` the others, ``marked`` those marked for interference."""

    @abstractmethod
    def workload_outcomes(self, agent: str | None = None) -> list[dict[str, Any]]:
        """Per agent and workload with stored runs (of ``agent``; None: of every agent):
        ``{agent, workload, runs, ok}``, how many runs are stored and how many succeeded."""

    @abstractmethod
    def groups(self) -> list[Group]:
        """Every group that has runs."""

    @abstractmethod
    def run_points(self) -> dict[Group, list[tuple[int, float | None, float, float | None, bool,
                                                  bool]]]:
        """Per group: (cores, freq_mhz, time_s, energy_j, virtual, marked) of its successful
        runs (for reports; fitting uses ``group_runs``)."""

    @abstractmethod
    def group_runs(self, group: Group, accept_load: bool | None = None
                   ) -> list[tuple[int, float | None, float]]:
        """(cores, freq_mhz, time_s) of the group's successful runs that a fit may use: not
        throttled, not marked (interference; unless ``accept_load``, default the store's
        ``accept_load``), not the verification of a recommendation judged "off" (suspect:
        noise or drift; folded in, it widens the interval until drift can no longer be seen),
        and received after the group's last drift event."""

    @abstractmethod
    def report_runs(self, accept_load: bool | None = None
                    ) -> dict[Group, tuple[list[tuple[int, float | None, float, float | None,
                                                      bool, bool, str | None]],
                                           list[tuple[int, float | None, float]]]]:
        """Per group: (:meth:`run_points`' rows, each with why :meth:`group_runs` leaves it
        out (one of LEFT_OUT; None: it is one of them), :meth:`group_runs`' rows), in one
        pass over the runs (the report lists every group: a statement per group held the
        daemon's loop 0.1 s at 771 groups, beside 0.1 s for the pass of run_points)."""

    @abstractmethod
    def profile_runs(self, marked: bool | None) -> Iterator[tuple]:
        """(platform, workload, input, cores, freq_mhz, time_s, record, record_msgpack,
        variant) of the runs MPET's profiles take (characterize.mpet_data): the sweep jobs'
        successful runs over the whole board (variant "") or one cluster ("cluster<i>"), not
        throttled, received since their group's last drift event (the rule of
        ``group_runs``); ``marked`` True: the marked ones only, False: the unmarked ones
        only, None: both."""

    @abstractmethod
    def point_marks(self, group: Group) -> list[dict[str, Any]]:
        """Per point of the group: cores, freq_mhz, clean and marked run counts, the latest
        mark's reason."""

    @abstractmethod
    def group_energy_runs(self, group: Group, accept_load: bool | None = None
                          ) -> list[tuple[int, float | None, float, float | None, str | None]]:
        """(cores, freq_mhz, time_s, energy_j, energy_source) of the runs ``group_runs`` gives,
        in the order of ``group_runs``: what a goal needing power is fitted to."""

    # fits and recommendations
    @abstractmethod
    def save_fit(self, group: Group, model: str, params: dict[str, Any],
                 quality: dict[str, Any], runners_up: list[Any], now: float) -> int: ...

    @abstractmethod
    def fits(self) -> list[dict[str, Any]]:
        """The latest fit of every group."""

    @abstractmethod
    def fits_page(self, platform: str | None = None, limit: int | None = None,
                  groups: Sequence[Group] | None = None) -> tuple[list[dict[str, Any]], int]:
        """(the latest fit of each of ``platform``'s groups (None: every group; ``groups``:
        of those only), how many groups have one); with ``limit``, the newest that many, in
        the groups' order."""

    @abstractmethod
    def save_recommendation(self, rec: dict[str, Any], now: float) -> None:
        """Store (or replace) recommendation ``rec`` (recommender.send_config's map), with
        whether it stays in force on the board (``keep``; None: it does, as before) and the
        goal it was pushed for (``goal``: a map, or None for time)."""

    @abstractmethod
    def update_recommendation(self, config_id: str, state: str, now: float,
                              verified_time_s: float | None = None,
                              error: str | None = None,
                              verified_energy_j: float | None = None) -> bool:
        """Set a recommendation's verdict: its state, the time (and energy: None where the
        runs had no meter) its verification measured, its note. False when there is none."""

    @abstractmethod
    def set_replaced(self, config_id: str, by: str | None, at: float | None) -> bool:
        """Note that recommendation ``config_id``, in force on its board, was replaced there
        by recommendation ``by`` at ``at`` (None, None: in force again); its state, verdict
        and ``updated`` stay. False when there is no such recommendation."""

    @abstractmethod
    def recommendation(self, config_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def recommendations(self) -> list[dict[str, Any]]: ...

    @abstractmethod
    def recommendations_page(self, agent: str | None = None, limit: int | None = None
                             ) -> tuple[list[dict[str, Any]], int]:
        """(``agent``'s recommendations (None: all), oldest first, how many there are); with
        ``limit``, the newest that many."""

    @abstractmethod
    def take_unsent(self, agent: str, now: float) -> list[dict[str, Any]]:
        """``agent``'s recommendations stored "unsent" (it was away when they were made)
        that are still the newest of their group, moved to "pushed" for the caller to send
        (a conditional move: of several daemons on one store, one takes each). Older unsent
        ones become "superseded". With none unsent (the usual hello), one index lookup and
        no write lock (schema 23)."""

    # drift: a group re-characterised after its verifications left the prediction interval
    @abstractmethod
    def save_drift(self, agent: str, group: Group, reason: str, job_ids: list[str],
                   error: str | None, now: float, agent_only: bool = False) -> int:
        """Record a drift event; the group's fits use only runs received from ``now`` on
        (``agent_only``: of the runs of ``agent``, those of its other agents stay in)."""

    @abstractmethod
    def drift_since(self, group: Group, agent: str | None = None) -> float | None:
        """When the group was last found drifting (None: never), counting the drifts that
        end its runs (:func:`drift_ends`: for a whole-board group its clusters' groups', for
        a ``cluster<i>`` group the whole-board group's): those of every agent, and with
        ``agent`` its own agent-only ones too (a run's own end is the later of the two)."""

    @abstractmethod
    def drift_events(self) -> list[dict[str, Any]]:
        """Every drift event, oldest first."""

    @abstractmethod
    def swept_clocks_khz(self, group: Group) -> list[int]:
        """The set clocks (kHz, ascending) the group was measured at by its jobs (sweeps,
        characterize, tune, imports: marked and before a drift too), not by the verification
        of a recommendation: the grid a drift measures again."""

    # fitting claims: daemons sharing one database never fit the same group at once
    @abstractmethod
    def claim_fit(self, group: Group, owner: str, now: float, lease_s: float) -> bool:
        """Claim ``group`` for fitting by daemon ``owner``; False while another daemon holds
        it (a claim older than ``lease_s`` is taken over: its daemon died)."""

    @abstractmethod
    def release_fit(self, group: Group, owner: str) -> None:
        """Give back ``owner``'s claim on ``group`` (nothing when another daemon holds it)."""

    # tune sessions (``opptune tune``), kept so that a restarted daemon resumes them
    @abstractmethod
    def save_tune_session(self, session: dict[str, Any], expect: float | None = None) -> bool:
        """Insert or replace a session (its ``tune_id``, ``agent``, ``state``, ``started``
        and ``updated`` are also columns; the whole dict is stored as JSON). With ``expect``,
        only replace the row whose ``updated`` is still that (False: another daemon of the
        fleet saved it since, or there is no such row)."""

    @abstractmethod
    def tune_session(self, tune_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def open_tune_sessions(self) -> list[dict[str, Any]]:
        """Every session in an open state (``TUNE_OPEN_STATES``), oldest first. The
        row's columns (``tune_id``, ``agent``, ``state``, ``started``, ``updated``) fill the
        keys its body lacks; a body that is no JSON object comes as those columns and
        ``unreadable`` (why), so that the daemon can close it (:meth:`fail_tune_session`)."""

    @abstractmethod
    def fail_tune_session(self, tune_id: str, expect: float, reason: str, now: float) -> bool:
        """Close a stored session that cannot be resumed: state "failed", ``updated`` ``now``,
        only where its ``updated`` is still ``expect`` (False: changed since, or no such row).
        A body that is a JSON object takes the state, ``reason`` and ``updated``; any other
        is kept as stored."""

    # re-measurement of marked points (daemon/remeasure.py), kept across restarts
    @abstractmethod
    def save_remeasure(self, item_id: str, agent: str, state: str, body: dict[str, Any],
                       now: float) -> None:
        """Insert or replace one item (``state``: waiting, sent or never_clean)."""

    @abstractmethod
    def move_remeasure(self, item_id: str, expect: str, state: str, body: dict[str, Any],
                       now: float) -> bool:
        """Replace one item only if it is still in state ``expect`` (False: it is not, another
        daemon on the store acted on it first)."""

    @abstractmethod
    def delete_remeasure(self, item_id: str, expect: str | None = None) -> bool:
        """Delete one item (only if in state ``expect`` where given); False: no such row."""

    @abstractmethod
    def remeasure_items(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Every item (in one of ``states``; None: in any) as ``{"id", "agent", "state",
        "body", "updated"}``, oldest first (one whose body cannot be read is logged and left
        out)."""

    @abstractmethod
    def state_counts(self) -> dict[str, dict[str, int]]:
        """{"jobs": {state: n}, "recommendations": {state: n}} (for the metrics)."""

    @abstractmethod
    def close(self) -> None: ...

    def gone(self) -> str | None:
        """What became of the store's file when it is no longer the one at its path (SQLite:
        deleted or replaced under the daemon, or written by another program: a backup copied
        over it); None while it is. A server (PostgreSQL) has no file to lose: always None."""
        return None

    def abandon(self) -> None:
        """Close a store that is ``gone`` (the daemon stops with it)."""
        self.close()


def open_store(location: str) -> Store:
    """Open (and migrate) the store at ``location``."""
    if is_url(location):
        try:
            from .postgres import PostgresStore
        except ImportError:
            raise ValueError("the PostgreSQL store needs psycopg 3: pip install "
                             "'psycopg[binary]' (it comes with opptune[daemon])") from None
        return PostgresStore(location)
    from .sqlite import SQLiteStore
    return SQLiteStore(location)


__all__ = ["Group", "ResultIn", "Store", "TUNE_FINAL_STATES", "TUNE_OPEN_STATES", "is_url",
           "open_store"]
