"""The agent's bounds on the work a daemon may ask of it: a job or configuration over
``max_reps``, ``max_warmup``, ``max_points``, ``max_job_runs`` or ``max_threads_per_cpu`` is
refused before anything of it runs, and the daemon is told why (the real agent as a process
against a stand-in daemon); bad values of these keys are configuration errors naming the file,
the key and the expected form."""

from __future__ import annotations

import os

import pytest

from opptune.shared import protocol as P
from opptune.shared.config import ConfigError, load_agent_config
from test_agent_link import ctx, job, router, start_agent  # noqa: F401 (fixtures)

LIMITS = """max_reps = 4
max_warmup = 2
max_points = 3
max_job_runs = 10
max_threads_per_cpu = 2
"""


def with_body(msg, **changes):
    body = {**msg["body"], **changes}
    return P.make(msg["type"], "daemon", body)


@pytest.mark.integration
def test_jobs_and_configs_over_the_agents_limits_are_refused_with_the_reason(ctx, router,  # noqa: F811
                                                                             tmp_path):
    proc = start_agent(tmp_path, router.endpoint, keys=LIMITS)
    try:
        hello = router.expect(lambda m: m["type"] == "hello", timeout=15)[-1]
        cpus = hello["body"]["platform"]["cpus_online"][:1]
        one = [{"cpus": cpus, "threads": 1, "freq_khz": None}]
        base = job(reps=1)
        over = [
            (dict(reps=5), "repetitions 5 is over this agent's limit of 4 ('max_reps'"),
            # adaptive repetitions: the most a job may take counts
            (dict(reps=2, max_reps=50), "repetitions 50 is over this agent's limit of 4"),
            (dict(warmup=3), "warm-up runs 3 is over this agent's limit of 2 ('max_warmup'"),
            (dict(points=one * 4), "points 4 is over this agent's limit of 3 ('max_points'"),
            (dict(points=one * 3, reps=3, warmup=1),
             "3 points x (3 repetitions + 1 warm-up runs) = 12 is over this agent's limit of "
             "10 ('max_job_runs'"),
            (dict(points=[{"cpus": cpus, "threads": 3, "freq_khz": None}]),
             "point 0: threads 3 on 1 cpus is over this agent's limit of 2 per cpu "
             "('max_threads_per_cpu'"),
        ]
        for i, (changes, why) in enumerate(over):
            msg = with_body(base, job_id=f"over-{i}", **changes)
            router.send(msg)
            err = router.expect(lambda m: m["type"] == "error", what="a refusal")[-1]["body"]
            assert err["code"] == "bad_job" and err["ref"] == msg["id"], err
            assert why in err["message"], (why, err)
        cfg = P.make("config", "daemon", {"config_id": "c1", "workload": "spin",
                                          "size": "20000", "cpus": cpus, "threads": 1,
                                          "freq_khz": None, "reps": 9})
        router.send(cfg)
        out = router.expect(lambda m: m["type"] == "applied", what="applied")[-1]["body"]
        assert out["ok"] is False and "repetitions 9 is over this agent's limit of 4" in \
            out["error"], out
        assert not (tmp_path / "runs.txt").exists()  # nothing of the refused work ran
        # within the limits (the most of each), the job runs
        ok = with_body(base, job_id="ok", points=[{"cpus": cpus, "threads": 2,
                                                   "freq_khz": None}] * 2, reps=4, warmup=1)
        router.send(ok)
        results = [m for m in router.expect(
            lambda m: m["type"] == "result" and m["body"]["seq"] == 7, timeout=30,
            what="the job's last result") if m["type"] == "result"]
        assert {m["body"]["job_id"] for m in results} == {"ok"}
        assert len((tmp_path / "runs.txt").read_text().split()) == 10  # 2 x (4 + 1)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("key,value,form", [
    ("max_reps", "0", "a repetition count from 1 to 1000000"),
    ("max_warmup", "-1", "a warm-up run count from 0 to 1000000"),
    ("max_points", "\"many\"", "a point count from 1 to 1000000"),
    ("max_threads_per_cpu", "5000", "a thread count per cpu from 1 to 4096"),
    ("max_job_runs", "1.5", "a run count from 1 to 1000000000"),
    ("stop_after_timeouts", "-1", "a point count from 0 to 1000000, e.g. 2 (0: never stop a "
                                  "job for its timeouts)"),
    ("stop_after_timeouts", "true", "a point count from 0 to 1000000"),
])
def test_bad_limit_values_name_the_file_key_and_form(tmp_path, key, value, form):
    path = tmp_path / "agent.toml"
    path.write_text(f"{key} = {value}\n")
    with pytest.raises(ConfigError) as exc:
        load_agent_config(path)
    assert str(exc.value).startswith(f"{path}: key '{key}' must be {form}"), str(exc.value)


def test_defaults_bound_every_job():
    c = load_agent_config(os.devnull)
    assert (c.max_reps, c.max_warmup, c.max_points, c.max_threads_per_cpu, c.max_job_runs) == \
        (1000, 100, 10_000, 8, 100_000)
