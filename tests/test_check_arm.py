"""tools/check_arm.py's pure parts, and the README board section it runs: no emulation here."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "check_arm.py"
_spec = importlib.util.spec_from_file_location("check_arm", SCRIPT)
check_arm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_arm)

# what Debian 12 (and Raspberry Pi OS on it) ships
DEBIAN_12 = {"pyzmq": (24, 0, 1), "msgpack": (1, 0, 3), "psutil": (5, 9, 4)}


def readme_commands() -> list[str]:
    return check_arm.board_commands((ROOT / "README.md").read_text())


def test_arch_choices():
    assert check_arm.parse_args(["--arch", "all"]).arches == ["armhf", "arm64"]
    assert check_arm.parse_args([]).arches == ["armhf", "arm64"]
    assert check_arm.parse_args(["--arch", "arm64"]).arches == ["arm64"]


@pytest.mark.parametrize("argv, says", [(["--arch", "armel"], "choose armhf, arm64 or all"),
                                        (["--reps", "0"], "--reps must be at least 1"),
                                        (["--timeout", "-1"], "--timeout must be positive"),
                                        (["--userland-only", "--preflight"],
                                         "--preflight and --userland-only: choose one")])
def test_bad_arguments_exit_2_with_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        check_arm.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1]


def test_readme_board_section_is_the_install_the_check_runs():
    cmds = readme_commands()
    assert cmds == [
        "sudo apt-get install python3-venv python3-dev gcc libc6-dev python3-zmq "
        "python3-msgpack python3-psutil",
        "python3 -m venv --system-site-packages ~/opptune-venv",
        "~/opptune-venv/bin/pip install .",
    ]
    # the userland is built from the same line; root in the userland runs it without sudo
    assert {"python3-zmq", "python3-msgpack", "python3-psutil"} <= set(
        check_arm.apt_packages(cmds))
    assert check_arm.as_root(cmds[0]).startswith("apt-get install ")
    assert check_arm.as_root(cmds[2]) == cmds[2]


def test_board_section_parsing_errors_are_named():
    with pytest.raises(ValueError, match="no '## On a board' section"):
        check_arm.board_commands("# x\n\n## Other\n```\nls\n```\n")
    with pytest.raises(ValueError, match="no code block"):
        check_arm.board_commands("# x\n\n## On a board\n\ntext\n\n## Next\n```\nls\n```\n")
    with pytest.raises(ValueError, match="apt-get install"):
        check_arm.apt_packages(["python3 -m venv v"])


def test_version_floors_take_debian_12_packages():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {d.split(">=")[0]: tuple(int(x) for x in d.split(">=")[1].split("."))
              for d in deps}
    for name, debian in DEBIAN_12.items():
        assert floors[name] <= debian, f"{name} floor {floors[name]} above Debian 12's {debian}"


def test_missing_tools_say_what_to_install():
    none = lambda _name: None  # noqa: E731
    problems = check_arm.missing_requirements(["armhf"], 0, which=none)
    assert len(problems) == 1
    assert "apt-get install mmdebstrap qemu-user-static" in problems[0]
    assert check_arm.missing_requirements(["arm64"], 0, which=lambda n: "/usr/bin/" + n) == []
    not_root = check_arm.missing_requirements(["arm64"], 1000, which=lambda n: "/usr/bin/" + n)
    assert len(not_root) == 1 and "run as root" in not_root[0]


def test_without_tools_the_script_exits_nonzero_and_reports_no_pass(tmp_path):
    """PATH stripped: nothing of the check can run; it says so and never prints a table."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--arch", "armhf",
                        "--cache-dir", str(tmp_path)],
                       env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "apt-get install mmdebstrap qemu-user-static" in r.stderr
    assert "nothing was checked" in r.stderr
    assert "PASSED" not in r.stdout + r.stderr and r.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no cache, no logs


