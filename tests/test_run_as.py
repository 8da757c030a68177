"""The agent's workloads run as the unprivileged ``run_as`` user when the agent is root: the
child's uid, gid and supplementary groups are that user's; an unknown user stops the agent at
start with one line naming the key."""

import os
import pwd
import subprocess
import sys
import tempfile

import pytest

from opptune.agent.child import resolve_run_as, spawn
from opptune.agent.runner import Runner
from opptune.agent.runspec import RunSpec
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload
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
                     {"PATH": "/usr/bin:/bin"}, None, out, err, user)
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
    with pytest.raises(ValueError, match="unprivileged"):
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
