"""The agent's workloads run as the unprivileged ``run_as`` user when the agent is root (unset:
"opptune-run", not the daemon's "opptune"; "root" runs them as root on purpose, said once):
the child's uid, gid and supplementary groups are that user's; an unknown user, or one that
cannot run the agent's Python, stops the agent at start with one line naming the key."""

import logging
import os
import pwd
import subprocess
import sys
import tempfile

import pytest

from opptune.agent import child as child_mod
from opptune.agent import cli as agent_cli
from opptune.agent.child import interpreter_refused, resolve_run_as, spawn, user_env
from opptune.agent.runner import Runner
from opptune.agent.runspec import RunSpec
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload, ConfigError
from procs import free_endpoint, write_toml

# a system python: the test's own interpreter may live where 'nobody' cannot read (/root)
SYS_PY = "/usr/bin/python3"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
need_nobody = pytest.mark.skipif(not any(p.pw_name == "nobody" for p in pwd.getpwall()),
                                 reason="no 'nobody' user on this machine")
need_py = pytest.mark.skipif(not os.access(SYS_PY, os.X_OK), reason=f"no {SYS_PY}")


@root_only
@need_nobody
@need_py
def test_child_runs_with_the_users_ids():
    user = resolve_run_as("nobody")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = spawn([SYS_PY, "-c", "import os; print(os.getuid(), os.getgid(), "
                      "sorted(os.getgroups()), os.environ['HOME'])"],
                     user_env(user, {"PATH": "/usr/bin:/bin"}), None, out, err, user)
        assert proc.wait(30) == 0, err.seek(0) or err.read()
        out.seek(0)
        text = out.read().decode()
    assert text.split(None, 2)[:2] == [str(user.uid), str(user.gid)]
    assert text.split(None, 2)[2].strip() == f"{sorted(user.groups)} {user.home}"
    assert user.uid != 0 and os.geteuid() == 0  # the agent itself stays root


@root_only
@need_nobody
@need_py
def test_runner_runs_workloads_as_run_as_and_as_root_without_it():
    uid = pwd.getpwnam("nobody").pw_uid
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("whoami", [SYS_PY, "-c",
                                   f"import os,sys; sys.exit(0 if os.getuid() == {uid} else 3)"])])
    wl = Workloads(cfg, catalogue={})
    spec = RunSpec("whoami", "default", [0], 1)
    dropped = Runner(wl, "p", timeout_s=30, run_as=resolve_run_as("nobody")).run_once(spec)
    assert dropped.ok, dropped.error
    as_root = Runner(wl, "p", timeout_s=30).run_once(spec)
    assert not as_root.ok  # the check can fail: without run_as the child is root


def test_root_user_and_unknown_user_refused():
    with pytest.raises(ValueError, match="does not exist"):
        resolve_run_as("no-such-user-opptune-test")
    with pytest.raises(ValueError, match="is root"):
        resolve_run_as("root")


def test_agent_with_unknown_run_as_stops_with_one_line(tmp_path):
    toml = write_toml(tmp_path / "agent.toml", {
        "agent_id": "t", "daemon": free_endpoint(), "state_dir": str(tmp_path / "s"),
        "bench_kernels": ["triad"], "run_as": "no-such-user-opptune-test"})
    r = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(toml)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "key 'run_as'" in lines[0] and str(toml) in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def _as_root(monkeypatch) -> None:
    monkeypatch.setattr(agent_cli.os, "geteuid", lambda: 0)


def _user(monkeypatch, name: str) -> None:
    """A user ``name`` (uid 4242) that pwd knows, whatever this machine has."""
    real = pwd.getpwnam

    def getpwnam(n: str):
        if n == name:
            return pwd.struct_passwd((name, "x", 4242, 4242, "", f"/home/{name}",
                                      "/usr/sbin/nologin"))
        return real(n)
    monkeypatch.setattr(child_mod.pwd, "getpwnam", getpwnam)


