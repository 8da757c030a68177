"""``opptune tune`` and ``opptune recommend`` end to end: real daemon and agent processes on the
odroid-xu4 virtual board (big.LITTLE, INA power sensors), the installed ``opptune`` command
run from another directory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from opptune.agent.virtual_board import board_spec, make_tree, run_model
from procs import Cluster, wait_until

pytestmark = pytest.mark.integration

OPPTUNE = str(Path(sys.executable).parent / "opptune")
XU4 = board_spec("odroid-xu4")


def opptune(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}  # rich tables unwrapped, as on a wide terminal
    return subprocess.run([OPPTUNE, *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def energy_j(cpus: list[int], f_khz: int) -> float:
    m = run_model(XU4, cpus, len(cpus), {c: f_khz for c in cpus})
    return m["time_s"] * m["power_w"]


def grid_energies() -> dict[tuple[int, ...], float]:
    """True energy of every per-cluster configuration (what tune chooses among)."""
    out = {}
    for cl in XU4["clusters"]:
        for k in range(1, len(cl["cpus"]) + 1):
            for f in cl["freqs_khz"]:
                out[(*cl["cpus"][:k], f)] = energy_j(cl["cpus"][:k], f)
    return out


def tune_in_background(c: Cluster, cwd: Path) -> subprocess.Popen:
    """`opptune tune` of pi_integrate for energy on the test agent, running while the test
    watches the daemon."""
    return subprocess.Popen([OPPTUNE, "tune", "--daemon", c.endpoint, "--agent", "test-agent",
                             "--workload", "pi_integrate", "--objective", "energy",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd)


def start(tmp: Path, kernels=("pi_integrate", "triad")) -> Cluster:
    root = make_tree("odroid-xu4", str(tmp / "board"))
    c = Cluster(tmp, kernels=kernels, auto_sweep=False, max_cores=0,
                extra_agent={"virtual_board": "odroid-xu4", "sysfs_root": root})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), 30, "the agent's hello")
    except BaseException:  # the callers' finally is not entered yet: stop both here
        c.stop()
        raise
    return c


def one_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_tune_energy_then_recommend_energy_beside_time(tmp_path):
    c = start(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        proc = opptune("tune", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                       "pi_integrate", "--objective", "energy", "--json", cwd=elsewhere)
        assert proc.returncode == 0, proc.stdout + proc.stderr + c.logs()
        s = json.loads(proc.stdout)  # stdout holds only JSON
        assert s["state"] == "done"
        v = s["verification"]
        assert v["state"] in ("verified", "unconfirmed", "off")
        # an energy goal is judged on the energy the verification runs measured too
        assert v["error"].startswith("time ") and "; energy " in v["error"], v
        assert v["verified_energy_j"] > 0 and v["predicted_energy_j"]["value"] > 0, v
        truth = grid_energies()
        assert s["grid"] == len(truth) == 13 * 4 + 19 * 4
        # each step is one configuration measured by the session, a one-point job
        measured = {(*st["cpus"], st["freq_khz"]) for st in s["steps"]}
        assert len(measured) == s["measured"] == len(s["steps"])
        assert s["measured"] <= 0.15 * s["grid"], s["steps"]
        jobs = c.rows("SELECT job_id, n_points, state FROM jobs")
        assert {j for j, _, _ in jobs} >= {st["job_id"] for st in s["steps"]}
        assert all(n == 1 and state == "done" for _, n, state in jobs)
        r = s["recommendation"]
        got = energy_j(r["cpus"], r["freq_khz"])
        assert got <= 1.03 * min(truth.values()), (r, min(truth.values()))
        assert r["energy"] == "measured" and r["cluster"] in (0, 1)
        assert r["freq_per_policy"] == {f"policy{r['cpus'][0]}": r["freq_khz"]}
        assert r["applied"]["state"] == "pushed"
        st = c.status()
        applied = [x for x in st["recommendations"] if x["config_id"] == s["config_id"]]
        assert applied and applied[0]["state"] == s["verification"]["state"]
        assert applied[0]["cpus"] == r["cpus"] and applied[0]["freq_khz"] == r["freq_khz"]

        # the energy recommendation is far cheaper than the time one, from the same runs
        rec = {}
        for objective in ("time", "energy"):
            p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent",
                        "--workload", "pi_integrate", "--objective", objective, "--json",
                        cwd=elsewhere)
            assert p.returncode == 0, p.stderr
            rec[objective] = json.loads(p.stdout)
        t, e = rec["time"], rec["energy"]
        assert t["time_s"]["value"] < e["time_s"]["value"]
        assert energy_j(t["cpus"], t["freq_khz"]) > 1.5 * energy_j(e["cpus"], e["freq_khz"])
        for x in (t, e):
            assert x["n_configurations"] >= s["measured"] and x["applied"] is None
            assert x["energy_j"]["lower"] <= x["energy_j"]["value"] <= x["energy_j"]["upper"]

        # the table names everything a user acts on
        p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--objective", "edp", "--deadline", "50ms", cwd=elsewhere)
        assert p.returncode == 0, p.stderr
        for needle in ("energy-delay product under a 50 ms deadline", "cluster", "policy",
                       "runner-up", "rests on",
                       "measured: the workload's own figure (energy_j in its output); the "
                       "board's meter: power sensors (hwmon)"):
            assert needle in p.stdout, p.stdout

        # --apply pushes it; the agent applies and verifies it
        p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--objective", "time", "--power-cap", "2W", "--apply",
                    "--json", cwd=elsewhere)
        assert p.returncode == 0, p.stderr
        pushed = json.loads(p.stdout)
        assert pushed["power_w"]["value"] <= 2.0 and pushed["applied"]["state"] == "pushed"
        cid = pushed["applied"]["config_id"]
        st = c.wait_for(lambda st: any(x["config_id"] == cid and x["state"] in
                                       ("verified", "unconfirmed", "off")
                                       for x in st["recommendations"]),
                        60, "the verification of the pushed configuration")

        # an energy recommendation applied: its verification says time and energy
        p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--objective", "energy", "--apply", "--json",
                    cwd=elsewhere)
        assert p.returncode == 0, p.stderr
        pushed = json.loads(p.stdout)
        cid = pushed["applied"]["config_id"]
        st = c.wait_for(lambda st: any(x["config_id"] == cid and x["state"] in
                                       ("verified", "unconfirmed", "off")
                                       for x in st["recommendations"]),
                        60, "the verification of the energy recommendation")
        (row,) = [x for x in st["recommendations"] if x["config_id"] == cid]
        assert row["objective"] == "energy" and row["verified_energy_j"] > 0, row
        assert row["predicted_energy_j"] == pushed["energy_j"]
        assert re.match(r"time ([+-]\d+\.\d %|off by).*; energy ([+-]\d+\.\d %|off by)",
                        row["error"]), row
        # the command waited for that verdict (a few runs of a virtual kernel) and gave it
        v = pushed["applied"]["verification"]
        assert (v["state"], v["error"], pushed["applied"]["verify_runs"]) == (
            row["state"], row["error"], 2), pushed["applied"]  # the cluster's verify_reps
        # ...and says it as the status does (it said "pushed ...; 'opptune status' shows its
        # verification", the verdict in --json alone)
        p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--objective", "time", "--apply", cwd=elsewhere)
        assert p.returncode == 0, p.stderr
        text = " ".join(p.stdout.split())
        assert re.search(r"cfg-\w+ on test-agent: (verified|unconfirmed|off) \(.+\); measured "
                         r"[0-9.]+ s$", text), text
        assert re.search(r"waiting for its verification \(the agent runs pi_integrate 2 times "
                         r"at it, about [0-9.]+ m?s by the prediction\)", p.stderr), p.stderr

        # wrong input: one line, exit 2, nothing pushed
        n_recs = len(c.status()["recommendations"])
        base = ["--daemon", c.endpoint, "--agent", "test-agent", "--workload", "pi_integrate"]
        one_line(opptune("recommend", *base, "--objective", "speed", cwd=elsewhere), 2,
                 "unknown objective 'speed'", "time, energy, edp, ed2p")
        one_line(opptune("recommend", *base, "--deadline", "soon", "--apply", cwd=elsewhere),
                 2, "cannot read the deadline 'soon'", "2.5s")
        one_line(opptune("recommend", "--daemon", c.endpoint, "--agent", "nobody",
                         "--workload", "pi_integrate", cwd=elsewhere), 2,
                 "no agent 'nobody'", "test-agent")
        one_line(opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent",
                         "--workload", "triad", "--objective", "energy", cwd=elsewhere), 2,
                 "no measurements of triad", "opptune sweep")
        one_line(opptune("recommend", *base, "--cluster", "5", cwd=elsewhere), 2,
                 "has no cluster 5", "its clusters are 0, 1")
        one_line(opptune("tune", *base, "--budget", "0", cwd=elsewhere), 2, "--budget")
        one_line(opptune("tune", *base, "--cluster", "7", cwd=elsewhere), 2,
                 "--cluster must be 0..1")
        assert len(c.status()["recommendations"]) == n_recs

        # a process on a virtual board: the agent refuses it at once, and the command says so
        # (it printed "pushed ... 'opptune status' shows its verification" and exited 0)
        p = opptune("recommend", *base, "--pid", str(os.getpid()), cwd=elsewhere)
        assert p.returncode == 1, p.stdout + p.stderr
        text = " ".join(p.stdout.split())
        assert "pushed to" not in text
        assert re.search(r"refused by test-agent \(cfg-\w+\): a pid target needs a real board",
                         text), text
        p = opptune("recommend", *base, "--pid", str(os.getpid()), "--json", cwd=elsewhere)
        assert p.returncode == 1, p.stderr
        applied = json.loads(p.stdout)["applied"]
        assert applied["state"] == "refused" and "needs a real board" in applied["reason"]

        # the agent gone: --apply stores it unsent, and says so rather than "pushed"
        c.kill("agent")
        apply = [*base, "--objective", "time", "--apply"]
        # (asked before the daemon sees it go, --apply pushes and waits for a verdict)
        wait_until(lambda: not any(a["alive"] for a in c.status()["agents"]),
                   "the daemon to see the agent go")
        assert json.loads(opptune("recommend", *apply, "--json", cwd=elsewhere)
                          .stdout)["applied"]["state"] == "unsent"
        p = opptune("recommend", *apply, cwd=elsewhere)
        assert p.returncode == 0, p.stderr
        text = " ".join(p.stdout.split())
        assert "pushed to" not in text
        assert re.search(r"not sent: stored for test-agent as cfg-\w+ \(unsent\); test-agent "
                         r"is not connected: it is sent when test-agent says hello again", text)
        # for a running process it is never sent later, and the line says so (the reason
        # was dropped from the answer, and the line above was printed instead)
        p = opptune("recommend", *apply, "--pid", "1", cwd=elsewhere)
        assert p.returncode == 0, p.stderr
        text = " ".join(p.stdout.split())
        assert "it is sent when" not in text
        assert re.search(r"cfg-\w+ for test-agent: not sent: the agent was not reachable; a "
                         r"configuration for a running process is not sent later, apply it "
                         r"again", text), text
    finally:
        c.stop()


def test_tune_with_a_budget_ends_with_a_verdict(tmp_path):
    c = start(tmp_path, kernels=("pi_integrate",))
    try:
        proc = opptune("tune", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                       "pi_integrate", "--objective", "edp", "--cluster", "1", "--budget", "3",
                       cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr + c.logs()
        assert "measured 3 of 76 configurations" in proc.stdout
        assert "budget of 3 configurations is spent" in proc.stdout
        assert "cluster 1" in proc.stdout and "done: applied and " in proc.stdout
        assert "3 of 3 (budget) configurations" in proc.stderr  # the progress display
    finally:
        c.stop()


def test_tune_fails_with_the_reason_when_the_agent_is_gone(tmp_path):
    c = start(tmp_path, kernels=("pi_integrate",))
    try:
        proc = tune_in_background(c, tmp_path)
        # the session has sent its first configuration: the agent stops answering (alive for
        # agent_timeout_s more, then gone); frozen before, the tune would be refused at start
        c.wait_for(lambda s: bool(s["jobs"]), 60, "the tune session's first job")
        c.agent.send_signal(signal.SIGSTOP)
        out, err = proc.communicate(timeout=120)
        proc = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("opptune tune: tune-") and "agent test-agent is gone" in last
        assert "failed: agent test-agent is gone" in proc.stdout
    finally:
        if c.agent is not None and c.agent.poll() is None:
            os.kill(c.agent.pid, signal.SIGCONT)
        c.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_following_and_says_what_goes_on_in_the_daemon(tmp_path, sig):
    # Ctrl-C on tune (or sweep --wait) exited 130 without a word, while the tune went on in
    # the daemon and applied a configuration to the board later. SIGTERM (timeout(1), a
    # service manager) still did so, exit 143: it now says the same, as Ctrl-C does
    c = start(tmp_path, kernels=("pi_integrate",))
    try:
        for argv, size, needle in (
                (["tune", "--agent", "test-agent", "--workload", "pi_integrate",
                  "--objective", "energy", "--no-progress"], "small",
                 r"opptune tune: stopped following (tune-\w+); the session goes on in the "
                 r"daemon \(it measures, recommends and applies on its own\); 'opptune status' "
                 r"lists it under 'tune sessions \(open\)' until it ends; 'opptune tune "
                 r"--follow \1' follows it again, 'opptune tune --stop \1' ends it"),
                (["sweep", "--agent", "test-agent", "--size", "large", "--wait"], "large",
                 r"opptune sweep: stopped waiting; the jobs go on in the daemon: job-\w+; "
                 r"'opptune status' follows them")):
            proc = subprocess.Popen([OPPTUNE, *argv, "--daemon", c.endpoint],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    cwd=tmp_path)
            # a run received: the command follows (the tune's session goes on making jobs)
            c.wait_for(lambda s: any(j["size"] == size and j["received"] > 0
                                     for j in s["jobs"]), 60, f"a run of {argv[0]}")
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 128 + sig, out + err
            assert "Traceback" not in err
            assert re.search(needle, " ".join(err.split())), err
            # its own line says it: no generic 'stopped by ... before it finished' after it
            assert "before it finished" not in err, err
            if argv[0] == "tune":
                # what the message says is so: status lists the session it names
                tune_id = re.search(r"tune-\w+", err).group(0)
                p = opptune("status", "--daemon", c.endpoint, cwd=tmp_path)
                assert p.returncode == 0, p.stdout + p.stderr
                table = p.stdout.split("tune sessions (open)")[1]
                assert tune_id in table and "pi_integrate (small)" in table, p.stdout
                p = opptune("status", "--daemon", c.endpoint, "--json", cwd=tmp_path)
                tunes = json.loads(p.stdout)["tunes"]
                assert [t["tune_id"] for t in tunes] == [tune_id]
                assert tunes[0]["agent"] == "test-agent" and tunes[0]["state"] in (
                    "measuring", "verifying")
    finally:
        c.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_recommend_applys_wait_says_the_push_stands(tmp_path, sig):
    # Ctrl-C (or SIGTERM) while recommend --apply waited for the verification stopped the
    # waiting, then printed the recommendation and exited 0, as if nothing were interrupted
    # and without a word on the board, which goes on at the configuration pushed
    c = start(tmp_path, kernels=("pi_integrate",))
    try:
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--reps", "1",
                    "--wait", cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        # a long job holds the agent: the verification waits behind it
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--size",
                    "large", cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        c.wait_for(lambda s: any(j["size"] == "large" and j["received"] > 0
                                 for j in s["jobs"]), 60, "a run of the large sweep")
        proc = subprocess.Popen([OPPTUNE, "recommend", "--daemon", c.endpoint, "--agent",
                                 "test-agent", "--workload", "pi_integrate", "--size", "small",
                                 "--apply"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path)
        said = []
        for line in proc.stderr:  # the command waits from this line on
            said.append(line)
            if "waiting for its verification" in line:
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        err = "".join(said) + err
        assert proc.returncode == 128 + sig, out + err
        assert "Traceback" not in err
        cid = re.search(r"(cfg-\w+) pushed to test-agent; waiting", err).group(1)
        assert (f"opptune recommend: stopped waiting for the verification of {cid}; it stays "
                "pushed to test-agent, which applies it, verifies it and keeps it in force "
                "until another applied configuration replaces it; 'opptune status --agent "
                "test-agent' shows its verdict") in " ".join(err.split()), err
        # the recommendation itself is printed: what was pushed
        assert f"pushed to test-agent as {cid}" in " ".join(out.split()), out
        # what the line says is so: the push stands in the daemon
        (row,) = [r for r in c.status()["recommendations"] if r["config_id"] == cid]
        assert row["state"] in ("pushed", "applied", "verified", "unconfirmed", "off"), row
    finally:
        c.stop()


def test_a_second_tune_of_one_agent_is_refused_naming_the_open_one(tmp_path):
    # two sessions on one board each set its cores and clocks under the other's runs: the
    # second was started all the same. The rule is per agent (one board, one clock), so
    # another workload is refused too
    c = start(tmp_path)
    try:
        first = tune_in_background(c, tmp_path)
        c.wait_for(lambda s: bool(s["jobs"]), 60, "the tune session's first job")
        tunes = json.loads(opptune("status", "--daemon", c.endpoint, "--json",
                                   cwd=tmp_path).stdout)["tunes"]
        assert len(tunes) == 1, tunes
        p = opptune("tune", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "triad", "--objective", "time", cwd=tmp_path)
        one_line(p, 1, f"agent 'test-agent' has a tune session open: {tunes[0]['tune_id']} "
                       "(pi_integrate (small), ", " UTC)", "'opptune status' shows it",
                 "agent_timeout_s")
        p = opptune("tune", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--objective", "time", "--json", cwd=tmp_path)
        one_line(p, 1, tunes[0]["tune_id"])
        # the first goes on to its end, untouched by the refusals; then a tune is taken again
        out, err = first.communicate(timeout=240)
        assert first.returncode == 0, out + err + c.logs()
        assert json.loads(opptune("status", "--daemon", c.endpoint, "--json",
                                  cwd=tmp_path).stdout)["tunes"] == []
        p = opptune("tune", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "triad", "--objective", "time", "--cluster", "1", "--budget", "3",
                    "--no-progress", cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        c.stop()
