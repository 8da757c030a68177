"""Bad input to the installed commands: one line naming the problem and the fix, exit 2, no
traceback, nothing created (real processes of the console scripts)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from procs import RUN_AS_OPTION

BIN = Path(sys.executable).parent


def run(*argv, cwd=None):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    # the line names the command it comes from, as every opptune command's errors do
    assert lines[0].startswith(f"{Path(proc.args[0]).name}"), lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
    assert proc.stdout == ""


def test_agent_config_endpoint_without_transport(tmp_path):
    cfg = tmp_path / "agent.toml"
    state = tmp_path / "state"
    cfg.write_text(f'daemon = "127.0.0.1:5555"\nstate_dir = "{state}"\n')
    one_line_error(run("opptune-agent", "--config", str(cfg)),
                   str(cfg), "key 'daemon'", "tcp://127.0.0.1:5555")
    assert not state.exists()


def test_operator_cli_endpoint_from_config_without_transport(tmp_path):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text('bind = "0.0.0.0:5555"\n')
    one_line_error(run("opptune", "status", "--config", str(cfg)),
                   str(cfg), "key 'bind'", "tcp://0.0.0.0:5555")


HEAD = "platform,workload,input,variant,cores,freq_mhz,rep,time_s\n"


@pytest.mark.parametrize("command", ["fit", "eval"])
def test_a_binary_file_is_not_told_to_be_re_encoded(tmp_path, command):
    """An SQLite database given as --data was answered 'line 1: not UTF-8 text (byte 0xf6);
    save the file as UTF-8, e.g. iconv -f latin1 -t utf-8 ...', advice no binary file can
    follow; now it says the file is not text, and what to give."""
    import sqlite3
    data = tmp_path / "runs.db"
    con = sqlite3.connect(data)
    con.execute("CREATE TABLE runs (cores INTEGER, time_s REAL)")
    con.execute("INSERT INTO runs VALUES (1, 2.5)")
    con.commit()
    con.close()
    extra = ["--save", str(tmp_path / "fit.json")] if command == "fit" else [
        "--out", str(tmp_path / "ev")]
    proc = run("opptune", command, "--data", str(data), *extra)
    one_line_error(proc, f"{data}: not a text file (it holds NUL bytes",
                   "give a CSV of measurements")
    assert "iconv" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


@pytest.mark.parametrize("body, needles", [
    (b"b,w\xe9,1,v,1,,0,10\n", ["line 2", "not UTF-8", "iconv"]),
    (b"b,w,1,v,1,,0,10\nb,w,1,v,2.5,,0,6\n", ["line 3", "'cores'", "'2.5'", "whole number"]),
    (b"b,w,1,v,1,,0,10\nb,w,1,v,2,,0,-6\n", ["line 3", "'time_s'", "'-6'", "> 0"]),
    (b"b,w,1,v,1,,0,10\nb,w,1,v,2,,0,0\n", ["line 3", "'time_s'", "--zero-times missing"]),
    (b"b,w,1,v,1,-1000,0,10\n", ["line 2", "'freq_mhz'", "'-1000'"]),
])
@pytest.mark.parametrize("command", ["fit", "eval"])
def test_bad_csv_values_name_file_and_line(tmp_path, body, needles, command):
    data = tmp_path / "d.csv"
    data.write_bytes(HEAD.encode() + body)
    save = tmp_path / "fit.json"
    extra = ["--save", str(save)] if command == "fit" else ["--out", str(tmp_path / "ev")]
    one_line_error(run("opptune", command, "--data", str(data), *extra), str(data), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv"]


def test_zero_times_read_as_missing_when_asked(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text(HEAD + "".join(f"b,w,1,v,{p},,0,{10 / p + 1}\n" for p in (1, 2, 3, 4))
                    + "b,w,1,v,8,,0,0\n")
    proc = run("opptune", "fit", "--data", str(data), "--zero-times", "missing", "--json")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("content, needles", [
    ('[1, 2]', ["JSON but not a saved fit", "opptune fit --data FILE.csv --save"]),
    ('{"fits": []}', ["JSON but not a saved fit"]),
    ('{"format": "opptune-fits/1", "fits": {"a": 1}}', ["'fits' must be a list"]),
    ('{"a": 1', ["not a saved fit (not JSON: line 1"]),
])
def test_predict_on_a_file_that_is_not_a_fit(tmp_path, content, needles):
    fit = tmp_path / "x.json"
    fit.write_text(content)
    proc = run("opptune", "predict", "--fit", str(fit), "--cores", "1,2")
    one_line_error(proc, str(fit), *needles)
    assert "--freq" not in proc.stderr  # it named --freq for any fault of the file


def test_predict_on_a_fit_file_that_is_not_there_names_the_file_not_freq(tmp_path):
    """A --fit file missing or unreadable said 'opptune predict: --freq cannot read ...':
    its error, a ValueError too, was taken for a bad --freq."""
    missing = tmp_path / "nowhere.json"
    proc = run("opptune", "predict", "--fit", str(missing), "--cores", "1,2")
    one_line_error(proc, f"--fit {missing}: cannot read it: No such file or directory",
                   "opptune fit --data FILE.csv --save")
    assert "--freq" not in proc.stderr


@pytest.mark.parametrize("option, value", [("--cores", "2.5"), ("--cores", "0"),
                                           ("--cores", "-2"), ("--freq", "-1000")])
def test_predict_refuses_fractional_or_negative_requests(tmp_path, option, value):
    fit = tmp_path / "x.json"
    fit.write_text('{"format": "opptune-fits/1", "fits": []}')
    argv = {"--cores": "1", "--freq": ""} | {option: value}
    args = [a for k, v in argv.items() if v for a in (k, v)]
    proc = run("opptune", "predict", "--fit", str(fit), *args)
    one_line_error(proc, option, repr(value))
    assert ("--freq" in proc.stderr) == (option == "--freq"), proc.stderr


def test_predict_skips_a_damaged_entry_with_a_warning(tmp_path):
    fit = tmp_path / "x.json"
    fit.write_text('{"format": "opptune-fits/1", "fits": '
                   '[{"group": "g", "model": "amdahl", "state": {"x": 1}}]}')
    proc = run("opptune", "predict", "--fit", str(fit), "--cores", "1")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "warning: group g: cannot load its fit" in proc.stderr


INTERNAL = ("``", "auto_x", "combo", "seed 003", "fit_cli", "eval_cli", "ROUTER", "poet_bard",
            "opptune.daemon", "opptune.agent", "Traceback", "%%")


@pytest.mark.parametrize("argv", [
    ["opptune"], ["opptune", "demo"], ["opptune", "status"], ["opptune", "sweep"],
    ["opptune", "fit"], ["opptune", "predict"], ["opptune", "eval"], ["opptune", "keys"],
    ["opptune", "characterize"], ["opptune", "report"], ["opptune", "recommend"],
    ["opptune", "tune"], ["opptune", "eval-mpet"], ["opptune-agent"], ["opptune-daemon"]])
def test_help_is_written_for_users(argv):
    proc = run(*argv, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage:")
    for word in INTERNAL:
        assert word not in proc.stdout, word


def test_every_agent_option_is_named_alike():
    """--agent read 'ID' in status, cancel, report and tune's usage but 'AGENT' in sweep,
    characterize, doctor, recommend, tune, export and import (walk33)."""
    from opptune.daemon.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    named = {}
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if "--agent" in action.option_strings:
                named[name] = action.metavar
    assert {"status", "sweep", "characterize", "doctor", "recommend", "tune", "cancel",
            "report", "export", "import"} <= set(named)
    assert set(named.values()) == {"ID"}, named


def test_every_commands_description_is_a_sentence():
    """cancel's and doctor's --help descriptions began lowercase, as their one-line help in
    the command list does, unlike every other command's (polish)."""
    from opptune.daemon.cli import build_parser

    def walk(parser, name):
        yield name, parser.description or ""
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from walk(sub, f"{name} {sub_name}")

    described = dict(walk(build_parser(), "opptune"))
    assert {"opptune cancel", "opptune doctor", "opptune sweep"} <= set(described)
    wrong = {n: d[:30] for n, d in described.items() if d and not d[0].isupper()}
    assert not wrong, wrong