def test_cache_key_follows_the_package_list(tmp_path):
    a = check_arm.cache_key("armhf", ["gcc", "python3-zmq"])
    assert a == check_arm.cache_key("armhf", ["python3-zmq", "gcc"])
    assert a != check_arm.cache_key("armhf", ["gcc", "python3-zmq", "python3-dev"])
    assert a != check_arm.cache_key("arm64", ["gcc", "python3-zmq"])
    assert check_arm.default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == \
        tmp_path / "opptune" / "check-arm"


def test_counters_row_fails_only_when_the_syscall_number_is_unknown():
    unknown = {"machine": "armv7l", "syscall_nr": None,
               "perf": {"available": False, "reason": "perf_event_open: ENOSYS unknown"}}
    known, counters, perf = check_arm.counters_rows(unknown)
    assert not known and counters.startswith("FAIL") and "armv7l" in counters
    assert perf == "unavailable here: perf_event_open: ENOSYS unknown"
    known, counters, perf = check_arm.counters_rows(
        {"machine": "armv7l", "syscall_nr": 364, "perf": {"available": False, "reason": "x"}})
    assert known and counters == "known: perf_event_open is syscall 364 on armv7l"
    assert check_arm.counters_rows({"machine": "aarch64", "syscall_nr": 241,
                                    "perf": {"available": True}})[2] == "available"


