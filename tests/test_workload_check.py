"""Each workload's working directory and program, checked at the agent's start as the user its
runs run as (agent/workload_check.py). A directory that user cannot enter was found only at
the first run (every run of the workload failed), and a command name not on the PATH failed
each run with only "No such file or directory"."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opptune.agent.child import resolve_run_as
from opptune.agent.runner import Runner
from opptune.agent.runspec import RunSpec
from opptune.agent.workdir import WorkDirs
from opptune.agent.workload_check import Refused, check_workloads
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload
from procs import AGENT_RUN_AS, free_endpoint, wait_until, write_toml
from test_workdir import SYS_PY, as_nobody, open_tmp  # noqa: F401  (a fixture, found by name)

PY = sys.executable


def start(tmp: Path, state: Path, workloads: list[dict]) -> subprocess.CompletedProcess:
    """An agent started with ``workloads`` run as nobody; it is expected to stop at start."""
    cfg = tmp / "agent.toml"
    write_toml(cfg, {"daemon": free_endpoint(), "agent_id": "a1", "state_dir": str(state),
                     "bench_kernels": [], "run_as": "nobody", "heartbeat_s": 0.5})
    with open(cfg, "a") as fh:
        for w in workloads:
            fh.write("[[workloads]]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                 for k, v in w.items()))
    return subprocess.run([PY, "-m", "opptune.agent", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=120)


@as_nobody
def test_a_cwd_its_user_cannot_enter_stops_the_agent_at_start(open_tmp):
    closed = open_tmp / "closed"
    closed.mkdir(mode=0o700)  # root's
    p = start(open_tmp, open_tmp / "state",
              [{"name": "w", "command": [SYS_PY, "-c", "pass"], "cwd": str(closed)}])
    assert p.returncode == 2, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("opptune-agent:")]
    assert line == (
        f"opptune-agent: configuration error: {open_tmp / 'agent.toml'}: workload 'w': its "
        f"runs run as user 'nobody', who cannot enter their working directory {closed} "
        "(Permission denied); give it search permission (x) on each directory of that path, "
        "set the entry's 'cwd' to a directory it may enter, or leave 'cwd' out (a directory "
        "of its own under the state directory)")
    assert "Traceback" not in p.stderr


@as_nobody
def test_a_state_directory_its_user_cannot_reach_stops_the_agent_at_start(open_tmp):
    """The workload's own directory under a state directory inside a root-only one (a home
    directory): made, but out of its user's reach."""
    (open_tmp / "home").mkdir(mode=0o700)
    state = open_tmp / "home" / "state"
    p = start(open_tmp, state, [{"name": "w", "command": [SYS_PY, "-c", "pass"]}])
    assert p.returncode == 2, p.stderr
    assert (f"workload 'w': its runs run as user 'nobody', who cannot enter their working "
            f"directory {state / 'work' / 'w'} (Permission denied); give it search permission "
            "(x) on each directory above the state directory, or choose a state directory it "
            "can reach") in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def check(tmp: Path, workloads: list[CommandWorkload], run_as=None) -> list[str]:
    cfg = AgentConfig(bench_kernels=[], workloads=workloads)
    (tmp / "state").mkdir(exist_ok=True)  # the agent's, made at its start
    return check_workloads(Workloads(cfg, catalogue={}), WorkDirs(str(tmp / "state"), run_as),
                           run_as)


def test_a_program_not_found_is_warned_of_with_the_path_searched(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "app").write_text("#!/bin/sh\n")
    (bin_dir / "app").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    warnings = check(tmp_path, [
        CommandWorkload("typo", ["ffmpge", "-i", "x"], env={"PATH": f"{bin_dir}:/nonexistent"}),
        CommandWorkload("found", ["app"], env={"PATH": str(bin_dir)}),
        CommandWorkload("rel", ["./bin/nope"]),
        CommandWorkload("relfound", ["./bin/app"]),
        # relative to the entry's cwd where it sets one
        CommandWorkload("relcwd", ["./app"], cwd=str(bin_dir)),
        CommandWorkload("relcwdmissing", ["./bin/app"], cwd=str(bin_dir)),
        CommandWorkload("templated", ["{size}-bench"])])
    assert warnings == [
        f"workload 'rel': no program {tmp_path}/bin/nope (./bin/nope is taken from the agent's "
        f"working directory {tmp_path}, as the entry sets no 'cwd'); each run fails until it "
        "is there: give its absolute path in 'command', or set the entry's 'cwd' to its "
        "directory",
        f"workload 'relcwdmissing': no program {bin_dir}/bin/app (./bin/app is taken from "
        "the entry's cwd); each run fails until it is there: give its absolute path in "
        "'command'",
        f"workload 'typo': no program 'ffmpge' on the PATH its runs get ({bin_dir}:"
        "/nonexistent); each run fails until it is there: give its absolute path in "
        "'command', or set PATH in the entry's env"]


