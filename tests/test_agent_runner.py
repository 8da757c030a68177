"""Runner: real child processes, affinity, rusage, failures as records; workloads registry."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

from opptune.agent.runner import Aborted, Runner, RunSpec
from opptune.agent.workloads import WorkloadError, Workloads
from opptune.shared.config import AgentConfig, CommandWorkload
from opptune.shared.records import RunRecord

PY = sys.executable
CPUS = sorted(os.sched_getaffinity(0))

# A busy loop that reports its affinity and a timed region as the last JSON line.
BUSY = ("import os, time, json, sys\n"
        "n = int(sys.argv[1]); t0 = time.perf_counter(); x = 0\n"
        "for i in range(n): x += i\n"
        "print('some log line')\n"
        "print(json.dumps({'time_s': time.perf_counter() - t0, 'aff': sorted(os.sched_getaffinity(0)),"
        " 'thread_stats': [{'cpu': 0, 'busy_s': 0.1, 'tasks': 3}]}))\n")


def make_workloads(extra=()):
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("busy", [PY, "-c", BUSY, "{size}"], sizes=["300000", "10"]),
        CommandWorkload("aff", [PY, "-c", "import os;print(sorted(os.sched_getaffinity(0)))"]),
        CommandWorkload("env", [PY, "-c", "import os;print(os.environ['MYTHREADS'])"],
                        threads_env="MYTHREADS"),
        CommandWorkload("fail", [PY, "-c", "import sys;sys.stderr.write('boom\\n');sys.exit(3)"]),
        CommandWorkload("sleep", [PY, "-c", "import time;time.sleep(30)"]),
        CommandWorkload("badjson", [PY, "-c", "print('{not json')"]),
        # stats until the kernel has charged it system time: a fixed count can stay under the
        # accounting tick on a loaded VM
        CommandWorkload("sysheavy", [PY, "-c", "import os\nwhile os.times().system < 0.02: "
                                     "os.stat('/')"]),
        *extra,
    ])
    return Workloads(cfg, catalogue={})


def test_record_has_times_rusage_and_json_fields():
    r = Runner(make_workloads(), "pid0")
    rec = r.run_once(RunSpec("busy", "300000", [CPUS[0]], 1), rep=2)
    assert isinstance(rec, RunRecord)
    assert rec.ok, rec.error
    rec.validate()
    assert rec.rep == 2 and rec.cores == 1 and rec.cpus == [CPUS[0]]
    assert rec.wall_s > 0 and 0 < rec.time_s < rec.wall_s  # timed region inside the process
    assert rec.user_s > 0 and rec.sys_s >= 0
    assert rec.max_rss_kb > 1000  # a python interpreter
    assert rec.ctx_voluntary is not None and rec.ctx_involuntary is not None
    assert rec.thread_stats == [{"cpu": 0, "busy_s": 0.1, "tasks": 3}]
    assert rec.started_at and abs(rec.started_at - time.time()) < 30


def test_command_without_json_uses_wall_time_and_sys_time_counts():
    r = Runner(make_workloads(), "p")
    rec = r.run_once(RunSpec("sysheavy", "default", CPUS, 1))
    assert rec.ok, rec.error
    assert rec.time_s == rec.wall_s
    assert rec.sys_s > 0


@pytest.mark.parametrize("cpus", [[c] for c in CPUS] + [CPUS])
def test_affinity_applied_to_child_only(cpus):
    before = os.sched_getaffinity(0)
    r = Runner(make_workloads(), "p")
    rec = r.run_once(RunSpec("busy", "10", cpus, 1))
    assert rec.ok, rec.error
    # the child printed what it ran on; the JSON aff key is kept only in stdout, so rerun "aff"
    rec2 = r.run_once(RunSpec("aff", "default", cpus, 1))
    assert rec2.ok and "affinity_observed" not in rec2.extra
    assert os.sched_getaffinity(0) == before  # the agent's own mask is untouched


def test_child_prints_its_affinity(tmp_path):
    out = tmp_path / "aff.txt"
    wl = make_workloads([CommandWorkload(
        "affw", [PY, "-c", f"import os;open({str(out)!r},'w').write(str(sorted(os.sched_getaffinity(0))))"])])
    r = Runner(wl, "p")
    for cpus in ([CPUS[-1]], CPUS):
        rec = r.run_once(RunSpec("affw", "default", cpus, 1))
        assert rec.ok, rec.error
        assert out.read_text() == str(sorted(cpus))


def test_threads_substituted_and_exported():
    wl = make_workloads()
    argv, env = wl.argv_for("env", "default", 7, CPUS)
    assert env["MYTHREADS"] == "7"
    argv, env = wl.argv_for("busy", "10", 3, CPUS)
    assert argv[-1] == "10"


@pytest.mark.parametrize("warmup", [1, 0])
def test_a_point_whose_run_timed_out_runs_no_more(tmp_path, warmup):
    """Walking a board with a program that hangs: every warmup and repetition of every point
    waited run_timeout_s (600 s by default: 8 hours for a 4-core x 3-clock sweep) before the
    job failed. Once a run of a point times out, its other runs are recorded not run. A
    warmup that timed out was not stored at all, only the 'not run' lines after it: it is
    now, as the point's first record, marked as the warmup."""
    log = tmp_path / "starts"
    hang = CommandWorkload("hang", ["sh", "-c", f"echo start >> {log}; exec sleep 30"])
    r = Runner(make_workloads([hang]), "p", timeout_s=1.0)
    recs = r.run_point(RunSpec("hang", "default", CPUS, 1), 3, warmup=warmup)
    assert log.read_text().count("start") == 1
    assert [rec.rep for rec in recs] == [0, 1, 2] and not any(rec.ok for rec in recs)
    assert recs[0].error == "timed out after 1 s" and recs[0].time_s is None
    assert recs[0].wall_s >= 1.0  # the run that hung, measured
    assert [rec.extra.get("warmup") for rec in recs] == [0 if warmup else None, None, None]
    skipped = "warmup 0" if warmup else "repetition 0"
    assert [rec.error for rec in recs[1:]] == [
        f"not run: {skipped} of this point timed out after 1 s"] * 2