def test_old_run_logs_are_pruned(tmp_path):
    names = [f"20261125-0{i}0000" for i in range(1, 6)]
    for n in names:
        (tmp_path / n / "armhf").mkdir(parents=True)
    (tmp_path / "notes").mkdir()
    check_arm.prune_logs(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [*names[-2:], "notes"]


def test_table_marks_steps_that_did_not_run():
    out = check_arm.table("armhf", {"userland": "cached 0 s", "install": "FAIL 3 s: x",
                                    "ok": False}).splitlines()
    assert out[0] == "armhf: FAILED"
    assert [ln.split()[0] for ln in out[1:]] == list(check_arm.STEPS)
    assert "FAIL 3 s: x" in out[2] and sum("not run" in ln for ln in out) == 5
    assert check_arm.table("arm64", {"ok": True}).startswith("arm64: PASSED")


def make_env() -> dict[str, str]:
    """This environment without what a make running the suite (make test, under .ci/run)
    hands down: its level (make -n then says 'Entering directory') and CHECK_ARM_ARGS."""
    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CHECK_ARM_ARGS"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_target_passes_the_architecture():
    r = subprocess.run(["make", "-n", "check-arm", "ARCH=armhf"], cwd=ROOT, capture_output=True,
                       text=True, env=make_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    runs = [ln for ln in r.stdout.splitlines() if "tools/check_arm.py" in ln]
    # the preflight (system python, before the venv is built), then the check itself
    assert runs[0].endswith("tools/check_arm.py --arch armhf --preflight")
    assert runs[-1].split("tools/check_arm.py")[1].split() == ["--arch", "armhf"]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_target_builds_only_the_userland_with_the_system_python():
    r = subprocess.run(["make", "-n", "check-arm-userland", "ARCH=armhf",
                        "CHECK_ARM_ARGS=--cache-dir /tmp/elsewhere"], cwd=ROOT,
                       capture_output=True, text=True, env=make_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    (run,) = [ln for ln in r.stdout.splitlines() if ln.strip()]  # no venv is built first
    assert run.startswith("python3 tools/check_arm.py")
    assert run.split("tools/check_arm.py")[1].split() == [
        "--arch", "armhf", "--userland-only", "--cache-dir", "/tmp/elsewhere"]


class Mmdebstrap:
    """Stands in for check_arm.Procs: its `run` plays mmdebstrap, writing the tarball it is
    asked for; ``then`` fails it (an exit status) or interrupts it (an exception)."""

    def __init__(self, then: int | BaseException = 0):
        self.then, self.calls = then, 0

    def run(self, argv, timeout):
        self.calls += 1
        assert argv[0] == "mmdebstrap"
        Path(argv[-2]).write_text("half a userland")
        if isinstance(self.then, BaseException):
            raise self.then
        return subprocess.CompletedProcess(argv, self.then, "I: line 1\nE: the last line\n",
                                           None)


def test_userland_is_built_once_then_taken_from_the_cache(tmp_path):
    log = tmp_path / "logs" / "run" / "armhf" / "mmdebstrap.log"
    procs = Mmdebstrap()
    tar, built = check_arm.userland("armhf", ["gcc"], tmp_path / "cache", procs, 60, log)
    assert built and tar.read_text() == "half a userland" and log.exists()
    assert check_arm.userland("armhf", ["gcc"], tmp_path / "cache", procs, 60, log) == (
        tar, False)
    assert procs.calls == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [tar.name]


@pytest.mark.parametrize("then", [1, check_arm.Interrupted("SIGTERM")])
def test_a_failed_or_interrupted_build_leaves_no_part_of_a_userland(tmp_path, then):
    cache = tmp_path / "cache"
    with pytest.raises(type(then) if isinstance(then, BaseException) else
                       check_arm.CheckFailed):
        check_arm.userland("armhf", ["gcc"], cache, Mmdebstrap(then), 60,
                           tmp_path / "mmdebstrap.log")
    assert list(cache.iterdir()) == []


def test_userland_only_says_built_cached_or_why_not(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(check_arm, "ensure_binfmt", lambda arch: None)
    args = check_arm.parse_args(["--arch", "armhf", "--userland-only",
                                 "--cache-dir", str(tmp_path / "cache")])
    cmds = readme_commands()
    assert check_arm.build_userlands(args, cmds, Mmdebstrap(2), tmp_path / "run") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("check-arm: armhf userland FAILED: mmdebstrap failed (2); log: ")
    assert err[1:] == ["  I: line 1", "  E: the last line"]  # the log's end, on stderr
    assert check_arm.build_userlands(args, cmds, Mmdebstrap(), tmp_path / "run") == 0
    assert check_arm.build_userlands(args, cmds, Mmdebstrap(), tmp_path / "run") == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split(" in ")[0] for ln in out] == ["check-arm: armhf userland built",
                                                   "check-arm: armhf userland cached"]


def test_an_interrupted_step_stops_its_process_before_the_caller_cleans_up(tmp_path):
    """SIGTERM while a step waits (here the step's process sends it once the check reads its
    output, more than a pipe holds): the process is stopped before the exception reaches the
    caller, which may then delete its output (a mmdebstrap left running wrote its tarball
    after userland() had removed the part)."""
    pid_file = tmp_path / "pid"
    before = signal.signal(signal.SIGTERM, check_arm._on_signal)
    procs = check_arm.Procs()
    try:
        with pytest.raises(check_arm.Interrupted):
            procs.run(["sh", "-c", f"echo $$ > {pid_file}; head -c 200000 /dev/zero; "
                                   "kill -TERM $PPID; exec sleep 600"], timeout=60)
        signal.signal(signal.SIGTERM, before)
        assert procs.live == []
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)
    finally:
        signal.signal(signal.SIGTERM, before)
        procs.stop_all()


def test_a_second_run_on_one_cache_waits_for_the_first_saying_so(tmp_path):
    """Two checks on one cache removed each other's half-built userland: the second waits
    (flock on the cache's lock file), naming the first, and goes on once it ends."""
    cache = tmp_path / "cache"
    hold = ("import importlib.util, sys; from pathlib import Path; "
            f"s = importlib.util.spec_from_file_location('c', {str(SCRIPT)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
            f"with m.cache_lock(Path({str(cache)!r})):\n"
            "    print('held', flush=True); sys.stdin.readline()\n"
            "print('released', flush=True)\n")
    first = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    second = None
    try:
        assert first.stdout.readline() == "held\n"
        second = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waiting = second.stderr.readline()
        assert waiting.startswith(f"check-arm: {cache} is in use by another check-arm "
                                  f"(pid {first.pid}, since "), waiting
        assert waiting.endswith("); waiting for it to end\n"), waiting
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline() == "released\n"
        assert second.stdout.readline() == "held\n"  # only once the first let go
        assert (cache / "lock").read_text().startswith(f"pid {second.pid}, since ")
        second.stdin.write("\n")
        second.stdin.flush()
        assert second.wait(30) == 0 and first.wait(30) == 0
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
