"""opptune fit / predict / eval on a small CSV."""

import argparse
import json

import numpy as np
import pytest

from opptune.daemon.fit_cli import add_parsers
from opptune.daemon.models.memwall import speedup


def run(argv):
    ap = argparse.ArgumentParser()
    add_parsers(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return args.func(args)


def small_csv(tmp_path):
    lines = ["platform,workload,input,variant,cores,freq_mhz,rep,time_s"]
    rng = np.random.default_rng(0)
    for f in (1000, 1500, 2000):
        for p in (1, 2, 3, 4, 6, 8):
            for rep in range(2):
                t = (4 + 12000 / f) / speedup(0.95, 1.0, 0.02, 0.1, p, f / 1000)
                lines.append(f"board,kern,,v,{p},{f},{rep},{t * np.exp(rng.normal(0, 0.003)):.6f}")
    path = tmp_path / "d.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fit_save_predict_round_trip(tmp_path, capsys):
    data, fit = small_csv(tmp_path), tmp_path / "fit.json"
    assert run(["fit", "--data", str(data), "--json", "--save", str(fit)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[0]["group"] == "board/kern/v" and out[0]["model"] in ("amdahl", "usl", "memwall", "combo")
    assert out[0]["quality"]["mape"] < 2
    assert run(["predict", "--fit", str(fit), "--cores", "1,8", "--freq", "1000,2000", "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)
    assert len(preds) == 4
    for r in preds:
        truth = (4 + 12000 / r["freq_mhz"]) / speedup(0.95, 1.0, 0.02, 0.1, r["cores"], r["freq_mhz"] / 1000)
        assert abs(r["time_s"] / truth - 1) < 0.03
        assert r["lower"] <= r["time_s"] <= r["upper"]


def test_fit_named_model_and_bad_csv(tmp_path, capsys):
    data = small_csv(tmp_path)
    assert run(["fit", "--data", str(data), "--model", "amdahl", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["model"] == "amdahl"
    bad = tmp_path / "bad.csv"
    bad.write_text("platform,cores\nx,1\n")
    assert run(["fit", "--data", str(bad)]) == 2
    assert "missing column" in capsys.readouterr().err


def test_eval_writes_records_and_plot(tmp_path, capsys):
    data, out = small_csv(tmp_path), tmp_path / "ev"
    rc = run(["eval", "--data", str(data), "--train-sizes", "4,8", "--reps", "2", "--seed", "1",
              "--models", "amdahl,memwall", "--out", str(out)])
    assert rc == 0
    recs = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert len(recs) == 2 * 2 * 2
    assert {r["model"] for r in recs} == {"amdahl", "memwall"}
    assert all(r["n_test"] == 18 - r["size"] for r in recs)
    ok = [r for r in recs if "mape" in r and r["size"] == 8]
    assert ok and min(r["mape"] for r in ok) < 5
    assert (out / "eval.png").stat().st_size > 1000


def test_relative_time_from_speedup_fills_only_missing_times():
    import numpy as np
    from opptune.daemon.fit_cli import relative_time_from_speedup
    from opptune.daemon.models.base import Observations
    obs = Observations(cores=[1.0, 2.0, 4.0], time_s=[np.nan, np.nan, 3.0],
                       counters={"speedup": np.array([1.0, 1.6, 2.5])})
    out = relative_time_from_speedup(obs)
    assert np.allclose(out.time_s, [1.0, 1 / 1.6, 3.0])
    assert np.isnan(obs.time_s[0])          # the input is not modified


def test_empty_selection_is_an_error_that_says_why(tmp_path, capsys):
    data, fit = small_csv(tmp_path), tmp_path / "fit.json"
    header_only = tmp_path / "header.csv"
    header_only.write_text("platform,workload,input,variant,cores,freq_mhz,rep,time_s\n")
    for cmd in ("fit", "eval"):
        assert run([cmd, "--data", str(header_only)]) == 2
        assert "no data rows after the header line" in capsys.readouterr().err
    assert run(["eval", "--data", str(data), "--group", "nope", "--train-sizes", "4"]) == 2
    assert "no group of" in (err := capsys.readouterr().err) and "board/kern/v" in err
    assert run(["fit", "--data", str(data), "--model", "amdahl", "--save", str(fit)]) == 0
    capsys.readouterr()
    assert run(["predict", "--fit", str(fit), "--cores", "4", "--group", "nope"]) == 1
    assert "no fitted group contains 'nope'; fitted groups: board/kern/v" in capsys.readouterr().err
    one = tmp_path / "one.csv"
    one.write_text("platform,workload,input,variant,cores,freq_mhz,rep,time_s\nb,w,,,1,1000,0,2\n")
    assert run(["fit", "--data", str(one), "--save", str(fit), "--json"]) == 1   # nothing fitted
    assert "need at least 2 valid measurements" in json.loads(capsys.readouterr().out)[0]["error"]
    assert run(["predict", "--fit", str(fit), "--cores", "4"]) == 1
    assert "holds no successful fit" in capsys.readouterr().err


def test_eval_and_predict_reject_impossible_requests(tmp_path, capsys):
    data, fit = small_csv(tmp_path), tmp_path / "fit.json"
    assert run(["eval", "--data", str(data), "--train-sizes", "18,40", "--models", "amdahl"]) == 2
    assert "the largest group has 18 configurations" in capsys.readouterr().err
    assert run(["eval", "--data", str(data), "--train-sizes", "1", "--reps", "2",
                "--models", "amdahl"]) == 1
    assert "no fit succeeded (2 tried)" in capsys.readouterr().err
    assert run(["fit", "--data", str(data), "--model", "amdahl", "--save", str(fit)]) == 0
    capsys.readouterr()
    for extra, needle in ((["--cores", "0,4"], "--cores needs comma-separated whole numbers"),
                          (["--cores", "4", "--freq", "-1000"], "--freq needs comma-separated numbers > 0")):
        assert run(["predict", "--fit", str(fit), *extra]) == 2
        assert needle in capsys.readouterr().err


def test_power_model_fitted_alongside_gives_energy_and_edp(tmp_path, capsys):
    # P = 1.5 W static + p (0.2 + 0.3 f)^2 f (f in GHz), energy_j = P t in the CSV: the fit
    # carries the power model, and predict gives P, E = P t and EDP = E t at unseen points
    def power(p, f):
        return 1.5 + p * (0.2 + 0.3 * f / 1000) ** 2 * f / 1000

    def time_s(p, f):
        return (4 + 12000 / f) / speedup(0.95, 1.0, 0.02, 0.1, p, f / 1000)

    lines = ["platform,workload,input,variant,cores,freq_mhz,rep,time_s,energy_j"]
    for f in (1000, 1500, 2000):
        for p in (1, 2, 3, 4, 6, 8):
            lines.append(f"board,kern,,v,{p},{f},0,{time_s(p, f):.6f},"
                         f"{power(p, f) * time_s(p, f):.6f}")
    data, fit = tmp_path / "e.csv", tmp_path / "fit.json"
    data.write_text("\n".join(lines) + "\n")
    assert run(["fit", "--data", str(data), "--json", "--save", str(fit)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["power"]["form"] == "linear_v" and entry["power"]["quality"]["mape"] < 0.1
    assert entry["power"]["params"]["P_static"] == pytest.approx(1.5, rel=1e-3)
    assert run(["predict", "--fit", str(fit), "--cores", "5", "--freq", "1200,1800",
                "--json"]) == 0
    for r in json.loads(capsys.readouterr().out):
        p, f = r["cores"], r["freq_mhz"]
        assert r["power_w"]["value"] == pytest.approx(power(p, f), rel=1e-3)
        assert r["energy_j"]["value"] == pytest.approx(r["power_w"]["value"] * r["time_s"])
        assert r["edp"]["value"] == pytest.approx(r["energy_j"]["value"] * r["time_s"])
        assert r["energy_j"]["lower"] <= r["energy_j"]["value"] <= r["energy_j"]["upper"]
    assert run(["predict", "--fit", str(fit), "--cores", "5", "--freq", "1200"]) == 0
    assert "energy" in capsys.readouterr().out                 # the table shows it too
    # without energy columns: no power entry, no energy columns
    assert run(["fit", "--data", str(small_csv(tmp_path)), "--json"]) == 0
    assert "power" not in json.loads(capsys.readouterr().out)[0]