def test_a_root_agent_without_run_as_runs_workloads_as_a_user_of_their_own(monkeypatch,
                                                                            caplog):
    """run_as = "" (etc/agent.toml's old default) ran every workload of a root agent as root,
    with a warning; then as 'opptune', the user the daemon's unit runs as, so a workload on a
    host running both could rewrite the daemon's store and keys. Unset, they run as the
    unprivileged 'opptune-run'."""
    _as_root(monkeypatch)
    _user(monkeypatch, "opptune-run")
    with caplog.at_level(logging.WARNING, logger="opptune.agent"):
        user = agent_cli.workload_user(AgentConfig(), "agent.toml")
    assert (user.name, user.uid, user.gid, user.home) == ("opptune-run", 4242, 4242,
                                                           "/home/opptune-run")
    assert caplog.records == []


def test_a_configuration_naming_opptune_keeps_it(monkeypatch):
    _as_root(monkeypatch)
    _user(monkeypatch, "opptune")
    user = agent_cli.workload_user(AgentConfig(run_as="opptune"), "agent.toml")
    assert (user.name, user.uid) == ("opptune", 4242)


def test_a_root_agent_whose_default_user_is_missing_says_the_key_and_the_ways_out(monkeypatch):
    _as_root(monkeypatch)
    monkeypatch.setattr(child_mod.pwd, "getpwnam",
                        lambda n: (_ for _ in ()).throw(KeyError(n)))
    with pytest.raises(ConfigError) as info:
        agent_cli.workload_user(AgentConfig(), "agent.toml")
    text = str(info.value)
    assert text.startswith("agent.toml: key 'run_as' (not set: an agent running as root runs "
                           "its workloads as 'opptune-run'): user 'opptune-run' does not exist: "
                           "create it (useradd --system --no-create-home --shell "
                           "/usr/sbin/nologin opptune-run)"), text
    assert "useradd --system" in text and 'or to "root" to run the workloads as root' in text


def test_run_as_root_is_an_opt_in_said_once(monkeypatch, caplog):
    _as_root(monkeypatch)
    with caplog.at_level(logging.INFO, logger="opptune.agent"):
        assert agent_cli.workload_user(AgentConfig(run_as="root"), "agent.toml") is None
    (said,) = [r for r in caplog.records]
    assert said.levelname == "WARNING" and 'workloads run as root (run_as = "root")' in \
        said.getMessage()


def test_an_agent_that_is_not_root_is_unchanged(monkeypatch, caplog):
    """Not root: the workloads run as the agent's own user; unset says nothing, a user set
    is said to be ignored (as before)."""
    monkeypatch.setattr(agent_cli.os, "geteuid", lambda: 1000)
    with caplog.at_level(logging.INFO, logger="opptune.agent"):
        assert agent_cli.workload_user(AgentConfig(), "agent.toml") is None
        assert caplog.records == []
        assert agent_cli.workload_user(AgentConfig(run_as="opptune"), "agent.toml") is None
    (said,) = caplog.records
    assert "run_as = 'opptune' ignored" in said.getMessage()


@root_only
@need_nobody
@need_py
def test_a_user_that_cannot_import_opptune_is_said_with_pythons_own_line(monkeypatch):
    monkeypatch.setattr(child_mod.sys, "executable", SYS_PY)  # opptune is not installed there
    why = interpreter_refused(resolve_run_as("nobody"))
    assert why is not None and "No module named 'opptune'" in why, why


def _closed_to_others(path: str) -> bool:
    """A directory on the way to ``path`` that other users may not enter."""
    d = os.path.dirname(os.path.realpath(path))
    while d != "/":
        if not os.stat(d).st_mode & 0o001:
            return True
        d = os.path.dirname(d)
    return False


@root_only
def test_a_root_agent_without_its_default_user_stops_at_start(tmp_path):
    """The process: before, it started and ran its workloads as root; now one line, exit 2,
    nothing made in the state directory."""
    if any(p.pw_name == "opptune-run" for p in pwd.getpwall()):
        pytest.skip("this machine has a user 'opptune-run'")
    toml = write_toml(tmp_path / "agent.toml", {
        "agent_id": "t", "daemon": free_endpoint(), "state_dir": str(tmp_path / "s"),
        "bench_kernels": ["triad"]})
    r = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(toml)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"opptune-agent: configuration error: {toml}: key 'run_as' (not "
                           "set"), line
    assert "'opptune-run' does not exist" in line and '"root"' in line
    assert "useradd --system --no-create-home --shell /usr/sbin/nologin opptune-run" in line
    assert not (tmp_path / "s").exists()


