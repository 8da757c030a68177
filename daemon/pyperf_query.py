"""The daemon's side of ``opptune export`` and ``opptune import`` (pyperf results).

``runs``: every stored run of the jobs and verifications matching args.workload/args.agent,
as its record less the bulky per-thread and counter fields (the CLI makes a pyperf suite of
them). ``import``: pyperf values stated to be measured on an agent's board at one
configuration, stored as that board's runs under a fresh job (state done), so fits and
recommendations take them like a sweep's."""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from typing import TYPE_CHECKING, Any

from ..shared.cpus import format_cpu_list
from ..shared.records import RecordError, RunRecord
from .errors import HandlerError
from .jobs import first_failure
from .planner import frequency_refusal, sweep_order
from .registry import board_name
from .store import Group, ResultIn

if TYPE_CHECKING:
    from .service import Daemon

# left out of an exported run: large, and nothing a pyperf reader shows
BULKY = ("thread_stats", "counters", "invalid")
MAX_IMPORT_VALUES = 100_000
IMPORT_PREFIX = "import-"


def runs(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """``{"runs": [{agent, job_id, source, record}], "boards": {platform: name},
    "known": {"agents": [...], "workloads": [...]}, "failed": {workload: {runs, error}}}``:
    known names the agents the daemon knows and the workloads with successful runs (by
    args.agent where given), so the CLI refuses a filter that names nothing as 'opptune
    report' does; failed the workloads (by args.agent) whose every stored run failed, with
    their jobs' first failure, so the CLI says why there is nothing to export of them."""
    workload, agent = args.get("workload"), args.get("agent")
    sources: list[tuple[str, str, str]] = []  # (id, agent, source)
    agents = {a.agent_id for a in d.registry.all()}
    failed_jobs: dict[str, list[str]] = {}  # workload -> its jobs, for their errors
    for j in d.store.jobs():
        agents.add(j["agent"])
        if agent in (None, j["agent"]):
            failed_jobs.setdefault(j["workload"], []).append(j["job_id"])
        if workload in (None, j["workload"]) and agent in (None, j["agent"]):
            src = "import" if j["job_id"].startswith(IMPORT_PREFIX) else "sweep"
            sources.append((j["job_id"], j["agent"], src))
    for r in d.store.recommendations():
        agents.add(r["agent"])
        if workload in (None, r["workload"]) and agent in (None, r["agent"]):
            sources.append((r["config_id"], r["agent"], "verification"))
    # measured: a successful run stored, not a job sent (a workload whose runs all failed
    # passed the name check, then had nothing to export)
    tried: dict[str, list[int]] = {}
    for row in d.store.workload_outcomes(agent):
        agents.add(row["agent"])
        n = tried.setdefault(row["workload"], [0, 0])
        n[0] += row["runs"]
        n[1] += row["ok"]
    workloads = {w for w, (_, ok) in tried.items() if ok}
    failed = {w: {"runs": n, "error": first_failure(d.store, failed_jobs.get(w, []))}
              for w, (n, ok) in tried.items() if not ok and workload in (None, w)}
    out, boards = [], {}
    for job_id, who, source in sources:
        for _, rec in d.store.run_records(job_id):
            if not rec.ok or rec.time_s is None:
                continue
            raw = rec.to_dict()
            for key in BULKY:
                raw.pop(key, None)
            out.append({"agent": who, "job_id": job_id, "source": source, "record": raw})
            if rec.platform not in boards:
                boards[rec.platform] = board_name(d.store.platform(rec.platform), rec.platform)
    return {"runs": out, "boards": boards,
            "known": {"agents": sorted(agents), "workloads": sorted(workloads)},
            "failed": failed}


def import_runs(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """Store args.runs ([{values: [s, ...], metadata: {...}}]) of pyperf benchmark
    args.benchmark from args.file as runs of args.workload (size args.size) on args.agent's
    board at args.cores (args.cpus, default the sweep's first cores) and args.freq_khz."""
    agent = args.get("agent")
    info = d.registry.get(agent) if isinstance(agent, str) else None
    if info is None:
        raise HandlerError("unknown_agent", f"unknown agent '{str(agent)[:80]}': the runs "
                                            "are stored for a board that has said hello")
    workload, size = args.get("workload"), args.get("size") or "default"
    if not (isinstance(workload, str) and workload.strip() and isinstance(size, str)):
        raise HandlerError("bad_args", "import needs a workload name")
    cores, cpus = args.get("cores"), args.get("cpus")
    order = sweep_order(info.platform or {})
    if type(cores) is not int or not 1 <= cores <= len(order):
        raise HandlerError("bad_args", f"cores must be 1..{len(order)} (the cpus of agent "
                                       f"'{agent}'), got {cores!r}")
    if cpus is None:
        cpus = order[:cores]
    elif (not isinstance(cpus, list) or len(cpus) != cores or len(set(cpus)) != cores
          or not all(type(c) is int and c in order for c in cpus)):
        # an order, as given: a cpu named twice is what may be wrong with it
        got = ",".join(map(str, cpus)) if isinstance(cpus, list) else repr(cpus)
        raise HandlerError("bad_args", f"cpus must name {cores} cpu{'s' if cores != 1 else ''}"
                                       f" of agent '{agent}' ({format_cpu_list(order)}), as "
                                       f"many as cores and none twice; got {got[:64]}")
    freq_khz = args.get("freq_khz")
    if freq_khz is not None and (type(freq_khz) is not int or freq_khz <= 0):
        raise HandlerError("bad_args", f"freq_khz must be a whole number of kHz > 0, got "
                                       f"{freq_khz!r}")
    cpufreq = (info.platform or {}).get("cpufreq")
    # a board without cpufreq runs at one frequency of its own, which the user may state;
    # one with cpufreq offers a table, and runs at a frequency outside it were never measured
    if freq_khz is not None and isinstance(cpufreq, dict) and cpufreq.get("available"):
        why = frequency_refusal(info.platform,
                                board_name(info.platform, info.platform_id), [freq_khz])
        if why:
            raise HandlerError("bad_args", why)
    pyruns = args.get("runs")
    if not isinstance(pyruns, list) or not pyruns:
        raise HandlerError("bad_args", "import needs runs: [{values: [...], metadata: {...}}]")
    job_id = IMPORT_PREFIX + uuid.uuid4().hex[:20]
    now = time.time()
    stated = [info.platform_id, workload, size, sorted(cpus), freq_khz,
              str(args.get("benchmark") or "")]
    parsed: list[tuple[int, dict[str, Any], list[float], str]] = []  # (k, meta, values, id)
    seen: dict[str, int] = {}
    n_values = 0
    for k, run in enumerate(pyruns):
        values = run.get("values") if isinstance(run, dict) else None
        meta = run.get("metadata") if isinstance(run, dict) else None
        if not isinstance(values, list) or not isinstance(meta, (dict, type(None))):
            raise HandlerError("bad_args", f"run {k + 1}: needs a list of values")
        for value in values:
            if (type(value) not in (int, float) or not 0 < value < math.inf):
                raise HandlerError("bad_args", f"run {k + 1}: value {value!r} is not a time "
                                               "in seconds > 0")
        n_values += len(values)
        if n_values > MAX_IMPORT_VALUES:
            raise HandlerError("bad_args", f"more than {MAX_IMPORT_VALUES} values in one "
                                           "import: split the file")
        parsed.append((k, meta or {}, values, _run_id(stated, meta or {}, values, seen)))
    known = d.store.stored_ids([f"{r}:{i}" for _, _, values, r in parsed
                                for i in range(len(values))])
    items: list[ResultIn] = []
    for k, meta, values, run_id in parsed:
        for i, value in enumerate(values):
            msg_id = f"{run_id}:{i}"
            if msg_id in known:
                continue
            seq = len(items)
            rec = RunRecord(platform=info.platform_id, workload=workload, input=size,
                            cores=cores, cpus=list(cpus), threads=cores, rep=seq,
                            freq_mhz=freq_khz / 1000 if freq_khz else None,
                            time_s=float(value), started_at=now,
                            extra={"pyperf": {"file": str(args.get("file") or ""),
                                              "benchmark": str(args.get("benchmark") or ""),
                                              "run": k, "metadata": meta}})
            try:
                rec.validate()
            except RecordError as exc:
                raise HandlerError("bad_args", f"run {k + 1}: {exc}") from None
            items.append(ResultIn(msg_id, agent, job_id, seq, rec, rec.to_dict()))
    already = len(known)
    group = Group(info.platform_id, workload, size, "")
    if not items and already:  # every value was stored before: no new job, nothing to fit
        return {"job_id": None, "runs": 0, "already_stored": already,
                "group": group.as_dict(), "cpus": list(cpus), "freq_khz": freq_khz}
    if not items:
        raise HandlerError("bad_args", "the benchmark has no values (only warmups?)")
    # the runs first: a failure here stores nothing; the job row (what status and the
    # export list) follows them
    d.store.insert_results(items, now)
    point = {"cpus": list(cpus), "threads": cores, "freq_khz": freq_khz}
    d.store.save_job(agent, {"job_id": job_id, "workload": workload, "size": size,
                             "points": [point], "reps": len(items), "warmup": 0}, now,
                     state="done")
    d.store.set_job_state(job_id, "done", f"imported from {args.get('file') or 'a pyperf file'}"
                          f" ({args.get('benchmark') or 'benchmark'})", now)
    d.recommender.request_fit(group, recommend_after=False)
    return {"job_id": job_id, "runs": len(items), "already_stored": already,
            "group": group.as_dict(), "cpus": list(cpus), "freq_khz": freq_khz}


def _run_id(stated: list[Any], meta: dict[str, Any], values: list[float],
            seen: dict[str, int]) -> str:
    """The id of a pyperf run stated at one configuration (``stated``: platform, workload,
    size, cpus, frequency, benchmark): a hash of that, the run's metadata (pyperf's include
    the run's date, to the microsecond) and its values, so the same run imported again is
    the same stored run. Runs alike in all that (no metadata, equal values) are told apart
    by their order among the ones alike in this import (``seen`` counts them)."""
    text = json.dumps([stated, meta, values], sort_keys=True, default=str)
    n = seen[text] = seen.get(text, -1) + 1
    return "pyperf-" + hashlib.sha256(f"{text}#{n}".encode()).hexdigest()[:32]
