"""MPET scenarios (b) and (c) and external workloads against a real daemon and a real agent on
this machine: ``opptune characterize`` runs four bench_suite kernels and a command workload (an
external program told the core count through OMP_NUM_THREADS and {threads}); ``opptune predict
--workload A --on P`` predicts A's scaling from its 1-core runs (scenario b), ``--set`` /
``--edits`` predict a virtual workload (scenario c); the command's MPET parameters are invalid
and only its q and t1 can be edited; bad input is one line and exit 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import msgpack
import pytest

from procs import Cluster

pytestmark = pytest.mark.integration

KERNELS = ("locked_update", "pi_integrate", "shared_queue", "triad")
# an "OpenMP binary": spins for 0.15 s of CPU over OMP_NUM_THREADS processes and notes what the
# agent told it (the thread variable, the {threads} argument, the cpus it may run on)
SCRIPT = ("import os,sys,time,multiprocessing as mp\n"
          "def spin(s):\n"
          "    end = time.process_time() + s\n"
          "    while time.process_time() < end: pass\n"
          "n = int(os.environ['OMP_NUM_THREADS'])\n"
          "with open(sys.argv[2], 'a') as fh:\n"
          "    fh.write(f\"{n} {sys.argv[1]} {len(os.sched_getaffinity(0))} {sys.argv[3]}\\n\")\n"
          "ps = [mp.Process(target=spin, args=(0.15 / n,)) for _ in range(n)]\n"
          "[p.start() for p in ps]; [p.join() for p in ps]\n")


def opptune(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scen")
    c = Cluster(tmp, kernels=KERNELS, auto_sweep=False, size="small", reps=1, max_cores=2)
    mark = tmp / "omp.txt"
    (tmp / "omp.py").write_text(SCRIPT)
    with c.agent_toml.open("a") as fh:
        fh.write("\n[[workloads]]\nname = \"omp_like\"\n"
                 f"command = {json.dumps([sys.executable, str(tmp / 'omp.py'), '{threads}', str(mark), '{size}'])}\n"
                 "sizes = [\"default\"]\n")
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        p = opptune("characterize", "--daemon", c.endpoint, "--agent", "test-agent", "--size",
                    "small", "--reps", "1", "--wait", "--json")
        assert p.returncode == 0, p.stderr + c.logs()
        c.characterized = json.loads(p.stdout)
        c.mark = mark
        yield c
    finally:
        c.stop()


def predict(c: Cluster, *argv: str) -> subprocess.CompletedProcess:
    return opptune("predict", "--daemon", c.endpoint, *argv)


def predict_json(c: Cluster, *argv: str) -> dict:
    p = predict(c, *argv, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_characterize_includes_the_command_workload(cluster):
    data = cluster.characterized
    assert data["kernels"] == list(KERNELS) and data["commands"] == ["omp_like"]
    # the command has no "small": it runs at its own size
    assert data["command_sizes"] == {"omp_like": "default"}
    assert sorted((j["workload"], j["state"]) for j in data["jobs"]) == \
        sorted((w, "done") for w in (*KERNELS, "omp_like"))
    # every run (the sweep's, and the daemon's verification of its recommendation) got the
    # core count as OMP_NUM_THREADS and {threads}, on that many cpus
    lines = [ln.split() for ln in cluster.mark.read_text().splitlines()]
    assert {int(ln[0]) for ln in lines} == {1, 2}
    assert all(ln[0] == ln[1] == ln[2] and ln[3] == "default" for ln in lines), lines
    # its runs carry no MPET parameters, marked invalid (not zero); the kernels' carry them
    recs = {w: [json.loads(t) if m is None else msgpack.unpackb(m) for t, m in cluster.rows(
        "SELECT record, record_msgpack FROM runs WHERE workload=? AND ok=1 "
        "AND job_id IN (SELECT job_id FROM jobs)", w)]
        for w in ("omp_like", "triad")}
    assert len(recs["omp_like"]) == 2
    for r in recs["omp_like"]:
        assert "mpet" not in r["extra"] and "no runtime accounting" in r["invalid"]["mpet"]
    assert all(set(r["extra"]["mpet"]) >= {"exec_s", "l", "w"} for r in recs["triad"])


def test_scenario_b_scaling_from_the_one_core_run(cluster):
    out = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent")
    assert out["scenario"].startswith("b ") and out["edits"] == []
    rows = out["prediction"]
    assert [r["n"] for r in rows] == [1, 2]
    for r in rows:
        assert 0 < r["lower_s"] <= r["time_s"] <= r["upper_s"]
    # the interval is calibrated on the four other workloads measured on 1 and 2 cores, each
    # predicted from its own 1-core run: one factor either way at every n
    assert out["interval_calibrated_on"] == 4 and out["interval_level"] == pytest.approx(0.8)
    f = rows[0]["upper_s"] / rows[0]["time_s"]
    assert all(r["lower_s"] == pytest.approx(r["time_s"] / f, rel=1e-9) and
               r["upper_s"] == pytest.approx(r["time_s"] * f, rel=1e-9) for r in rows)
    # t(1) is the measured one; t(2), not used, is there to compare
    assert rows[0]["measured_s"] is None and rows[1]["measured_s"] > 0
    cands = out["candidates"]["sc"]
    assert {c["workload"] for c in cands} == {"pi_integrate", "shared_queue", "triad",
                                              "omp_like"}
    assert all(0 <= c["d_a"] <= 1 for c in cands)
    # scenario (b): its own t(1), scaling rated by D_a over sc (eq. 16)
    assert out["method"] == {"t1_basis": "measured", "sc_basis": "sc", "sc_choice": None,
                             "suite_considered": None, "suite_measured": None}

    p = predict(cluster, "--workload", "locked_update", "--on", "test-agent")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("locked_update: on ") and "scenario b (scalability" in lines[0]
    assert lines[1].split() == ["n", "t(n)", "s", "interval", "s", "measured", "s"]
    assert [ln.split()[0] for ln in lines[2:4]] == ["1", "2"]
    assert lines[4].startswith(f"interval: t(n) times or divided by {f:.3g}: the largest "
                               f"error at any n of the same prediction for each of the 4 "
                               f"other workloads measured on {out['board']} at more than one "
                               f"core (each from its own 1-core runs); ")
    assert lines[4].endswith("with probability 80 %")
    op = out["operating_point"]
    assert lines[5] == (f"cores: {op['cores']} ({op['time_s']:.4g} s), the fewest within 5 % of "
                        f"the fastest predicted ({op['fastest_cores']} "
                        f"{'core' if op['fastest_cores'] == 1 else 'cores'}, "
                        f"{op['fastest_s']:.4g} s)")
    # the n = 1 row is the fitted curve's (walkb: it read 0.1396 s where "t(1) measured" was
    # 0.1417 s): the line says both where they differ
    gap = rows[0]["time_s"] / out["t1_s"] - 1
    assert lines[6] == ("method: t(1) measured (its own 1-core runs), scaling by sc"
                        if abs(gap) < 5e-4 else
                        f"method: t(1) measured ({out['t1_s']:.4g} s, its own 1-core runs; "
                        f"the n = 1 row is the fitted curve's, {100 * gap:+.1f} %: its lines "
                        f"pass near R(1) = U(1) = 1, not through it), scaling by sc"), lines[6]
    # on P every candidate is on P: D_a and the weight only (docs/mpet.md)
    assert lines[7] == "scaling candidates (platform, workload: D_a, weight):"
    # the candidates' platform by its board's name, as the first line names it (not its id)
    assert lines[8].startswith(f"  {out['board']}, "), lines[8]

    # the command workload (no runtime parameters) is predicted from its cpu-time ratio
    ext = predict_json(cluster, "--workload", "omp_like", "--on", "test-agent")
    assert all(math.isfinite(r["time_s"]) and r["time_s"] > 0 for r in ext["prediction"])


def test_scenario_c_edited_lock_wait_moves_the_prediction(cluster, tmp_path):
    data = json.loads(subprocess.run(
        [sys.executable, "-c", "import json,sys; from opptune.daemon.client import query; "
         f"print(json.dumps(query({cluster.endpoint!r}, 'mpet_data', {{}})))"],
        capture_output=True, text=True, check=True).stdout)
    (prof,) = [p for p in data["profiles"] if p["workload"] == "locked_update"]
    # R(2) = exec_s(2) / t(1), derived by the daemon (a parallel run cannot know t(1))
    assert prof["params"]["2"]["R"] > 0 and prof["params"]["1"]["R"] > 0
    assert prof["params"]["2"]["l"] >= 0  # lock wait recorded (test_bench_suite: it contends)

    # the lock wait set outright, so that the test does not depend on how much this run of one
    # small repetition happened to contend (on a busy machine its two threads may never meet):
    # none, a quarter and half of what the other parameters leave of U(2)
    p2 = prof["params"]["2"]
    room = 1 - sum(p2[k] for k in ("w", "c", "d", "s", "j"))
    f = f"{room / 2:.4f}"
    base = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent", "--set",
                        "l=1x")
    more = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent", "--set",
                        f"l={f}")
    mid = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent", "--set",
                       f"l={room / 4:.4f}")
    less = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent", "--set",
                        "l=0")
    assert more["scenario"].startswith("c ") and more["edits"] == [f"l={float(f):g}"]
    s, h, m = (o["prediction"][1] for o in (less, mid, more))
    assert s["time_s"] < h["time_s"] < m["time_s"]
    b = base["prediction"][1]
    assert m["unedited_s"] == pytest.approx(b["time_s"])
    half = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent", "--set",
                        "t1=0.5x")
    assert [r["time_s"] for r in half["prediction"]] == \
        pytest.approx([r["time_s"] / 2 for r in base["prediction"]])

    edits = tmp_path / "edits.json"
    edits.write_text(json.dumps({"l": f}))
    same = predict_json(cluster, "--workload", "locked_update", "--on", "test-agent", "--edits",
                        str(edits))
    assert same["prediction"] == more["prediction"]

    p = predict(cluster, "--workload", "locked_update", "--on", "test-agent", "--set", "l=0x")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1] == "edits: l=0x"
    assert lines[2].split() == ["n", "t(n)", "s", "interval", "s", "unedited", "s"]

    # the external command: q (its cpu-time ratio) can be edited, its runtime parameters not
    ext = predict_json(cluster, "--workload", "omp_like", "--on", "test-agent", "--set", "q=2x")
    assert ext["scenario"].startswith("c ")
    assert ext["prediction"][1]["time_s"] == pytest.approx(2 * ext["prediction"][1]["unedited_s"])


@pytest.mark.parametrize("argv, msg", [
    (("--workload", "locked_update", "--on", "test-agent", "--set", "lock=2x"),
     "opptune predict: --set 'lock=2x': unknown parameter 'lock'; editable: R, l, w, c, d, s, "
     "j, q, t1"),
    (("--workload", "locked_update", "--on", "test-agent", "--set", "l=two"),
     "opptune predict: --set 'l=two': give a number, or a factor like 2x (>= 0)"),
    (("--workload", "omp_like", "--on", "test-agent", "--set", "l=2x"),
     "opptune predict: --set l=2x: this profile has no runtime parameters (an external "
     "command"),
    (("--workload", "locked_update", "--on", "test-agent", "--set", "w=1.5"),
     "opptune predict: the edits leave no useful time at n = 1"),
    (("--workload", "locked_update", "--on", "test-agent", "--from", "test-agent"),
     "opptune predict: give either --on P (scaling on the measured platform) or --from P"),
    (("--on", "test-agent"), "opptune predict: MPET scaling needs --workload too"),
    (("--workload", "fft", "--on", "test-agent"),
     "opptune predict: workload 'fft' is not measured on test-agent: it has locked_update, "
     "omp_like, pi_integrate, shared_queue, triad"),
    (("--workload", "triad", "--on", "nowhere"),
     "opptune predict: --on 'nowhere' is no platform with measurements"),
    (("--workload", "triad", "--on", "test-agent", "--edits", "/nonexistent/e.json"),
     "opptune predict: --edits /nonexistent/e.json: cannot open it (no such file or "
     "directory)"),
])
def test_bad_input_is_one_line(cluster, argv, msg):
    p = predict(cluster, *argv)
    assert p.returncode == 2 and p.stdout == "", p.stdout
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(msg), line


def test_eval_mpet_over_the_store(cluster, tmp_path):
    ep = cluster.endpoint
    saved = tmp_path / "store.csv"
    p = opptune("eval-mpet", "--daemon", ep, "--save-csv", str(saved))
    # one platform: nothing to evaluate, but what it holds is written
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == (f"opptune eval-mpet: store of {ep}: no workload is measured on "
                                f"two platforms that share another workload (it holds 1 "
                                f"platform); nothing to evaluate: add another platform's "
                                f"measurements (--combine evaluates several --data files and "
                                f"the store as one database)")
    import csv
    rows = list(csv.DictReader(saved.open()))
    assert sorted((r["workload"], r["cores"]) for r in rows) == \
        sorted((w, n) for w in (*KERNELS, "omp_like") for n in ("1", "2"))
    assert all(r["R"] == "" for r in rows if r["workload"] == "omp_like")
    assert all(float(r["R"]) > 0 for r in rows if r["workload"] != "omp_like")
    p = opptune("eval-mpet", "--daemon", ep, "--save-csv", str(tmp_path / "no" / "x.csv"))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == (f"opptune eval-mpet: --save-csv {tmp_path / 'no' / 'x.csv'}: "
                                "cannot write: No such file or directory")

    board = str(__import__("pathlib").Path(__file__).resolve().parents[1]
                / "data/bench_suite_rpi4/data.csv")
    p = opptune("eval-mpet", "--daemon", ep, "--combine", "--data", board, "--json")
    assert p.returncode == 0, p.stderr
    (res,) = json.loads(p.stdout)["results"]
    assert res["platforms"] == 2 and res["data"] == f"store of {ep} + {board}"
    assert res["predictions"] == 2 * len(KERNELS)  # each kernel on each, from the other