@root_only
@need_nobody
@pytest.mark.skipif(not _closed_to_others(sys.executable),
                    reason="this interpreter is readable by other users")
def test_a_user_that_cannot_run_the_agents_python_stops_it_at_start(tmp_path):
    """This interpreter lies under a directory closed to others (/root): every kernel run as
    'nobody' would fail at the first job with 'Permission denied'. The start says so."""
    toml = write_toml(tmp_path / "agent.toml", {
        "agent_id": "t", "daemon": free_endpoint(), "state_dir": str(tmp_path / "s"),
        "bench_kernels": ["triad"], "run_as": "nobody"})
    r = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(toml)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"opptune-agent: configuration error: {toml}: key 'run_as': user "
                           f"'nobody' cannot run this agent's Python ({sys.executable}: "), line
    assert "triad" in line and "/opt/opptune" in line


def test_a_virtual_board_runs_its_workloads_as_the_agent(monkeypatch, caplog):
    """A virtual board's runs use its tree, made in the agent's (root-only) state directory:
    as 'opptune' every run failed with a PermissionError, and where no such user exists the
    agent would not start. Unset, they run as the agent's own user, said in the log."""
    _as_root(monkeypatch)
    monkeypatch.setattr(child_mod.pwd, "getpwnam",
                        lambda n: (_ for _ in ()).throw(KeyError(n)))
    with caplog.at_level(logging.INFO, logger="opptune.agent"):
        assert agent_cli.workload_user(AgentConfig(virtual_board="rpi4"), "agent.toml") is None
    assert any("a virtual board: workloads run as the agent's own user" in r.getMessage()
               for r in caplog.records)


def test_run_as_beside_a_virtual_board_is_refused_at_start(monkeypatch):
    _as_root(monkeypatch)
    _user(monkeypatch, "opptune")
    with pytest.raises(ConfigError) as info:
        agent_cli.workload_user(AgentConfig(virtual_board="rpi4", run_as="opptune"),
                                "agent.toml")
    assert str(info.value).startswith("agent.toml: key 'run_as': a virtual board (rpi4) cannot "
                                      "run its workloads as 'opptune'"), info.value
    with pytest.raises(ConfigError) as info:
        agent_cli.workload_user(AgentConfig(virtual_board="rpi4", run_as="opptune"),
                                "agent.toml", option=True)
    assert str(info.value).startswith("--run-as: a virtual board"), info.value
    # root on purpose stays allowed (the demo runs its virtual boards so)
    assert agent_cli.workload_user(AgentConfig(virtual_board="rpi4", run_as="root"),
                                   "agent.toml") is None


@root_only
@need_nobody
@need_py
def test_the_workloads_own_env_wins_over_the_run_as_identity(tmp_path):
    """A ``[[workloads]] env = { HOME = ... }`` was silently replaced by run_as's HOME (and
    USER, LOGNAME), set after the workload's env: the configuration says what the program
    needs (a HOME it can write, where nobody's is /nonexistent), so it wins; the variables it
    does not set are still the user's."""
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("env", [SYS_PY, "-c", "import os,sys; sys.exit(0 if (os.environ['HOME'],"
                                " os.environ['USER'], os.environ['LOGNAME']) == "
                                f"({str(tmp_path)!r}, 'nobody', 'runner') else 3)"],
                        env={"HOME": str(tmp_path), "LOGNAME": "runner"})])
    rec = Runner(Workloads(cfg, catalogue={}), "p", timeout_s=30,
                 run_as=resolve_run_as("nobody")).run_once(RunSpec("env", "default", [0], 1))
    assert rec.ok, rec.error