# what to do, not "until it is there": the file is there (walking a board: a script without
# its execute bit was said so, with nothing to do about it)
MAY_NOT_EXECUTE = ("; each run fails until it may: give the file execute permission for "
                   "that user (chmod +x) and search permission (x) on each directory above "
                   "it, or set run_as to a user who may")


@as_nobody
def test_a_program_its_user_may_not_execute_is_warned_of(open_tmp):
    prog = open_tmp / "app"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o744)  # root's to run
    nobody = resolve_run_as("nobody")
    warnings = check(open_tmp, [CommandWorkload("w", [str(prog)])], nobody)
    assert warnings == [f"workload 'w': user 'nobody' may not execute {prog} (no permission "
                        f"to reach or execute it){MAY_NOT_EXECUTE}"]
    prog.chmod(0o755)
    assert check(open_tmp, [CommandWorkload("w", [str(prog)])], nobody) == []
    closed = open_tmp / "closed"  # a home of mode 0700: there, but out of the user's reach
    closed.mkdir(mode=0o700)
    shutil.copy(prog, closed / "app")
    assert check(open_tmp, [CommandWorkload("w", [str(closed / "app")])], nobody) == [
        f"workload 'w': user 'nobody' may not execute {closed / 'app'} (no permission to "
        f"reach or execute it){MAY_NOT_EXECUTE}"]


@as_nobody
def test_a_cwd_its_user_may_enter_but_not_write_is_warned_of(open_tmp):
    ro = open_tmp / "ro"
    ro.mkdir(mode=0o755)  # root's: others enter and read
    nobody = resolve_run_as("nobody")
    assert check(open_tmp, [CommandWorkload("w", [SYS_PY], cwd=str(ro))], nobody) == [
        f"workload 'w': user 'nobody' may not write in its working directory {ro}: a run "
        "that writes a file there fails"]
    ro.chmod(0o777)
    assert check(open_tmp, [CommandWorkload("w", [SYS_PY], cwd=str(ro))], nobody) == []


def test_a_directory_that_cannot_be_made_is_refused(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "work").write_text("")  # a file where the directory goes
    with pytest.raises(Refused, match=r"^workload 'w': cannot make its working directory "
                                      r"under .*/state/work \("):
        check(tmp_path, [CommandWorkload("w", [PY, "-c", "pass"])])


def test_a_run_of_a_program_not_on_the_path_names_the_path(tmp_path):
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("typo", ["ffmpge"], env={"PATH": "/nonexistent:/also-not"})])
    rec = Runner(Workloads(cfg, catalogue={}), "p", state_dir=str(tmp_path)).run_once(
        RunSpec("typo", "default", [0], 1))
    assert not rec.ok
    assert rec.error == ("cannot start ffmpge: no program 'ffmpge' on the PATH of its run "
                         "(/nonexistent:/also-not)")


def test_a_run_of_a_program_without_execute_permission_says_what_to_do(tmp_path):
    """Walking a board: such a run failed its job with 'cannot start .../noexec.sh: Permission
    denied' and nothing more."""
    prog = tmp_path / "noexec.sh"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o644)  # no one's to execute, root included
    cfg = AgentConfig(bench_kernels=[], workloads=[CommandWorkload("w", [str(prog)])])
    rec = Runner(Workloads(cfg, catalogue={}), "p", state_dir=str(tmp_path)).run_once(
        RunSpec("w", "default", [0], 1))
    assert not rec.ok
    assert rec.error == (f"cannot start {prog}: Permission denied: the user the run runs as "
                         "may not execute it: give it execute permission (chmod +x) and "
                         "search permission (x) on each directory above it, or set run_as to "
                         "a user who may")


