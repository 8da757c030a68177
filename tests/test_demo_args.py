"""``opptune demo`` refuses bad options at once: one line naming the valid values, exit 2,
no directory made and no daemon or agent started."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from opptune.agent.virtual_board import BOARDS, SIZES
from opptune.bench_suite import KERNELS
from opptune.daemon.cli import build_parser
from opptune.daemon.demo import check_args


ALL_KERNELS = ", ".join(sorted(KERNELS))


def _demo(tmp_path, *extra: str, limit_s: float = 30) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "opptune.daemon.cli", "demo", "--dir",
            str(tmp_path / "demo"), "--no-progress", "--timeout", "20", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=limit_s, cwd=tmp_path)


@pytest.mark.parametrize("extra, said", [
    (["--virtual-board", "nope"],
     "unknown virtual board 'nope'; known boards: odroid-xu4, x86-2numa, rpi4"),
    (["--size", "huge"], "size 'huge' does not exist for pi_integrate, triad, locked_update; "
                         "sizes: small, default"),
    (["--size", "default", "--virtual-board", "rpi4"],
     "size 'default' does not exist on virtual board rpi4; sizes: small, medium, large"),
    (["--reps", "0"], "--reps must be at least 1, got 0"),
    (["--reps", "-3"], "--reps must be at least 1, got -3"),
    (["--warmup", "-1"], "--warmup must be 0 or more, got -1"),
    (["--max-cores", "-2"], "--max-cores must be 0 or more (0 = all cores), got -2"),
    (["--workload", "pi"], f"unknown workload 'pi'; workloads: {ALL_KERNELS}"),
    # were taken and swept the board's 4 (8, this machine's) cores without a word, where
    # 'opptune sweep' refuses them
    (["--max-cores", "9", "--virtual-board", "rpi4"],
     "--max-cores 9 is more than the 4 cpus of virtual board rpi4; use 1..4 (0 = all)"),
    (["--max-cores", "33", "--virtual-board", "x86-2numa"],
     "--max-cores 33 is more than the 32 cpus of virtual board x86-2numa; use 1..32 (0 = all)"),
    (["--max-cores", str(os.cpu_count() + 1)],
     f"--max-cores {os.cpu_count() + 1} is more than the {os.cpu_count()} cpus of this "
     f"machine; use 1..{os.cpu_count()} (0 = all)"),
])
def test_bad_options_are_one_line_and_start_nothing(tmp_path, extra, said):
    proc = _demo(tmp_path, *extra)
    assert proc.returncode == 2
    assert proc.stderr == f"opptune demo: {said}\n"
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # not even the --dir


def test_a_dir_that_cannot_be_made_is_one_line(tmp_path):
    """--dir naming a file (or under one) was a FileExistsError traceback, exit 1."""
    (tmp_path / "afile").write_text("x")
    for where in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        argv = [sys.executable, "-m", "opptune.daemon.cli", "demo", "--dir", str(where),
                "--no-progress", "--virtual-board", "rpi4"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"opptune demo: cannot make --dir {where}: ")
        assert proc.stderr.endswith("; name another directory\n")
        assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert (tmp_path / "afile").read_text() == "x"


def test_help_lists_the_virtual_boards():
    text = " ".join(build_parser()._subparsers._group_actions[0].choices["demo"]
                    .format_help().split())
    assert "one of: " + ", ".join(BOARDS) in text


def _args(*argv: str):
    return build_parser().parse_args(["demo", *argv])


def test_defaults_follow_the_device():
    real = _args()
    assert check_args(real) is None
    # one kernel per behaviour (compute, memory, lock), not the whole suite
    assert real.size == "default" and real.workload == ["pi_integrate", "triad", "locked_update"]
    assert real.warmup == 1
    virtual = _args("--virtual-board", "rpi4")
    assert check_args(virtual) is None
    # the virtual workload models only its own size classes and one model per board
    assert virtual.size == "small" and virtual.size in SIZES
    assert virtual.workload == ["pi_integrate"]
    assert virtual.warmup == 0  # a modelled run has nothing to warm
    named = _args("--virtual-board", "rpi4", "--workload", "triad", "--size", "large",
                  "--warmup", "2")
    assert check_args(named) is None
    assert (named.workload, named.size, named.warmup) == (["triad"], "large", 2)


def test_a_root_demo_sets_run_as_root_only_off_a_virtual_board(tmp_path, monkeypatch, caplog):
    """As root on a virtual board the demo's agent.toml set run_as = "root", and the agent's
    log advised an unprivileged run_as, which a virtual board refuses (walk33)."""
    import logging
    import tomllib

    from opptune.agent.cli import workload_user
    from opptune.daemon.demo import prepare
    from opptune.shared.config import load_agent_config
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for extra, run_as in (((), "root"), (("--virtual-board", "rpi4"), None)):
        args = _args(*extra)
        assert check_args(args) is None
        run_dir = tmp_path / (extra[-1] if extra else "real")
        run_dir.mkdir()
        _, _, agent_toml = prepare(args, run_dir)
        assert tomllib.loads(agent_toml.read_text()).get("run_as") == run_as
    caplog.set_level(logging.INFO, logger="opptune.agent")
    assert workload_user(load_agent_config(agent_toml), "agent.toml") is None
    assert "unprivileged" not in caplog.text and "virtual board" in caplog.text


def test_the_table_says_one_core_not_one_cores():
    from rich.console import Console

    from opptune.daemon.demo import print_table
    w = {"workload": "x", "input": "s", "variant": "", "virtual": False, "points": [],
         "model": "amdahl", "model_params": {}, "model_mape_pct": None, "runners_up": [],
         "recommended_cores": 1, "recommended_cpus": [0], "recommended_freq_khz": None,
         "predicted_time_s": 1.0, "verified_time_s": 1.0, "recommendation_state": "verified",
         "recommendation_error": None}
    console = Console(record=True, width=200)
    print_table([w], console)
    text = console.export_text()
    assert "recommended: 1 core (cpus 0) at governor's choice," in text  # planner.clock_text
    # a virtual board's cpus keep their clock: the demo says what status said, not a governor
    print_table([{**w, "recommended_clock": "the board's fixed clock"}], console)
    assert "recommended: 1 core (cpus 0) at the board's fixed clock," in console.export_text()
    print_table([{**w, "recommended_cores": 2, "recommended_cpus": [0, 1]}], console)
    assert "recommended: 2 cores (cpus 0-1)" in console.export_text()


def test_the_note_on_what_runs_count_comes_once_after_the_tables():
    from rich.console import Console

    from opptune.daemon.demo import RUNS_NOTE, print_table
    w = {"workload": "x", "input": "s", "variant": "", "virtual": False, "points": [
            {"cores": 1, "freq_mhz": None, "median_time_s": 1.0, "speedup": 1.0, "runs": 3}],
         "model": None, "model_params": {}, "model_mape_pct": None, "runners_up": [],
         "recommended_cores": None}
    console = Console(record=True, width=300)
    print_table([w, {**w, "workload": "y"}, {**w, "workload": "z"}], console)
    lines = console.export_text().splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("runs: sweep and verification")]
    assert len(at) == 1 and lines[at[0]] == RUNS_NOTE  # one line, from the left margin
    assert at[0] > max(i for i, line in enumerate(lines) if "recommended: none" in line)


def test_the_table_puts_the_energy_recommendation_beside_the_time_one():
    from rich.console import Console

    from opptune.daemon.demo import print_table
    w = {"workload": "x", "input": "s", "variant": "", "virtual": True, "points": [
            {"cores": 4, "freq_mhz": 800.0, "median_time_s": 0.03, "speedup": 3.0,
             "median_energy_j": 0.016, "runs": 2},
            {"cores": 8, "freq_mhz": 1400.0, "median_time_s": 0.01, "speedup": 7.0,
             "median_energy_j": 0.064, "runs": 2}],
         "model": "amdahl", "model_params": {}, "model_mape_pct": None, "runners_up": [],
         "recommended_cores": 8, "recommended_cpus": list(range(8)),
         "recommended_freq_khz": 1_400_000, "predicted_time_s": 0.01, "verified_time_s": 0.01,
         "recommendation_state": "verified", "recommendation_error": None,
         "energy_recommendation": {
             "cores": 4, "cpus": [0, 1, 2, 3], "cluster": None, "freq_khz": 800_000,
             "energy_j": {"value": 0.016, "lower": 0.015, "upper": 0.017},
             "time_s": {"value": 0.03, "lower": 0.029, "upper": 0.031},
             "energy": "measured", "energy_source": "hwmon-power", "meter": "hwmon-power:x"},
         "energy_recommendation_error": None}
    console = Console(record=True, width=300)
    print_table([w], console)
    text = console.export_text()
    assert ("for minimum energy: 4 cores (cpus 0-3) at 800 MHz, predicted 0.0160 J "
            "(0.0150..0.0170) in 0.0300 s; energy measured: power sensors (hwmon), integrated over "
            "each run; the time "
            "recommendation measured 0.0640 J (4.0x)") in text
    e = {**w["energy_recommendation"], "energy": "modelled",
         "energy_source": "energy-model-estimate", "meter": "energy-model-estimate"}
    print_table([{**w, "energy_recommendation": e}], console)
    assert ("energy modelled, not measured: the kernel's energy model x each cpu's busy time "
            "(an estimate: no power sensor); the time recommendation's runs report"
            ) in console.export_text()
    print_table([{**w, "energy_recommendation": None,
                  "energy_recommendation_error": "no model"}], console)
    assert "for minimum energy: none (no model)" in console.export_text()


def test_the_summary_rests_on_clean_runs_and_counts_the_marked_ones(tmp_path):
    """A neighbour doubled two of the three 2-core runs: the median and the speedup come from
    the clean run, as the fit does, and the table says 2 marked; a point measured only under
    the neighbour keeps its medians, flagged; with --accept-load every run counts."""
    from rich.console import Console

    from opptune.daemon.demo import print_table, summarise
    from opptune.daemon.store import ResultIn, open_store
    from opptune.shared.records import RunRecord

    why = "interference: 50 % of cpu 1 used by pid 4711 (sh)"
    runs = [(1, 1.0, None), (1, 1.0, None), (2, 0.55, None), (2, 1.1, why), (2, 1.1, why),
            (3, 0.9, why)]
    db = tmp_path / "opptune.db"
    store = open_store(str(db))
    try:
        store.save_platform("p", {"id": "p"}, 1.0)
        recs = [RunRecord(platform="p", workload="w", input="small", cores=c,
                          cpus=list(range(c)), threads=c, rep=i, time_s=t, marked=m)
                for i, (c, t, m) in enumerate(runs)]
        store.insert_results([ResultIn(f"m{i}", "a1", "j", i, r, r.to_dict())
                              for i, r in enumerate(recs)], 2.0)
    finally:
        store.close()
    (w,) = summarise(db, {})
    two, three = w["points"][1], w["points"][2]
    assert (two["median_time_s"], two["runs"], two["marked"], two["clean"]) == (0.55, 3, 2, True)
    assert abs(two["speedup"] - 1.0 / 0.55) < 1e-9
    assert (three["median_time_s"], three["marked"], three["clean"]) == (0.9, 1, False)
    console = Console(width=200, record=True)
    print_table([w], console)
    text = console.export_text()
    assert "3 (2 marked)" in text and "0.9000 *" in text
    (under,) = summarise(db, {}, accept_load=True)
    assert under["points"][1]["median_time_s"] == 1.1


def test_a_workload_without_a_model_says_none_and_the_demo_says_why_it_failed(tmp_path):
    """A busy machine left every point marked: the table said 'model: - ()' and the demo
    exited 1 after 'recommended: none' without a last word."""
    from rich.console import Console

    from opptune.daemon.demo import closing_note, print_table
    w = {"workload": "triad", "input": "default", "variant": "", "virtual": False,
         "points": [], "model": None, "model_params": None, "model_mape_pct": None,
         "runners_up": None, "recommended_cores": None}
    console = Console(record=True, width=200)
    print_table([w], console)
    text = console.export_text()
    assert "  model: none\n" in text and "()" not in text
    done = {**w, "workload": "pi_integrate", "recommended_cores": 2}
    assert closing_note([done, w], tmp_path) == (
        f"opptune demo: no recommendation for triad (the notes above say why); the logs and "
        f"the database are in {tmp_path}")
    assert closing_note([], tmp_path) == (
        f"opptune demo: nothing was measured; the logs are in {tmp_path}")
    assert closing_note([done], tmp_path) is None


def test_a_demo_on_a_busy_machine_says_the_load_left_it_without_a_model_and_what_to_do(
        tmp_path):
    """make demo on a machine whose other processes kept its cpus busy (load 7-13 here) ended
    with every point marked after the daemon's 3 re-measurements, 'model: none' and 'no
    recommendation for locked_update, pi_integrate, triad (the notes above say why)': the
    why was three long fit errors, and what to do (--accept-load) sat in their middle."""
    from opptune.daemon.demo import closing_note
    marked = {"cores": 1, "freq_mhz": None, "median_time_s": 2.7, "runs": 12, "marked": 12,
              "clean": False}
    clean = {**marked, "cores": 2, "marked": 0, "clean": True}
    busy = {"workload": "triad", "points": [marked, clean], "recommended_cores": None}
    failed = {"workload": "bfs", "points": [clean], "recommended_cores": None}
    note = closing_note([busy, failed], tmp_path)
    assert note == (
        "opptune demo: no recommendation for triad: other processes used this machine's cpus "
        "through the sweep and its 3 re-measurements (the points marked *), and the model "
        "leaves such runs out; run the demo again when the machine is quiet ('opptune doctor' "
        "shows its load), or with --accept-load (make demo DEMO_ARGS=--accept-load) to fit "
        "those runs too, for a recommendation that holds under that load; no recommendation "
        f"for bfs (the notes above say why); the logs and the database are in {tmp_path}")


def test_a_demo_that_runs_out_of_time_says_which_option_gives_it_more(tmp_path):
    """At --timeout the demo said 'gave up after 1 s; logs in DIR': no command name, no word
    on what to do. Its last word follows what it measured in that second, which depends on
    the machine's load (at load 12 nothing: the daemon and agent were still starting, died of
    the demo's SIGTERM and were reported as 'daemon exited -15', which the demo had asked)."""
    # a bound on a hang only: at load 12 the demo's own start and its children's take ~15 s
    proc = _demo(tmp_path, "--virtual-board", "rpi4", "--timeout", "1", limit_s=120)
    assert proc.returncode == 1
    said = " ".join(proc.stderr.split())
    assert (f"opptune demo: gave up after 1 s (--timeout); a longer --timeout lets it finish; "
            f"logs in {tmp_path / 'demo'}") in said
    assert "exited" not in said, said
    measured = json.loads((tmp_path / "demo" / "result.json").read_text())
    assert [w["workload"] for w in measured] in ([], ["pi_integrate"])
    assert said.endswith(
        f"opptune demo: no recommendation for pi_integrate (the notes above say why); the "
        f"logs and the database are in {tmp_path / 'demo'}" if measured else
        f"opptune demo: nothing was measured; the logs are in {tmp_path / 'demo'}"), said


