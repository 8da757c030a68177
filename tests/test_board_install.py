"""A board install (no extras): each console script works, or names the extra it needs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from opptune.daemon.entry import DAEMON_EXTRA

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# a process in which the daemon extra's modules cannot be imported, as on a board
WITHOUT_EXTRA = ("import sys\n"
                 f"for m in {sorted(DAEMON_EXTRA.values())!r}: sys.modules[m] = None\n")


def run_script(entry: str, argv: list[str]) -> subprocess.CompletedProcess:
    module, func = entry.split(":")
    code = WITHOUT_EXTRA + f"from {module} import {func}\nsys.exit({func}({argv!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_extra_list_matches_pyproject():
    declared = {re.split(r"[<>=!~ \[]", req)[0]
                for req in PYPROJECT["project"]["optional-dependencies"]["daemon"]}
    assert set(DAEMON_EXTRA) == declared


@pytest.mark.parametrize("script", ["opptune", "opptune-daemon"])
@pytest.mark.parametrize("argv", [[], ["--help"], ["status"], ["sweep", "--agent", "a"],
                                  ["demo"], ["fit", "--data", "x.csv"], ["predict"], ["eval"]])
def test_central_scripts_name_the_extra(script, argv):
    out = run_script(PYPROJECT["project"]["scripts"][script], argv)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"{script}: needs the daemon extra")
    assert "pip install 'opptune[daemon]'" in out.stderr
    assert "numpy" in out.stderr
    # what a board can do with 'opptune' as it is ('opptune --help' named only the extra)
    assert (script == "opptune") == out.stderr.endswith(
        "; without it, 'opptune doctor' (no --agent) checks this board\n")


@pytest.mark.parametrize("script", ["opptune", "opptune-daemon", "opptune-agent"])
def test_version_answers_without_the_extra(script):
    # 'opptune --version' had gone through the parser, whose board list imports rich
    from opptune import __version__
    out = run_script(PYPROJECT["project"]["scripts"][script], ["--version"])
    assert (out.returncode, out.stdout, out.stderr) == (0, f"{script} {__version__}\n", "")


def test_agent_script_works_without_extra(tmp_path):
    entry = PYPROJECT["project"]["scripts"]["opptune-agent"]
    out = run_script(entry, ["--help"])
    assert out.returncode == 0 and "--restore" in out.stdout, out.stderr
    out = run_script(entry, ["--restore", "--state-dir", str(tmp_path),
                             "--agent-id", "board"])
    assert out.returncode == 0, out.stderr
    assert "restored nothing" in out.stderr and "Traceback" not in out.stderr


def test_doctor_checks_the_board_itself_without_the_extra(tmp_path):
    from fake_trees import fake_tree

    entry = PYPROJECT["project"]["scripts"]["opptune"]
    root = fake_tree(tmp_path, "odroid-xu4")
    out = run_script(entry, ["doctor", "--sysfs-root", root, "--json"])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "governor ondemand" in json.loads(out.stdout)["summary"]  # stdout: JSON only
    out = run_script(entry, ["doctor", "--help"])
    assert out.returncode == 0 and "--sysfs-root" in out.stdout, out.stderr
    # an agent's report comes from the daemon: that needs the extra, and says so
    out = run_script(entry, ["doctor", "--agent", "xu4"])
    assert out.returncode == 2 and out.stderr.startswith("opptune: needs the daemon extra")


def test_scripts_with_extra_reach_their_commands():
    out = subprocess.run([sys.executable, "-c",
                          "import sys; from opptune.daemon.entry import operator\n"
                          "sys.exit(operator(['status', '--help']))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--daemon" in out.stdout, out.stderr


def test_commands_that_fit_nothing_start_without_scipy():
    """Every 'opptune' command builds every command's parser; fit_cli imported the models'
    scipy.stats at the top, so 'opptune status' spent over a second (about two thirds of its
    start) loading what only fit, predict and eval use."""
    out = subprocess.run([sys.executable, "-c",
                          "import sys; from opptune.daemon.cli import build_parser\n"
                          "build_parser().parse_args(['status'])\n"
                          "print(sorted({m.split('.')[0] for m in sys.modules} & "
                          "{'scipy', 'sklearn', 'matplotlib'}))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "[]\n", out.stderr


@pytest.mark.parametrize("entry, argv", [
    ("opptune.daemon.entry import operator", ["status", "--help"]),
    ("opptune.daemon.entry import daemon", ["--help"]),
    ("opptune.agent.cli import main", ["--help"]),
])
def test_help_loads_none_of_the_heavy_libraries(entry, argv):
    """Every 'opptune' command builds every command's parser: goal_cli, fit_cli and demo,
    imported for theirs, loaded numpy, pyperf and rich (about a third of a second of each
    start, the test suite's ~400 starts included) that only their commands use; so did
    'opptune-daemon --help' (the daemon's modules)."""
    out = subprocess.run([sys.executable, "-c",
                          "import atexit, sys\n"
                          "atexit.register(lambda: print(sorted({m.split('.')[0] for m in "
                          "sys.modules} & {'numpy', 'scipy', 'pyperf', 'rich'})))\n"
                          f"from {entry} as main\n"
                          f"sys.exit(main({argv!r}))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "usage:" in out.stdout, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_a_status_that_finds_no_daemon_loads_no_table_library():
    """'opptune status' loaded rich (its tables) before asking the daemon, for the default
    row count alone: a status that ends in 'no daemon listens' needs none of it."""
    out = subprocess.run([sys.executable, "-c",
                          "import atexit, sys\n"
                          "atexit.register(lambda: print(sorted({m.split('.')[0] for m in "
                          "sys.modules} & {'numpy', 'scipy', 'pyperf', 'rich'})))\n"
                          "from opptune.daemon.entry import operator as main\n"
                          "sys.exit(main(['status', '--daemon', 'tcp://127.0.0.1:1']))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "no daemon listens" in out.stderr, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_ctrl_c_while_the_cli_loads_exits_130_without_a_traceback(monkeypatch, capsys):
    # Ctrl-C in the second 'opptune' spends importing scipy (building the parser) came
    # before main's own handler: a KeyboardInterrupt traceback reached the user
    from opptune.daemon import cli
    from opptune.daemon.entry import operator

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert operator(["status"]) == 130
    assert capsys.readouterr().err == "opptune: interrupted while loading, before the command ran\n"


class FailingImport:
    """A meta path finder under which importing ``name`` calls ``fail``, which raises."""

    def __init__(self, name, fail):
        self.name, self.fail = name, fail

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            self.fail()
        return None


def interrupt_as_import_error():
    # what a library that turns any failure of its own import into an ImportError makes of a
    # Ctrl-C landing in it
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise ImportError("numpy's C extension failed to load")


def broken_install():
    raise ImportError("cannot import name 'x' from 'scipy.stats'")


def extra_missing():
    raise ModuleNotFoundError("No module named 'scipy'", name="scipy")


@pytest.mark.parametrize("fail, code, line", [
    (interrupt_as_import_error, 130,
     "opptune: interrupted while loading, before the command ran"),
    (broken_install, 1,
     "opptune eval-mpet: cannot load its commands: ImportError: cannot import name 'x' from "
     "'scipy.stats'; reinstall: pip install --force-reinstall 'opptune[daemon]'"),
])
def test_an_import_error_while_loading_is_said_as_what_it_is(monkeypatch, capsys, fail, code,
                                                              line):
    """Every ImportError while the parser loaded its commands read as 'the daemon extra is
    missing': a Ctrl-C there once answered 'invalid choice: eval-mpet'. Only a missing module
    of the extra reads so; an interrupt is one (exit 130), anything else a broken install.
    The parser loads no command's module: eval-mpet's loads as it runs."""
    from opptune.daemon.cli import main
    monkeypatch.delitem(sys.modules, "opptune.daemon.mpet_cli", raising=False)
    monkeypatch.setattr(sys, "meta_path",
                        [FailingImport("opptune.daemon.mpet_cli", fail), *sys.meta_path])
    assert main(["eval-mpet"]) == code
    assert capsys.readouterr() == ("", line + "\n")


def test_a_missing_module_of_the_extra_is_said_when_its_command_runs(monkeypatch, capsys):
    """Its parser is there (help works without the extra); the command says what to install."""
    from opptune.daemon.cli import main
    monkeypatch.delitem(sys.modules, "opptune.daemon.fit_cli", raising=False)
    monkeypatch.setattr(sys, "meta_path",
                        [FailingImport("opptune.daemon.fit_cli", extra_missing), *sys.meta_path])
    assert main(["fit", "--data", "x.csv"]) == 2
    assert capsys.readouterr() == ("", "opptune fit: needs the daemon extra (scipy not "
                                       "installed): pip install 'opptune[daemon]'\n")
