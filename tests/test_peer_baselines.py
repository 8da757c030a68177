"""benchmarks/peer_baselines.py: the daemon's choice beside every peer, per split."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = [sys.executable, "benchmarks/peer_baselines.py"]
SMALL = "minibude_tx2_smt-extrapolate-cores.json"  # 3 evaluations: a few seconds


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BENCH, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_default_prints_one_opptune_row_beside_every_peer():
    out = _run("--files", SMALL)
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("### Summary")[0]
    rows = [ln.split("|")[1].strip() for ln in table.splitlines()
            if ln.startswith("| ") and not ln.startswith("| method")]
    peers = json.loads((ROOT / "data/peer-baselines" / SMALL).read_text())["summary"]
    assert rows[0] == "opptune" and sorted(rows[1:]) == sorted(peers)
    assert "auto" not in rows and "amdahl" in rows  # peers only; no opptune variant by default
    head = next(ln for ln in table.splitlines() if ln.startswith("| method"))
    for col in ("pooled MAPE", "median APE", "max APE", "coverage", "fit time"):
        assert col in head
    summary = out.stdout.split("### Summary")[1]
    line = next(ln for ln in summary.splitlines() if ln.startswith("| minibude"))
    assert line.rstrip().endswith("|") and ("ok (" in line or "behind (" in line)
    cov = line.split("|")[4].strip()      # "96% (26/27)": the share with its counts
    k, n = map(int, cov.split("(")[1].rstrip(")").split("/"))
    assert n > 0 and cov.startswith(f"{100 * k / n:.0f}%")


def test_json_reports_the_metrics_and_the_daemons_choice():
    out = _run("--files", SMALL, "--json", "--models", "opptune,amdahl")
    assert out.returncode == 0, out.stderr
    (r,) = [json.loads(ln) for ln in out.stdout.splitlines()]
    ours = r["ours"]["opptune"]
    assert ours["n_fits"] == 3 and 0 <= ours["coverage"] <= 100
    assert ours["points"] > 0 and ours["coverage"] == 100 * ours["inside"] / ours["points"]
    assert ours["median_ape"] <= ours["mape"] <= ours["max_ape"]
    assert ours["fit_s_median"] <= ours["fit_s_max"]
    assert r["ours"]["amdahl"]["chosen"] == {"amdahl": 3}
    assert r["best_peer"]["name"] in r["peers"]


def test_unknown_model_or_file_is_one_line_and_exit_2():
    bad = _run("--models", "opptune,nosuch")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "nosuch" in bad.stderr and "Traceback" not in bad.stderr
    none = _run("--files", "nothing-*.json")
    assert none.returncode == 2 and "nothing-*.json" in none.stderr and none.stderr.count("\n") == 1


def test_prior_check_reports_each_source_on_the_one_core_count_evaluations():
    out = _run("--files", "loghin*", "--prior", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["loghin_multicore_energy-extrapolate-cores.json"]
    by = {r["source"]: r for r in rows}
    assert set(by) == {"platform", "default", "similar"}
    assert all(r["evals"] == 7 and r["median_ape"] <= r["max_ape"] for r in rows)
    assert by["platform"]["used"] == ["the curves of 27 other workloads on this platform"]
    assert all(u.startswith("this workload's curve on") for u in by["default"]["used"])
    assert all("nearest by MPET distance" in u for u in by["similar"]["used"])


def test_own_runs_of_the_16_core_machine_extrapolated_from_half_its_cores():
    """benchmarks/extrapolate_own_runs.py: the daemon's choice against Amdahl and USL on
    opptune's own runs of the lent 16-core machine, trained on 1..8 cores (docs/models.md)."""
    out = subprocess.run([sys.executable, "benchmarks/extrapolate_own_runs.py"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "13 kernels with 1..16 cores, trained on 1..8" in lines[0]
    mape = {ln.split()[0]: float(ln.split()[3]) for ln in lines if "pooled MAPE" in ln}
    assert set(mape) == {"opptune", "amdahl", "usl"}
    assert mape["opptune"] < min(mape["amdahl"], mape["usl"]), out.stdout
    cover = next(ln for ln in lines if ln.startswith("opptune"))
    assert "90 % interval coverage" in cover