def test_the_stderr_of_a_chatty_failure_is_cut_at_a_whole_line():
    """Walking a board: a program that wrote 50,000 lines to stderr, then its error, failed
    with the reason 'workload failed with exit status 3: a chatty program\nnoise line 49947
    ...': the kept tail began mid-line."""
    chatty = CommandWorkload("chatty", [PY, "-c", "import sys\nfor i in range(50000): "
                                        "sys.stderr.write(f'noise line {i} of a chatty "
                                        "program\\n')\nsys.stderr.write('fatal: out of "
                                        "memory\\n')\nsys.exit(3)"])
    rec = Runner(make_workloads([chatty]), "p").run_once(RunSpec("chatty", "default", CPUS, 1))
    head, _, rest = rec.error.partition(": ")
    assert head == "workload failed with exit status 3"
    lines = rest.splitlines()
    assert lines[0] == "[...]" and lines[-1] == "fatal: out of memory"
    assert all(re.fullmatch(r"noise line \d+ of a chatty program", ln) for ln in lines[1:-1])


def test_failures_are_records_not_exceptions():
    r = Runner(make_workloads(), "p", timeout_s=1.0)
    rec = r.run_once(RunSpec("fail", "default", CPUS, 1))
    assert not rec.ok and "exit status 3" in rec.error and "boom" in rec.error
    assert rec.user_s is not None  # rusage still measured
    t0 = time.monotonic()
    rec = r.run_once(RunSpec("sleep", "default", CPUS, 1))
    assert time.monotonic() - t0 < 10
    assert not rec.ok and "timed out" in rec.error
    rec = r.run_once(RunSpec("badjson", "default", CPUS, 1))
    assert not rec.ok and "bad JSON" in rec.error
    rec = r.run_once(RunSpec("nosuch", "default", CPUS, 1))
    assert not rec.ok and "unknown workload" in rec.error
    rec = r.run_once(RunSpec("busy", "huge", CPUS, 1))
    assert not rec.ok and "no size 'huge'" in rec.error