@pytest.mark.parametrize("command", ["opptune", "opptune-agent", "opptune-daemon"])
def test_version(command):
    from opptune import __version__
    proc = run(command, "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"{command} {__version__}"


def test_eval_refuses_zero_reps(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text(HEAD + "".join(f"b,w,1,v,{p},,0,{10 / p + 1}\n" for p in (1, 2, 3, 4)))
    one_line_error(run("opptune", "eval", "--data", str(data), "--reps", "0"), "--reps", "got 0")


@pytest.mark.parametrize("command", ["recommend", "tune"])
@pytest.mark.parametrize("extra, needles", [
    (["--objective", "speed"], ["unknown objective 'speed'", "time, energy, edp, ed2p"]),
    (["--deadline", "5 parsecs"], ["cannot read the deadline '5 parsecs'", "2.5s"]),
    (["--power-cap=-3W"], ["the power cap must be positive, not '-3W'"]),
    # argparse takes a word starting with '-' for an option unless it is a plain number:
    # these met "expected one argument" instead of the goal's own message
    (["--power-cap", "-3W"], ["the power cap must be positive, not '-3W'"]),
    (["--deadline", "-1s"], ["the deadline must be positive, not '-1s'"]),
    (["--deadline", "-.5s"], ["the deadline must be positive, not '-.5s'"]),
    (["--deadline", "0s"], ["the deadline must be positive"]),
    (["--max-cores", "-1"], ["--max-cores must be >= 0"]),
])
def test_goal_options_refused_before_asking_the_daemon(tmp_path, command, extra, needles):
    # no daemon listens there: the line comes from the command itself, at once
    one_line_error(run("opptune", command, "--daemon", "tcp://127.0.0.1:9", "--agent", "a",
                       "--workload", "w", *extra, cwd=tmp_path), f"opptune {command}: ",
                   *needles)


@pytest.mark.parametrize("command, option, value, least", [
    ("sweep", "--reps", "0", 1), ("sweep", "--reps", "-2", 1), ("sweep", "--max-cores", "-1", 0),
    ("sweep", "--warmup", "-1", 0), ("characterize", "--reps", "0", 1),
    ("characterize", "--max-cores", "-1", 0)])
def test_sweep_counts_refused_naming_the_option_typed(tmp_path, command, option, value, least):
    """The walk: '--reps 0' came back from the daemon as "reps must be a whole number >= 1",
    naming its key, not the option typed. No daemon listens: the command says it at once."""
    one_line_error(run("opptune", command, "--daemon", "tcp://127.0.0.1:9", "--agent", "a",
                       option, value, cwd=tmp_path),
                   f"opptune {command}: {option} must be >= {least}, not {value}")


@pytest.mark.parametrize("value", ["-600000", "0", "600000,-1"])
def test_sweep_freq_not_positive_is_refused_naming_the_option(tmp_path, value):
    """The DVFS walk: 'sweep --freq -600000' went to the daemon and came back as 'sweep
    args.frequencies must be a list of kHz integers', naming its protocol key."""
    one_line_error(run("opptune", "sweep", "--daemon", "tcp://127.0.0.1:9", "--agent", "a",
                       f"--freq={value}", cwd=tmp_path),
                   f"opptune sweep: --freq {value.split(',')[-1]!r} is not a frequency: give "
                   "numbers above 0 in kHz or with a unit, separated by commas, e.g. "
                   "1400000,1800000 or 1.4GHz,1.8GHz")


def test_tune_budget_refused_before_asking_the_daemon(tmp_path):
    one_line_error(run("opptune", "tune", "--daemon", "tcp://127.0.0.1:9", "--agent", "a",
                       "--workload", "w", "--budget", "0", cwd=tmp_path), "--budget must be >= 1")


def test_recommend_pid_target_refused_before_asking_the_daemon(tmp_path):
    one_line_error(run("opptune", "recommend", "--daemon", "tcp://127.0.0.1:9", "--agent", "a",
                       "--workload", "w", "--pid", "0", cwd=tmp_path),
                   "opptune recommend: ", "--pid must be a process id")


def test_agent_virtual_board_alone_makes_its_tree_in_the_state_dir(tmp_path):
    proc = run("opptune-agent", "--virtual-board", "rpi4", "--state-dir", str(tmp_path / "st"),
               "--restore", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    spec = json.loads((tmp_path / "st" / "virtual-board-rpi4" /
                       ".opptune-virtual-board.json").read_text())["spec"]
    assert spec["name"] == "rpi4"
    one_line_error(run("opptune-agent", "--virtual-board", "nope", "--state-dir",
                       str(tmp_path / "st"), "--restore", cwd=tmp_path),
                   "unknown virtual board 'nope'", "rpi4")
    (tmp_path / "st" / "virtual-board-odroid-xu4").symlink_to(tmp_path / "st" /
                                                              "virtual-board-rpi4")
    one_line_error(run("opptune-agent", "--virtual-board", "odroid-xu4", "--state-dir",
                       str(tmp_path / "st"), "--restore", cwd=tmp_path),
                   "holds another virtual board's tree")


@pytest.mark.parametrize("command", [["status"], ["sweep", "--agent", "a"],
                                     ["recommend", "--agent", "a", "--workload", "w"]])
def test_a_timeout_that_is_not_positive_is_refused_not_waited_on(tmp_path, command):
    one_line_error(run("opptune", *command, "--daemon", "tcp://127.0.0.1:9", "--timeout", "-1",
                       cwd=tmp_path), f"opptune {command[0]}: ", "--timeout -1", "> 0")


def test_a_reader_that_goes_away_is_not_a_traceback(tmp_path):
    # `opptune fit ... --json | head -c 100`: far more than a pipe buffer, the reader gone early
    data = Path(__file__).resolve().parent.parent / "data" / "loghin_multicore_energy" / "data.csv"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "opptune"), "fit", "--data",
                             str(data), "--zero-times", "missing", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert len(proc.stdout.read(100)) == 100
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize("command", [["status"], ["doctor", "--agent", "a"], ["keys", "list"]])
def test_a_config_binding_a_free_port_needs_the_daemons_endpoint(tmp_path, command):
    """bind = "tcp://127.0.0.1:0" (a free port, as README's --bind example): the port the
    daemon took is not in the file, so the command says to give --daemon instead of waiting
    its whole timeout on tcp://127.0.0.1:0."""
    cfg = tmp_path / "daemon.toml"
    cfg.write_text('bind = "tcp://127.0.0.1:0"\ncurve = "off"\n')
    p = run("opptune", *command, "--config", str(cfg), "--timeout", "30")
    one_line_error(p, str(cfg), "tcp://127.0.0.1:0", "a free port", "--daemon")


@pytest.mark.parametrize("target", ["missing-dir/fit.json", "."])
def test_fit_save_to_a_place_it_cannot_write_is_refused_before_fitting(tmp_path, target):
    """It fitted, printed the table, then ended in a FileNotFoundError traceback (exit 1)."""
    data = tmp_path / "d.csv"
    data.write_text(HEAD + "".join(f"b,w,1,v,{c},,0,{10 / c}\n" for c in (1, 2, 4)))
    p = run("opptune", "fit", "--data", str(data), "--save", target, cwd=tmp_path)
    one_line_error(p, f"--save {target}", "cannot write")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d.csv"]


def test_predict_edits_file_missing_names_the_file_once(tmp_path):
    """It read "(... ([Errno 2] No such file or directory: 'missing.json'); ...": the errno
    and the path twice."""
    p = run("opptune", "predict", "--workload", "a", "--on", "p", "--edits", "missing.json",
            cwd=tmp_path)
    one_line_error(p, "--edits missing.json: cannot open it (no such file or directory)")
    assert "Errno" not in p.stderr and p.stderr.count("missing.json") == 1


@pytest.mark.parametrize("action", ["list", "server"])
def test_keys_list_or_server_with_an_id_is_refused_before_asking_the_daemon(tmp_path, action):
    # 'opptune keys list 1f61ab20d341' listed every key, as if the id were not there
    one_line_error(run("opptune", "keys", action, "1f61ab20d341", "--daemon",
                       "tcp://127.0.0.1:9", cwd=tmp_path),
                   f"opptune keys {action}: ", "takes no ID (got '1f61ab20d341')",
                   "opptune keys accept|reject|revoke ID")


def test_restore_leaves_a_running_agents_settings_and_record_alone(tmp_path):
    """'opptune-agent --restore' run by hand while the agent runs: it put the saved cpufreq
    state back under the agent's measurement and deleted the record the agent relies on after
    a kill -9. Now it names the running agent and restores nothing (exit 1)."""
    import signal
    import time
    state = tmp_path / "st"
    log = open(tmp_path / "agent.log", "wb")
    agent = subprocess.Popen([str(BIN / "opptune-agent"), "--virtual-board", "rpi4",
                              "--state-dir", str(state), "--daemon", "tcp://127.0.0.1:9",
                              "--agent-id", "running", *RUN_AS_OPTION],
                             stdout=subprocess.DEVNULL,
                             stderr=log, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        tree = state / "virtual-board-rpi4"
        # started: past its own restore of records left by a killed agent
        while "connecting to" not in (tmp_path / "agent.log").read_text():
            assert agent.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        record = state / "cpufreq-state.json"
        text = json.dumps({"sysfs_root": str(tree), "pid": agent.pid, "policies": {}})
        record.write_text(text)  # as the agent writes it before its first change
        proc = run("opptune-agent", "--virtual-board", "rpi4", "--state-dir", str(state),
                   "--restore", cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert f"(pid {agent.pid}) is still running" in proc.stderr
        assert "nothing restored" in proc.stderr and proc.stderr.count("\n") == 1
        assert record.read_text() == text
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
        log.close()
    # once it has stopped, the record is restored as before
    proc = run("opptune-agent", "--virtual-board", "rpi4", "--state-dir", str(state),
               "--restore", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not record.exists()


def test_a_long_wait_for_a_daemon_that_is_not_there_says_so_before_it_ends(monkeypatch, capsys):
    """eval-mpet --daemon waits 30 s by default: the user hears after a few seconds that no
    answer came yet, then the usual line at the timeout (exit 1)."""
    import socket

    from opptune.daemon import client

    with socket.socket() as s:  # listens, never answers (a refused one fails at once)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setattr(client, "WAIT_NOTE_S", 0.2)
        data, rc = client.ask("opptune eval-mpet", f"tcp://127.0.0.1:{port}", "mpet_data",
                              timeout_s=0.8)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (data, rc) == (None, 1)
    assert len(lines) == 2, lines
    assert "no answer from the daemon" in lines[0] and "waiting up to 0.8 s" in lines[0]
    assert "within 0.8 s" in lines[1]
    # a short wait (the status commands' 5 s) ends with the one line only
    data, rc = client.ask("opptune status", f"tcp://127.0.0.1:{port}", "status", timeout_s=0.2)
    assert rc == 1 and len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["sweep", "--agent", "a", "--no-progress"],
                                  ["status", "--bogus"], ["fit", "--data", "x.csv", "extra"]])
def test_an_unknown_option_of_a_command_shows_that_commands_usage(tmp_path, argv):
    """'opptune sweep --no-progress' printed the top-level usage ('usage: opptune [-h]
    [--version] COMMAND ...') and 'opptune: error:', not the usage of sweep."""
    proc = run("opptune", *argv, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"usage: opptune {argv[0]} "), proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"opptune {argv[0]}: error: unrecognized arguments: {argv[-1]}")


def test_report_waiting_for_a_daemon_that_is_not_there_says_so_before_it_ends(monkeypatch,
                                                                               capsys, tmp_path):
    """'opptune report' (10 s by default) was silent until its timeout, unlike the commands
    that go through client.ask: now it says after a few seconds that no answer came yet."""
    import socket

    from opptune.daemon import client
    from opptune.daemon.cli import main

    with socket.socket() as s:  # listens, never answers (a refused one fails at once)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setattr(client, "WAIT_NOTE_S", 0.2)
        rc = main(["report", "--daemon", f"tcp://127.0.0.1:{port}", "--timeout", "0.8",
                   "--out", str(tmp_path / "r")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(lines) == 2, lines
    assert lines[0] == (f"opptune report: no answer from the daemon at tcp://127.0.0.1:{port} "
                        "yet; waiting up to 0.8 s (--timeout; Ctrl-C stops)")
    assert lines[1].startswith("opptune report: no answer from the daemon") and \
        "within 0.8 s" in lines[1]


@pytest.mark.parametrize("prog,argv", [("keys list", ["keys", "list"]), ("status", ["status"]),
                                       ("report", ["report"]),
                                       ("sweep", ["sweep", "--agent", "a", "--wait"])])
@pytest.mark.parametrize("how", ["--daemon", "--config"])
def test_a_named_endpoint_where_nothing_listens_fails_at_once(monkeypatch, capsys, tmp_path,
                                                               prog, argv, how):
    """An explicit --daemon tcp://HOST:PORT (or --config's bind) where nothing listened waited
    the whole --timeout, then said 'no answer'. A refused connection at a command's first
    query now ends it at once (exit 1, as a timeout), saying what to check."""
    import socket

    from opptune.daemon import client
    from opptune.daemon.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    endpoint = f"tcp://127.0.0.1:{port}"
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(f'bind = "{endpoint}"\ncurve = "off"\n')
    monkeypatch.setattr(client, "WAIT_NOTE_S", 0.1)  # a wait would say so, a line more
    where = [how, endpoint if how == "--daemon" else str(cfg)]
    extra = ["--out", str(tmp_path / "r")] if argv == ["report"] else []
    assert main([*argv, *where, "--timeout", "30", *extra]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"opptune {prog}: no daemon listens at {endpoint} (the connection was refused): "
        "check that opptune-daemon runs on that host and that the port is its log's "
        "'listening on' one"]


def test_every_option_of_every_command_says_what_it_does():
    """'opptune sweep --help' listed --size, --warmup and --max-cores with no word (and keys
    its action), where characterize and demo say what they mean and their defaults."""
    import argparse

    from opptune.daemon.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    silent = [f"{name} {a.option_strings or a.dest}" for name, p in sub.choices.items()
              for a in p._actions if a.help is None]
    assert silent == []


@pytest.mark.parametrize("argv", [["keys", "list"], ["status"]])
def test_no_daemon_named_and_none_at_the_default_fails_at_once_saying_what_to_pass(
        monkeypatch, capsys, tmp_path, argv):
    """'opptune keys list' with no --config and no /etc/opptune/daemon.toml waited 5 s
    without a word for the default endpoint, where nothing listened. A refused connection
    there now ends it at once (exit 2) naming --config and --daemon; where something listens
    it is asked as before."""
    import socket

    from opptune.daemon import client
    from opptune.daemon.cli import main
    from opptune.shared.config import DaemonConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    default = f"tcp://127.0.0.1:{port}"
    monkeypatch.setattr(client, "DEFAULT_DAEMON_CONFIG", tmp_path / "none.toml")
    monkeypatch.setattr(client, "load_daemon_config", lambda path: DaemonConfig(bind=default))
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"opptune {' '.join(argv)}: no daemon listens at {default}, the default endpoint (no "
        f"--config given and no {tmp_path / 'none.toml'}): give the daemon's configuration "
        "(--config daemon.toml, on its host) or its endpoint (--daemon tcp://HOST:PORT)"]
    # something listens there (not answering): the query goes out and times out as before
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert main([*argv, "--timeout", "0.3"]) == 1
    err = capsys.readouterr().err
    assert "no daemon listens" not in err and f"no answer from the daemon at {default}" in err


@pytest.mark.parametrize("argv", [["keys", "list"], ["status"]])
def test_the_default_endpoint_is_probed_once_per_command(monkeypatch, capsys, tmp_path, argv):
    """A command with no daemon named connected to the default endpoint twice before its
    query (daemon_endpoint's check, then the first query's): once now; a second command
    probes afresh."""
    import socket

    from opptune.daemon import client
    from opptune.daemon.cli import main
    from opptune.shared.config import DaemonConfig

    probes = []
    refused = client._refused
    monkeypatch.setattr(client, "_refused", lambda ep, *a: probes.append(ep) or refused(ep, *a))
    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        default = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        monkeypatch.setattr(client, "DEFAULT_DAEMON_CONFIG", tmp_path / "none.toml")
        monkeypatch.setattr(client, "load_daemon_config", lambda path: DaemonConfig(bind=default))
        for n in (1, 2):
            assert main([*argv, "--timeout", "0.2"]) == 1
            assert probes == [default] * n
    assert f"no answer from the daemon at {default}" in capsys.readouterr().err


def test_every_command_says_what_it_does_in_its_help():
    """'opptune sweep --help' (and demo, keys, characterize) printed the usage and the
    options, not a word of what the command does (the README walk): every command has a
    description now."""
    import argparse

    from opptune.daemon.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    bare = [name for name, p in sub.choices.items() if not (p.description or "").strip()]
    assert bare == [], bare
    assert len(sub.choices) >= 16


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "700000"])
def test_recover_for_out_of_range_is_one_line(value):
    """`opptune recover --for S` outside (0, a week]: one line before any daemon is asked."""
    one_line_error(run("opptune", "recover", "--for", value, "--daemon", "tcp://127.0.0.1:1"),
                   "--for must be a number of seconds above 0, at most 604800")


@pytest.mark.parametrize("codes", [["too_larg"], ["nonsense"], ["too_large", "rate_limited"]])
def test_recover_also_takes_only_codes_an_agent_keeps_results_under(codes):
    """`opptune recover --also too_larg` (a typo) was asked of the daemon, which answered
    '(and those refused as too_larg are sent again)': no agent keeps results under that code
    (nor under a transient one, rate_limited: those are resent on their own), so nothing ever
    came, with no word of why. Now one line naming the codes, before any daemon is asked."""
    argv = [a for c in codes for a in ("--also", c)]
    proc = run("opptune", "recover", *argv, "--daemon", "tcp://127.0.0.1:1")
    one_line_error(proc, "--also takes a code under which an agent keeps refused results",
                   "too_large", "bad_record", "unknown_type", f"got {codes[-1]}")
    assert "rate_limited, " not in proc.stderr and "unknown_job, " not in proc.stderr


def test_recover_also_with_a_kept_code_asks_the_daemon():
    """A code agents keep results under (and unknown_job, asked for anyway) passes the check:
    the command goes on to ask the daemon (none listens here: exit 1, saying so)."""
    proc = run("opptune", "recover", "--also", "too_large", "--also", "unknown_job",
               "--daemon", "tcp://127.0.0.1:1")
    assert proc.returncode == 1 and "no daemon listens at tcp://127.0.0.1:1" in proc.stderr