def test_a_child_ended_by_the_demos_own_sigterm_is_stopped_not_failed():
    """A daemon still starting (no SIGTERM handler yet) dies of the demo's SIGTERM: the demo
    reported 'daemon exited -15' as a failure of the stop it had asked for. Other exits, and
    a SIGTERM the demo did not send, are reported as before."""
    import signal

    from opptune.daemon.demo import _stop

    def child(code: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    # no handler: SIGTERM's default ends it, as it ends a daemon still importing
    plain = child("import sys; print('ready', flush=True); sys.stdin.read()")
    assert plain.stdout.readline() == "ready\n"
    assert _stop(plain) is None
    # a handler that exits 3: its status is the stop's answer
    handled = child("import signal, sys\n"
                    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n"
                    "print('ready', flush=True); sys.stdin.read()")
    assert handled.stdout.readline() == "ready\n"
    assert _stop(handled) == 3
    # ended by a SIGTERM from elsewhere before the demo stopped it
    other = child("import sys; print('ready', flush=True); sys.stdin.read()")
    assert other.stdout.readline() == "ready\n"
    other.send_signal(signal.SIGTERM)
    other.wait(30)
    assert _stop(other) == -signal.SIGTERM
    for p in (plain, handled, other):
        p.stdin.close()
        p.stdout.close()