def test_missing_executable_is_a_failed_record():
    wl = make_workloads([CommandWorkload("ghost", ["/nonexistent/bin/x"])])
    rec = Runner(wl, "p").run_once(RunSpec("ghost", "default", CPUS, 1))
    assert not rec.ok and "cannot start" in rec.error


def test_a_timed_out_warmup_takes_the_first_repetition_left(tmp_path):
    """A point resumed at repetition 2 (the agent restarted): its warmup that timed out is
    stored as repetition 2's record, so the job's sequence numbers stay as they were."""
    hang = CommandWorkload("hang", ["sh", "-c", "exec sleep 30"])
    r = Runner(make_workloads([hang]), "p", timeout_s=1.0)
    got = []
    recs = r.run_point(RunSpec("hang", "default", CPUS, 1), 4, warmup=2, first_rep=2,
                       on_record=got.append)
    assert got == recs and [rec.rep for rec in recs] == [2, 3]
    assert [(rec.error, rec.extra.get("warmup")) for rec in recs] == [
        ("timed out after 1 s", 0), ("not run: warmup 0 of this point timed out after 1 s", None)]


def test_run_point_warmups_not_recorded_and_invalid_defaults():
    calls = []

    class CountingMeter:
        name = "count"

        def start(self, spec):
            calls.append("start")

        def stop(self, record, ctx):
            assert ctx["rusage"] is not None and ctx["pid"] > 0
            record.counters["fake"] = 1.0

    r = Runner(make_workloads(), "p", meters=[CountingMeter()],
               invalid_defaults={"energy_j": "no sensor"})
    got = []
    recs = r.run_point(RunSpec("busy", "10", CPUS, 1), reps=3, warmup=2, first_rep=1,
                       on_record=got.append)
    assert [x.rep for x in recs] == [1, 2] and got == recs
    assert calls == ["start"] * 4  # 2 warmups + 2 recorded
    assert all(x.counters == {"fake": 1.0} for x in recs)
    assert all(x.invalid["energy_j"] == "no sensor" and x.energy_j is None for x in recs)


def test_knobs_apply_and_refusal():
    class FakeFreq:
        name = "cpufreq"

        def __init__(self):
            self.applied, self.restored = [], 0

        def apply(self, spec):
            if spec.freq_khz == 1:
                raise ValueError("1 kHz is not offered")
            self.applied.append(spec.freq_khz)
            return {"freq_mhz": spec.freq_khz / 1000, "freq_observed_mhz": {"policy0": 1400.0}}

        def restore(self):
            self.restored += 1

    k = FakeFreq()
    r = Runner(make_workloads(), "p", knobs=[k])
    recs = r.run_point(RunSpec("busy", "10", CPUS, 1, freq_khz=1400000), reps=2)
    assert k.applied == [1400000]
    assert all(x.ok and x.freq_mhz == 1400 and x.freq_observed_mhz == {"policy0": 1400.0}
               for x in recs)
    recs = r.run_point(RunSpec("busy", "10", CPUS, 1, freq_khz=1), reps=2)
    assert all(not x.ok and "not offered" in x.error for x in recs)
    r.close()
    assert k.restored == 1
    # without a frequency knob a requested frequency is refused, never silently ignored
    recs = Runner(make_workloads(), "p").run_point(RunSpec("busy", "10", CPUS, 1, 1000), 1)
    assert not recs[0].ok and "no cpufreq knob" in recs[0].error


def test_abort_kills_running_child():
    import threading
    r = Runner(make_workloads(), "p", timeout_s=60)
    threading.Timer(0.5, r.abort).start()
    t0 = time.monotonic()
    with pytest.raises(Aborted):
        r.run_once(RunSpec("sleep", "default", CPUS, 1))
    assert time.monotonic() - t0 < 10