def test_a_missing_program_is_one_line_at_the_agents_start(tmp_path):
    """A real agent whose workloads' programs are missing: a name not on the PATH, a relative
    path. Each is said in one warning, naming the PATH searched (or the path looked at).
    Before, the program digest said each a second time ("cannot read ffmpge")."""
    cfg = tmp_path / "agent.toml"
    write_toml(cfg, {"daemon": free_endpoint(), "agent_id": "a1",
                     "state_dir": str(tmp_path / "state"), "bench_kernels": [],
                     "heartbeat_s": 0.5, **AGENT_RUN_AS})
    with open(cfg, "a") as fh:
        fh.write('[[workloads]]\nname = "typo"\ncommand = ["ffmpge"]\n'
                 f'env = {{PATH = "{tmp_path}/bin:/nonexistent"}}\n'
                 '[[workloads]]\nname = "rel"\ncommand = ["./nope"]\n')
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen([PY, "-m", "opptune.agent", "--config", str(cfg)],
                                 stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_until(lambda: agent.poll() is not None or "no program 'ffmpge'" in log.read_text(),
                   "the start's check", timeout=60)
    finally:
        agent.terminate()
        agent.wait(30)
    # (as root, a line at start lists the commands the workloads run as root)
    lines = [ln for ln in log.read_text().splitlines() if "workloads run as root" not in ln]
    assert [ln.split("opptune.agent: ", 1)[-1] for ln in lines if "ffmpge" in ln] == [
        f"workload 'typo': no program 'ffmpge' on the PATH its runs get ({tmp_path}/bin:"
        "/nonexistent); each run fails until it is there: give its absolute path in "
        "'command', or set PATH in the entry's env"], lines
    assert len([ln for ln in lines if "nope" in ln]) == 1, lines


def test_a_tilde_in_the_path_is_said_not_expanded(tmp_path):
    """PATH = "~/bin": the run's execvp looks in a directory named "~" (not the home): the
    start's warning says so and what to write (before, only that the program is not on the
    PATH, which the user sees holding it)."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "app").write_text("#!/bin/sh\n")
    (home / "bin" / "app").chmod(0o755)
    warnings = check(tmp_path, [CommandWorkload("t", ["app"], env={
        "PATH": "~/bin:~other/bin:/nonexistent", "HOME": str(home)})])
    assert warnings == [
        "workload 't': no program 'app' on the PATH its runs get (~/bin:~other/bin:"
        "/nonexistent); each run fails until it is there: give its absolute path in "
        "'command', or set PATH in the entry's env (a '~' in PATH is not expanded for the "
        f"run: write its entries out in full, ~/bin as {home}/bin, ~other/bin)"]


def test_a_run_not_finding_its_program_on_a_relative_path_entry_names_the_path(tmp_path,
                                                                               monkeypatch):
    """PATH = "bin": the run looks in bin/ of its own directory (its cwd), where there is no
    app; the agent's working directory has one. The run's error names the PATH searched, as
    for any name not on it (before: a bare "No such file or directory", the agent's bin/app
    taken for the one the run would find)."""
    run, agent = tmp_path / "run", tmp_path / "agent"
    run.mkdir()
    (agent / "bin").mkdir(parents=True)
    (agent / "bin" / "app").write_text("#!/bin/sh\n")
    (agent / "bin" / "app").chmod(0o755)
    monkeypatch.chdir(agent)
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("c", ["app"], env={"PATH": "bin"}, cwd=str(run))])
    runner = Runner(Workloads(cfg, catalogue={}), "p", state_dir=str(tmp_path / "state"))
    rec = runner.run_once(RunSpec("c", "default", [0], 1))
    runner.close()
    assert not rec.ok
    assert rec.error == "cannot start app: no program 'app' on the PATH of its run (bin)"


def test_a_placeholder_typo_is_warned_of(tmp_path):
    """Walking a board: ``{thread}`` for ``{threads}`` went to the program as it was, with no
    word at the start; the runs then failed on a program's puzzled output, or measured the
    wrong thing. A brace of the program's own (a shell's ``${HOME}``, awk's ``{print}``) is
    not taken for one."""
    (tmp_path / "bench.py").write_text("")
    warnings = check(tmp_path, [
        CommandWorkload("w", [SYS_PY, "-c", "pass", "{thread}", "out-{CPUS}.csv", "{threads}"]),
        CommandWorkload("sh", ["sh", "-c", "echo ${HOME} {size}", "{print}"]),
        CommandWorkload("py", [], pyperf=str(tmp_path / "bench.py"),
                        pyperf_args=["--n", "{sizes}"])])
    said = "which the agent does not substitute (it substitutes {threads}, {size}, {cpus})"
    assert warnings == [
        f"workload 'py': its command holds {{sizes}}, {said}: did you mean {{size}}? Its runs "
        "get {sizes} as it is",
        f"workload 'w': its command holds {{thread}}, {said}: did you mean {{threads}}? Its "
        "runs get {thread} as it is",
        f"workload 'w': its command holds {{CPUS}}, {said}: did you mean {{cpus}}? Its runs "
        "get {CPUS} as it is"]
