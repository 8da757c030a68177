"""Each workload runs in a directory: its configured ``cwd``, else one of its own under the
agent's state directory, owned by the workloads' user, mode 0700. They ran in the agent's
working directory (``/`` under the unit), where writing a scratch file failed."""

import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from opptune.agent.child import resolve_run_as
from opptune.agent.runner import Runner
from opptune.agent.runspec import RunSpec
from opptune.agent.workdir import WorkDirs, dir_name
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload, load_agent_config
from procs import Cluster

SYS_PY = "/usr/bin/python3"  # one 'nobody' can run (the test's may lie under /root)
as_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYS_PY, os.X_OK)
    or not any(p.pw_name == "nobody" for p in pwd.getpwall()),
    reason="needs root, 'nobody' and /usr/bin/python3")

# writes a scratch file where it runs, saying where that was and as whom
SCRATCH = ("import os; open('scratch.txt', 'w').write(f'{os.getcwd()} {os.getuid()}'); "
           "print('{\"time_s\": 0.01}')")


@pytest.fixture
def open_tmp():
    """A directory other users may pass through (pytest's tmp lies in a root-only 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="opptune-workdir-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def run(tmp_path, workload, run_as=None, state_dir=True):
    cfg = AgentConfig(bench_kernels=[], workloads=[workload])
    (tmp_path / "state").mkdir(exist_ok=True)  # the agent's, made at its start
    runner = Runner(Workloads(cfg, catalogue={}), "p", timeout_s=30, run_as=run_as,
                    state_dir=str(tmp_path / "state") if state_dir else None)
    return runner.run_once(RunSpec(workload.name, "default", [0], 1))


@as_nobody
def test_a_real_agent_runs_each_workload_in_a_directory_of_its_own(open_tmp):
    """The agent as a process, its workloads as 'nobody': the sweep's runs write their
    scratch file in STATE_DIR/work/NAME, nobody's, 0700 (before: in the agent's working
    directory, where nobody cannot write, so every run failed)."""
    tmp_path = open_tmp
    c = Cluster(tmp_path, kernels=(), reps=1, extra_agent={"run_as": "nobody"})
    with open(c.agent_toml, "a") as fh:
        fh.write('[[workloads]]\nname = "scratch"\n'
                 f'command = {json.dumps([SYS_PY, "-c", SCRATCH])}\n')
    try:
        c.start_daemon()
        c.start_agent()
        c.wait_for(lambda st: c.rows("select count(*) from runs")[0][0] >= 2, timeout=120,
                   what="the sweep's runs")
    finally:
        assert set(c.stop().values()) <= {0}, c.logs()
    rows = c.rows("select ok, workload from runs")
    assert rows and all(ok for ok, _ in rows), (rows, c.logs())
    work = tmp_path / "agent-state" / "work" / "scratch"
    st = os.stat(work)
    nobody = pwd.getpwnam("nobody").pw_uid
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (nobody, 0o700)
    assert (work / "scratch.txt").read_text() == f"{work} {nobody}"
    assert stat.S_IMODE(os.stat(tmp_path / "agent-state").st_mode) & 0o011 == 0o011


@as_nobody
def test_a_configured_cwd_is_where_the_workload_runs(open_tmp):
    tmp_path = open_tmp
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, pwd.getpwnam("nobody").pw_uid, -1)
    rec = run(tmp_path, CommandWorkload("w", [SYS_PY, "-c", SCRATCH], cwd=str(data)),
              run_as=resolve_run_as("nobody"))
    assert rec.ok, rec.error
    assert (data / "scratch.txt").read_text() == f"{data} {pwd.getpwnam('nobody').pw_uid}"
    assert not (tmp_path / "state" / "work").exists()  # nothing made for it


@as_nobody
def test_a_cwd_the_user_cannot_enter_fails_the_run_saying_so(open_tmp):
    tmp_path = open_tmp
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)  # root's
    rec = run(tmp_path, CommandWorkload("w", [SYS_PY, "-c", SCRATCH], cwd=str(closed)),
              run_as=resolve_run_as("nobody"))
    assert not rec.ok
    assert rec.error == (f"cannot start {SYS_PY}: user 'nobody' cannot enter its working "
                         f"directory {closed} (it needs search permission on each directory "
                         "of the path)"), rec.error


def test_the_agents_own_user_gets_a_directory_too(tmp_path):
    rec = run(tmp_path, CommandWorkload("w/1", [sys.executable, "-c", SCRATCH]))
    assert rec.ok, rec.error
    work = tmp_path / "state" / "work" / dir_name("w/1")
    assert (work / "scratch.txt").read_text() == f"{work} {os.getuid()}"
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o700
    # no other user needs to pass: work/ is the agent's alone (0711 before)
    assert stat.S_IMODE(os.stat(work.parent).st_mode) == 0o700


def test_a_runner_without_a_state_dir_keeps_its_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rec = run(tmp_path, CommandWorkload("w", [sys.executable, "-c", SCRATCH]),
              state_dir=False)
    assert rec.ok and (tmp_path / "scratch.txt").read_text() == f"{tmp_path} {os.getuid()}"


def test_a_file_where_the_directory_goes_fails_the_run(tmp_path):
    (tmp_path / "state" / "work").mkdir(parents=True)
    (tmp_path / "state" / "work" / "w").write_text("")
    rec = run(tmp_path, CommandWorkload("w", [sys.executable, "-c", SCRATCH]))
    assert not rec.ok
    assert rec.error.startswith("cannot make the working directory of w: ") and \
        "is not a directory" in rec.error, rec.error


def test_directory_names_are_plain_and_distinct():
    assert dir_name("triad") == "triad"
    names = [dir_name(n) for n in ("a/b", "a_b", "..", ".x", "a b", "a\nb")]
    assert names[1] == "a_b" and len(set(names)) == len(names)
    assert all("/" not in n and not n.startswith(".") for n in names)


def test_a_relative_cwd_is_taken_from_the_configuration_file(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "agent.toml").write_text('[[workloads]]\nname = "w"\ncommand = ["x"]\n'
                                         'cwd = "in"\n')
    cfg = load_agent_config(tmp_path / "agent.toml")
    assert cfg.workloads[0].cwd == str(tmp_path / "in")


def test_only_a_set_cwd_changes_a_workloads_digests(tmp_path):
    """A workload without the key has the digests of one with it empty (unset); a
    cwd set is part of what runs (a program may read its input there)."""
    plain = Workloads(AgentConfig(bench_kernels=[], workloads=[CommandWorkload("w", ["x"])]),
                      catalogue={}).get("w")
    unset = Workloads(AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("w", ["x"], cwd="")]), catalogue={}).get("w")
    assert plain.program == unset.program and plain.definition == unset.definition
    moved = Workloads(AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("w", ["x"], cwd=str(tmp_path))]), catalogue={}).get("w")
    assert plain.program != moved.program and plain.definition != moved.definition


def test_a_removed_directory_is_made_again(tmp_path):
    dirs = WorkDirs(str(tmp_path))
    first = dirs.of("w")
    os.rmdir(first)
    assert dirs.of("w") == first and os.path.isdir(first)


def test_a_program_named_relative_to_the_agent_is_still_found(tmp_path, monkeypatch):
    """command = ["./app"] named a program where the agent runs; in the workload's own
    directory exec would have looked for it there."""
    app = tmp_path / "app"
    app.write_text(f"#!{sys.executable}\n{SCRATCH}\n")
    app.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    rec = run(tmp_path, CommandWorkload("w", ["./app"]))
    assert rec.ok, rec.error
    work = tmp_path / "state" / "work" / "w"
    assert (work / "scratch.txt").read_text() == f"{work} {os.getuid()}"


def test_a_program_named_relative_to_the_entrys_cwd_runs_from_there(tmp_path, monkeypatch):
    """command = ["./app"] with cwd = DIR: the run executes DIR/app, and the digest looks
    there (its edit is a new program), though the agent runs where another ./app is. Before,
    the run and its digest took ./app from the agent's directory, the other program."""
    proj, agent_dir = tmp_path / "proj", tmp_path / "agent"
    proj.mkdir()
    agent_dir.mkdir()
    for d, time_s in ((proj, 1.0), (agent_dir, 2.0)):
        (d / "app").write_text(f"#!/bin/sh\necho '{{\"time_s\": {time_s}}}'\n")
        (d / "app").chmod(0o755)
    monkeypatch.chdir(agent_dir)
    rec = run(tmp_path, CommandWorkload("w", ["./app"], cwd=str(proj)))
    assert rec.ok and rec.time_s == 1.0, rec.error
    cfg = AgentConfig(bench_kernels=[], workloads=[CommandWorkload("w", ["./app"],
                                                                   cwd=str(proj))])
    before = Workloads(cfg, catalogue={}).get("w").program
    (agent_dir / "app").write_text("#!/bin/sh\necho '{\"time_s\": 3}'\n")
    assert Workloads(cfg, catalogue={}).get("w").program == before
    (proj / "app").write_text("#!/bin/sh\necho '{\"time_s\": 3}'\n")
    assert Workloads(cfg, catalogue={}).get("w").program != before


def test_a_missing_cwd_is_named_by_its_whole_path(tmp_path, monkeypatch):
    """'opptune-agent --config bad.toml' said "'cwd' nowhere does not exist", leaving the
    user to guess from where it was taken."""
    from opptune.shared.config import ConfigError
    (tmp_path / "bad.toml").write_text('[[workloads]]\nname = "w"\ncommand = ["x"]\n'
                                       'cwd = "nowhere"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"'cwd' {tmp_path}/nowhere does not exist"):
        load_agent_config("bad.toml")