def test_workloads_registry_errors():
    wl = make_workloads()
    with pytest.raises(WorkloadError, match="unknown workload 'x'"):
        wl.argv_for("x", "default", 1, CPUS)
    with pytest.raises(WorkloadError, match="no size"):
        wl.argv_for("busy", "default", 1, CPUS)
    with pytest.raises(WorkloadError, match="unknown kernel"):
        Workloads(AgentConfig(bench_kernels=["nope"]), catalogue={"a": object()})
    assert {w["name"] for w in wl.describe()} >= {"busy", "fail"}


def test_a_name_used_twice_says_which_clash_it_is():
    """Two [[workloads]] named 'omp' were refused with '(a kernel of that name is already
    offered)', where no kernel is called omp: the message names the real clash and the fix."""
    twice = [CommandWorkload("omp", ["true"]), CommandWorkload("omp", ["ls"])]
    with pytest.raises(WorkloadError) as exc:
        Workloads(AgentConfig(bench_kernels=[], workloads=twice))
    assert str(exc.value) == ("workload 'omp' is defined twice: [[workloads]] entries 1 and 2 "
                              "both have that name; give each its own name")
    with pytest.raises(WorkloadError) as exc:
        Workloads(AgentConfig(bench_kernels=["all"], workloads=[CommandWorkload("stream", ["ls"])]),
                  catalogue={"stream": object()})
    assert str(exc.value) == (
        "[[workloads]] entry 1 is named 'stream', as a bench_suite kernel this agent offers "
        "(bench_kernels): give it another name, or leave that kernel out of bench_kernels")


def test_kernels_from_catalogue_and_virtual_board():
    class K:
        sizes = {"small": 1, "default": 2}
        description = "k"

    cfg = AgentConfig(bench_kernels=["all"])
    wl = Workloads(cfg, catalogue={"stream": K(), "nbody": K()})
    argv, _ = wl.argv_for("stream", "small", 2, [0, 1])
    assert argv[1:] == ["-m", "opptune.bench_suite", "run", "stream", "--threads", "2",
                        "--cpus", "0,1", "--size", "small"]
    cfg = AgentConfig(bench_kernels=["nbody"], virtual_board="xu4", sysfs_root="/tmp/x")
    wl = Workloads(cfg, catalogue={"stream": K(), "nbody": K()})
    assert wl.names() == ["nbody"]
    argv, _ = wl.argv_for("nbody", "small", 3, [4, 5])
    assert argv[1:4] == ["-m", "opptune.agent.virtual_workload", "--board"]
    assert "--root" in argv and "/tmp/x" in argv and argv[-1] == "small"


def test_perf_meter_plugs_in():
    from opptune.agent.meters.perf import PerfMeter
    r = Runner(make_workloads(), "p", meters=[PerfMeter()])
    rec = r.run_once(RunSpec("busy", "300000", CPUS, 1))
    assert rec.ok, rec.error
    assert set(rec.counters) >= {"cycles", "task-clock"}
    # each counter is a number or marked invalid with a reason, never a silent zero
    for name, value in rec.counters.items():
        assert value is not None or f"counter:{name}" in rec.invalid
    assert rec.counters["task-clock"] and rec.counters["task-clock"] > 0


def test_the_run_under_way_is_kept_while_it_runs_and_its_token_reaches_it(tmp_path):
    """The token a killed agent's successor looks for (agent/leftover.py): in the run's
    environment and in the state directory while the run goes on, gone once it is reaped; a
    record whose processes have all ended kills nothing and is removed."""
    from opptune.agent import leftover
    record = tmp_path / leftover.FILENAME
    probe = CommandWorkload("probe", [PY, "-c", "import os,sys; sys.exit(0 if open("
                                      f"{str(record)!r}).read() == os.environ"
                                      f"[{leftover.ENV!r}] else 3)"])
    rec = Runner(make_workloads([probe]), "p", state_dir=str(tmp_path)).run_once(
        RunSpec("probe", "default", CPUS, 1))
    assert rec.ok, rec.error
    assert not record.exists()
    record.write_text(leftover.new_token())
    assert leftover.kill_leftovers(str(tmp_path)) == [] and not record.exists()
