"""The program digest of a workload follows the code its runs execute (agent/program_id.py):
a binary or script changed in place, or the kernels built anew, make a new program though the
configuration is the same; a copy built elsewhere from the same sources does not."""

from __future__ import annotations

import os
import shutil
import struct
import sys
import time

import pytest

import opptune.agent.program_id as program_id
import opptune.agent.workloads as wl
from opptune.agent.program_id import (CACHE_FILENAME, FileIds, content_digest, shell_files,
                                     shell_string)
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload


def _programs(workloads, file_ids=None, kernels=()):
    cfg = AgentConfig(agent_id="a1", bench_kernels=list(kernels), workloads=workloads)
    cat = {k: type("K", (), {"sizes": {"small": 1}})() for k in kernels}
    return {w["name"]: w["program"] for w in Workloads(cfg, catalogue=cat,
                                                       file_ids=file_ids).describe()}


def _script(path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_a_commands_program_changes_with_its_executable_and_script_files(tmp_path):
    """Same configuration, the executable rewritten: a new program. Rewritten with the same
    bytes (a reinstall: new mtime): the same. A script named as an argument counts too."""
    exe = _script(tmp_path / "bench", "echo 1")
    base = _programs([CommandWorkload("c", [exe, "{threads}"])])["c"]
    _script(tmp_path / "bench", "echo 2")
    changed = _programs([CommandWorkload("c", [exe, "{threads}"])])["c"]
    assert changed != base
    _script(tmp_path / "bench", "echo 1")
    os.utime(exe, (1, 1))
    assert _programs([CommandWorkload("c", [exe, "{threads}"])])["c"] == base
    # on the PATH the run gets (the workload's env), and a script as an argument
    script = tmp_path / "bench.py"
    script.write_text("print(1)\n")
    onpath = [CommandWorkload("p", ["bench", str(script)], env={"PATH": str(tmp_path)})]
    before = _programs(onpath)["p"]
    script.write_text("print(2)\n")
    edited = _programs(onpath)["p"]
    assert edited != before
    _script(tmp_path / "bench", "echo 3")
    assert _programs(onpath)["p"] not in (before, edited)


def test_a_missing_executable_leaves_the_hello_whole(tmp_path, caplog):
    """A command whose executable is not there: the workloads are described (the hello goes
    out), and its program changes once it is installed. The agent's start check names it
    (test_workload_check), not the digest: one line. Gone again, a look before a run logs it
    with the PATH searched."""
    cw = CommandWorkload("c", ["opptune-no-such-bench", "{threads}"],
                         env={"PATH": str(tmp_path)})
    missing = _programs([cw])["c"]
    assert len(missing) == 16
    assert "opptune-no-such-bench" not in caplog.text
    _script(tmp_path / "opptune-no-such-bench", "echo 1")
    assert _programs([cw])["c"] != missing
    ws = Workloads(AgentConfig(agent_id="a1", workloads=[cw]), catalogue={})
    os.unlink(tmp_path / "opptune-no-such-bench")
    assert ws.refresh("c") is True and ws.get("c").program == missing
    assert caplog.text.count("opptune-no-such-bench") == 1
    assert (f"workload c: no program 'opptune-no-such-bench' on the PATH its runs get "
            f"({tmp_path}): its runs fail until it is there") in caplog.text


def test_kernels_programs_follow_the_built_extension(tmp_path, monkeypatch):
    """The kernels' program changes with the code of the extension they run, not with the
    agent's version alone (an upgrade with the same kernels keeps their runs)."""
    so = tmp_path / "_kernels.so"
    so.write_bytes(b"\0kernel code v1")
    monkeypatch.setattr(wl, "kernel_files", lambda virtual: [str(so)])
    base = _programs([], kernels=["k"])["k"]
    monkeypatch.setattr(wl, "__version__", wl.__version__ + ".1")
    assert _programs([], kernels=["k"])["k"] == base
    so.write_bytes(b"\0kernel code v2")
    assert _programs([], kernels=["k"])["k"] != base


def _elf_with_build_id() -> bytes:
    from importlib.util import find_spec
    origin = find_spec("opptune.bench_suite._kernels").origin
    with open(origin, "rb") as f:
        data = f.read()
    if struct.pack("<III", 4, 20, 3) + b"GNU\0" not in data:
        pytest.skip("the built extension has no GNU build id")
    return data


def test_an_elf_files_digest_is_its_loaded_code_not_its_build_id(tmp_path):
    """Two builds of the same sources in other directories differed in the build id and the
    debug information only: the same digest. A changed byte of what is loaded (a constant
    string of the kernels): another."""
    data = _elf_with_build_id()
    note = struct.pack("<III", 4, 20, 3) + b"GNU\0"
    at = data.index(note) + len(note)
    rebuilt = bytearray(data)
    rebuilt[at:at + 20] = bytes(b ^ 0xFF for b in data[at:at + 20])
    # a text of the kernels' code (their catalogue's names are in the extension's constants)
    text = data.index(b"pi_integrate")
    edited = bytearray(data)
    edited[text] ^= 0x20

    def digest(b):
        with open(tmp_path / "f.so", "wb") as f:
            f.write(b)
        with open(tmp_path / "f.so", "rb") as f:
            return content_digest(f)
    base = digest(data)
    assert digest(bytes(rebuilt)) == base
    assert digest(bytes(edited)) != base
    # a file that only starts like ELF is hashed whole, no error
    assert len(digest(b"\x7fELF" + b"\0" * 10)) == 64


def test_digests_are_kept_across_starts_by_file_identity(tmp_path):
    """The cache in state_dir: a second start reads the digest instead of hashing (a file
    replaced by another of the same size keeps no stale digest: its inode or mtime differ)."""
    exe = tmp_path / "bench"
    exe.write_bytes(b"a" * 100)
    cache = str(tmp_path / CACHE_FILENAME)
    ids = FileIds(cache)
    first = ids.of(str(exe))
    ids.save()
    assert first["sha256"] in open(cache).read()
    # a second start: the kept digest serves (here a made-up one proves it was not hashed)
    kept = open(cache).read().replace(first["sha256"], "0" * 64)
    open(cache, "w").write(kept)
    assert FileIds(cache).of(str(exe))["sha256"] == "0" * 64
    new = tmp_path / "bench.new"
    new.write_bytes(b"b" * 100)
    os.replace(new, exe)
    assert FileIds(cache).of(str(exe))["sha256"] not in ("0" * 64, first["sha256"])
    # an unreadable cache is no error: the files are hashed again
    open(cache, "w").write("{not json")
    assert FileIds(cache).of(str(exe))["sha256"]


def test_a_same_size_edit_in_place_with_its_mtime_set_back_is_a_new_program(tmp_path):
    """A binary rewritten in place (same inode) with bytes of the same size and its mtime set
    back (``touch -r``, a copy keeping timestamps): device, inode, size and mtime are as they
    were, so the kept digest served and the runs of the new code counted as the old one's.
    The inode change time, which no user sets, tells: the look before a run sees a new
    program, the digest cache hashes again."""
    exe = tmp_path / "bench"
    _script(exe, "echo 1")
    os.utime(exe, ns=(10**18, 10**18))
    cache = str(tmp_path / CACHE_FILENAME)
    ids = FileIds(cache)
    first = ids.of(str(exe))["sha256"]
    ids.save()
    ws = Workloads(AgentConfig(agent_id="a1", workloads=[CommandWorkload("c", [str(exe)])]),
                   catalogue={}, file_ids=FileIds(cache))
    base = ws.get("c").program
    before = os.stat(exe)
    # the kernel stamps ctime from its coarse clock: the write comes after its next tick
    coarse = 5  # CLOCK_REALTIME_COARSE (Linux), which the time module does not name
    tick = time.clock_gettime_ns(coarse)
    while time.clock_gettime_ns(coarse) == tick:
        pass
    with open(exe, "r+b") as fh:  # in place: the same inode
        fh.write(b"#!/bin/sh\necho 2\n")
    os.utime(exe, ns=(10**18, 10**18))
    after = os.stat(exe)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)
    assert FileIds(cache).of(str(exe))["sha256"] != first
    assert ws.refresh("c") is True and ws.get("c").program != base


@pytest.mark.parametrize("argv, string", [
    (["sh", "-c", "./app 4"], "./app 4"),
    (["/bin/bash", "-ec", "app"], "app"),
    (["dash", "-o", "errexit", "-c", "app", "name", "x"], "app"),
    (["bash", "-e", "--", "script.sh"], None),  # a script, no -c
    (["sh", "script.sh"], None),
    (["bash", "--norc", "-c", "app"], None),  # long options: not parsed
    (["python3", "-c", "print(1)"], None),
    (["sh", "-c"], None),
])
def test_the_command_string_of_a_shell(argv, string):
    assert shell_string(argv) == string


def test_the_first_program_of_a_command_string_is_found_as_the_shell_finds_it(tmp_path):
    """A plain first word: on the PATH (after exec), or relative to the run's directory; a
    later word naming a file there (a script) too. Expansions, assignments, builtins and
    reserved words name no file; a pipeline's later programs are not looked at."""
    bin_dir, run_dir = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    run_dir.mkdir()
    app = _script(bin_dir / "app", "echo 1")
    local = _script(run_dir / "local", "echo 1")
    (run_dir / "input.py").write_text("print(1)\n")
    path, cwd = str(bin_dir), str(run_dir)
    assert shell_files("app {threads} input.py", path, cwd) == [
        app, str(run_dir / "input.py")]
    assert shell_files("exec app --x 1", path, cwd) == [app]
    (found,) = shell_files("./local", path, cwd)
    assert os.path.samefile(found, local)
    assert shell_files("app | ./local", path, cwd) == [app]
    assert shell_files("app>out", path, cwd) == []
    for string in ("$APP 1", "VAR=1 app", "cd /x && app", "for i in 1; do app; done",
                   "'app' 1", "{ app; }", "exec -a x app", "", "true"):
        assert shell_files(string, path, cwd) == [], string
    # a word found nowhere is named as given (FileIds says it is missing, as of an executable)
    assert shell_files("opptune-no-such-app", path, cwd) == ["opptune-no-such-app"]


def test_a_shell_commands_program_follows_the_program_its_string_runs(tmp_path):
    """sh -c "app {threads}": rebuilding app makes a new program, though the shell and the
    string are the same (before, only sh and the string were digested)."""
    app = _script(tmp_path / "app", "echo 1")
    cw = [CommandWorkload("s", ["sh", "-c", "app {threads}"], env={
        "PATH": f"{tmp_path}:{os.defpath}"})]
    base = _programs(cw)["s"]
    _script(tmp_path / "app", "echo 2")
    assert _programs(cw)["s"] != base
    # the string's program named relative to the run's directory (cwd)
    (tmp_path / "run").mkdir()
    rel = [CommandWorkload("r", ["sh", "-c", "./app"], cwd=str(tmp_path / "run"))]
    _script(tmp_path / "run" / "app", "echo 1")
    before = _programs(rel)["r"]
    _script(tmp_path / "run" / "app", "echo 2")
    assert _programs(rel)["r"] != before


def test_refresh_makes_the_digests_again_only_when_a_file_changed(tmp_path, monkeypatch):
    """Workloads.refresh (before each run): the same files stat'ed as before, nothing is
    digested; a script replaced or edited, a new program, which describe (the next hello)
    gives and the cache keeps for the next start."""
    exe = _script(tmp_path / "bench", "echo 1")
    cache = str(tmp_path / CACHE_FILENAME)
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path), workloads=[
        CommandWorkload("c", [exe, "{threads}"])]), catalogue={}, file_ids=FileIds(cache))
    before = ws.get("c").program
    digested = []
    real = ws.definition_of
    monkeypatch.setattr(ws, "definition_of", lambda w: digested.append(w.name) or real(w))
    assert ws.refresh("c") is False and digested == []
    new = tmp_path / "bench.new"
    new.write_text("#!/bin/sh\necho 2\n")
    os.replace(new, exe)
    assert ws.refresh("c") is True and digested == ["c"]
    assert ws.get("c").changed == [exe]  # what the agent's log names
    after = ws.get("c").program
    assert after != before and ws.describe()[0]["program"] == after
    assert ws.refresh("c") is False and digested == ["c"]
    # kept for the next start: an agent started now hashes nothing
    monkeypatch.setattr("opptune.agent.program_id.content_digest",
                        lambda f: pytest.fail("hashed again"))
    again = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path), workloads=[
        CommandWorkload("c", [exe, "{threads}"])]), catalogue={}, file_ids=FileIds(cache))
    assert again.get("c").program == after
    # rewritten in place with the same bytes (a reinstall): looked at again, the same program
    _script(tmp_path / "bench", "echo 2")
    monkeypatch.undo()
    assert ws.refresh("c") is False
    assert ws.refresh("unknown") is False


def test_a_run_after_its_program_changed_says_so_first_and_carries_the_new_digest(tmp_path):
    """Runner: the script of a command rewritten between two runs; the second run's check
    calls on_program_change before the run, with the new digest already the workload's,
    and its record carries it (the first's the old one)."""
    from opptune.agent.runner import Runner, RunSpec
    exe = _script(tmp_path / "bench", "echo '{\"time_s\": 1}'")
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path), workloads=[
        CommandWorkload("c", [exe])]), catalogue={})
    runner = Runner(ws, "p")
    told = []
    runner.on_program_change = lambda name: told.append((name, ws.get(name).program))
    spec = RunSpec("c", "default", [0], 1)
    first = runner.run_once(spec)
    assert told == [] and first.ok and first.time_s == 1
    new = tmp_path / "bench.new"
    new.write_text("#!/bin/sh\necho '{\"time_s\": 2}'\n")
    new.chmod(0o755)
    os.replace(new, exe)
    second = runner.run_once(spec)
    assert second.time_s == 2
    assert told == [("c", second.extra["program"])]
    assert second.extra["program"] != first.extra["program"]
    assert runner.run_once(spec).extra["program"] == second.extra["program"] and len(told) == 1
    runner.close()


def test_a_script_argument_is_looked_for_where_the_run_starts(tmp_path, monkeypatch):
    """command = ["python3", "bench.py"] with cwd = DIR: the run opens DIR/bench.py, whose
    edit makes a new program; before, bench.py was looked for where the agent runs (/ under
    its unit), not found, and its edits went unnoticed."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "agent").mkdir()
    monkeypatch.chdir(tmp_path / "agent")
    (tmp_path / "proj" / "bench.py").write_text("print(1)\n")
    cw = [CommandWorkload("c", ["python3", "bench.py"], cwd=str(tmp_path / "proj"))]
    before = _programs(cw)["c"]
    (tmp_path / "proj" / "bench.py").write_text("print(2)\n")
    assert _programs(cw)["c"] != before


def test_an_output_file_named_on_the_command_line_is_not_a_new_program_each_run(tmp_path,
                                                                                caplog):
    """command = [app, "out.csv"], app writing out.csv at each run: changed during the first
    run, it is taken for the runs' output at once: no hello, no drift, and the runs before keep
    counting (a drift at its first change would leave out the first run, the 1-core run of a
    characterisation). The executable rebuilt later still makes a new program."""
    from opptune.agent.runner import Runner, RunSpec
    out = tmp_path / "out.csv"
    out.write_text("")
    exe = _script(tmp_path / "app", f"date +%s%N >> {out}; echo '{{\"time_s\": 1}}'")
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path), workloads=[
        CommandWorkload("c", [exe, str(out)])]), catalogue={})
    runner = Runner(ws, "p")
    told = []
    runner.on_program_change = told.append
    spec = RunSpec("c", "default", [0], 1)
    recs = [runner.run_once(spec) for _ in range(5)]
    assert all(r.ok for r in recs) and len(out.read_text().split()) == 5
    assert told == []
    assert len({r.extra["program"] for r in recs}) == 1
    assert caplog.text.count(f"{out} changed during a run: taken for its output") == 1
    new = tmp_path / "app.new"
    new.write_text(f"#!/bin/sh\ndate +%s%N >> {out}; echo '{{\"time_s\": 2}}'\n")
    new.chmod(0o755)
    os.replace(new, exe)
    rebuilt = runner.run_once(spec)
    assert told == ["c"] and rebuilt.time_s == 2
    assert rebuilt.extra["program"] != recs[-1].extra["program"]
    runner.close()


@pytest.mark.parametrize("argv, script", [
    (["python3", "bench.py", "out.csv"], "bench.py"),
    (["/usr/bin/python3.11", "-u", "bench.py"], "bench.py"),
    (["python3", "-X", "dev", "bench.py"], "bench.py"),  # dev: -X's value, no file
    (["bash", "run.sh", "out.csv"], "run.sh"),
    (["bash", "-e", "--", "run.sh"], "run.sh"),
    (["perl", "-w", "run.pl"], "run.pl"),
    (["python3", "-m", "bench", "out.csv"], None),  # a module, out.csv its argument
    (["python3", "-c", "print(1)", "out.csv"], None),
    (["bash", "-ec", "echo", "out.csv"], None),
    (["python3", "missing.py", "out.csv"], None),  # the script, not there: runs fail
    (["./app", "out.csv"], None),  # no interpreter: its arguments may be its output
    # an option's value naming a file is no script (each interpreter's options known)
    (["node", "--require", "./setup.js", "app.js"], "app.js"),
    (["node", "-r", "setup.js", "--title", "out.csv", "app.js", "out.csv"], "app.js"),
    (["nodejs", "--import=./setup.js", "app.js"], "app.js"),
    (["node", "-e", "1", "app.js"], None),
    (["node", "--no-warnings", "--max-old-space-size=4096", "app.js", "out.csv"], "app.js"),
    (["python3", "-W", "out.csv", "bench.py", "out.csv"], "bench.py"),
    (["python3", "-Wignore", "-uX", "dev", "bench.py"], "bench.py"),
    (["python3", "-uc", "print(1)", "bench.py"], None),
    (["perl", "-I", "out.csv", "run.pl"], "run.pl"),
    (["perl", "-l0", "-Mstrict", "run.pl"], "run.pl"),  # -l0 and -M's values, no -e
    (["perl", "-wle", "print 1", "run.pl"], None),
    (["ruby", "-r", "setup.rb", "app.rb", "out.csv"], "app.rb"),
    (["ruby", "-I", "lib", "-e", "1"], None),
    (["bash", "--rcfile", "out.csv", "run.sh"], "run.sh"),
    (["bash", "-o", "pipefail", "-e", "run.sh"], "run.sh"),
])
def test_the_script_an_interpreter_runs(tmp_path, argv, script):
    for name in ("bench.py", "run.sh", "run.pl", "out.csv", "app.js", "setup.js", "app.rb",
                 "setup.rb"):
        (tmp_path / name).write_text("")
    got = program_id.script_of(argv, str(tmp_path))
    assert got == (str(tmp_path / script) if script else None)


@pytest.mark.parametrize("argv, program", [
    (["node", "--require", "./setup.js", "app.js", "out.csv"], ["./setup.js", "app.js"]),
    (["node", "--import=setup.js", "app.js"], ["setup.js", "app.js"]),
    (["ruby", "-rsetup.rb", "app.rb", "out.csv"], ["setup.rb", "app.rb"]),
    (["python3", "-u", "bench.py", "out.csv"], ["bench.py"]),
    # an option not known: the file after it, its value or the script, is taken; not the
    # one after that (an output there made every run a new program)
    (["python3", "--new-option", "bench.py", "out.csv"], ["bench.py"]),
    (["php", "-n", "run.php", "out.csv"], ["run.php"]),
    (["php", "-d", "memory_limit=1G", "run.php", "out.csv"], ["run.php"]),
    (["php", "run.php", "out.csv"], ["run.php"]),
    (["php", "--define=x=1", "run.php", "out.csv"], ["run.php"]),
    (["node", "--expose-gc", "--stack-size=900", "app.js", "out.csv"], ["app.js"]),
])
def test_the_files_that_are_an_interpreters_program(tmp_path, argv, program):
    """The script and the code an option loads (node --require, ruby -r) are the program,
    never output; where an option is not known, the file it is followed by is too."""
    for name in ("bench.py", "out.csv", "app.js", "setup.js", "app.rb", "setup.rb", "run.php"):
        (tmp_path / name).write_text("")
    assert program_id.program_scripts(argv, str(tmp_path)) == [os.path.join(tmp_path, p)
                                                                for p in program]


@pytest.mark.parametrize("command", [
    ["python3", "bench.py", "out.csv"],
    ["sh", "-c", "python3 bench.py out.csv"],
])
def test_a_script_an_interpreter_runs_edited_during_a_run_is_a_new_program(tmp_path, caplog,
                                                                           command):
    """command = python3 bench.py (or so in sh -c), bench.py rewriting itself during its
    second run: the third run is a new program (said before it, with its own digest), not
    output; out.csv, which every run writes, is output. Before, bench.py was taken for output
    at its edit: no drift, its runs mixed with the old script's until the agent restarted."""
    from opptune.agent.runner import Runner, RunSpec
    if command[0] == "python3":
        command = [sys.executable, *command[1:]]
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, os\n"
        "n = len(open('out.csv').read().split()) + 1\n"
        "open('out.csv', 'a').write(f'{n}\\n')\n"
        "print(json.dumps({'time_s': 1.0}))\n"
        "if n == 2:\n"
        "    body = open(__file__).read().replace(\"'time_s': 1.0\", \"'time_s': 2.0\")\n"
        "    open(__file__, 'w').write(body)\n")
    (tmp_path / "out.csv").write_text("")
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"), workloads=[
        CommandWorkload("c", command, cwd=str(tmp_path),
                        env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"})]),
        catalogue={})
    runner = Runner(ws, "p", state_dir=str(tmp_path / "state"))
    told = []
    runner.on_program_change = told.append
    spec = RunSpec("c", "default", [0], 1)
    recs = []
    for _ in range(4):
        recs.append(runner.run_once(spec))
        assert recs[-1].ok, recs[-1].error
    runner.close()
    assert [r.time_s for r in recs] == [1.0, 1.0, 2.0, 2.0]
    assert told == ["c"]
    programs = [r.extra["program"] for r in recs]
    assert programs[0] == programs[1] != programs[2] == programs[3]
    assert f"{script} changed during a run" not in caplog.text
    assert caplog.text.count("out.csv changed during a run: taken for its output") == 1


@pytest.mark.skipif(shutil.which("node") is None, reason="no node")
def test_a_script_after_an_options_file_edited_during_a_run_is_a_new_program(tmp_path, caplog):
    """node --require ./setup.js bench.js out.csv, bench.js rewriting itself during its
    second run: the third run is a new program, said before it. Before, --require's value
    setup.js was taken for the script, and bench.js's edit for output: no drift."""
    from opptune.agent.runner import Runner, RunSpec
    (tmp_path / "setup.js").write_text("globalThis.factor = 1;\n")
    script = tmp_path / "bench.js"
    script.write_text(
        "const fs = require('fs');\n"
        "const n = fs.readFileSync('out.csv', 'utf8').split(/\\s+/).filter(Boolean).length + 1;\n"
        "fs.appendFileSync('out.csv', n + '\\n');\n"
        "console.log(JSON.stringify({time_s: 1 * factor}));\n"
        "if (n === 2) fs.writeFileSync(__filename, fs.readFileSync(__filename, 'utf8')"
        ".replace('1 * factor', '2 * factor'));\n")
    (tmp_path / "out.csv").write_text("")
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"), workloads=[
        CommandWorkload("c", ["node", "--require", "./setup.js", "bench.js", "out.csv"],
                        cwd=str(tmp_path))]), catalogue={})
    runner = Runner(ws, "p", state_dir=str(tmp_path / "state"))
    told = []
    runner.on_program_change = told.append
    spec = RunSpec("c", "default", [0], 1)
    recs = [runner.run_once(spec) for _ in range(4)]
    runner.close()
    assert [r.time_s for r in recs] == [1.0, 1.0, 2.0, 2.0], [r.error for r in recs]
    assert told == ["c"]
    assert f"{script} changed during a run" not in caplog.text
    assert caplog.text.count("out.csv changed during a run: taken for its output") == 1


def test_a_login_shells_program_found_by_name_is_not_covered(tmp_path):
    """bash -lc "app": the login shell's profile sets its own PATH (here ~/.bash_profile puts
    another app first; Debian's /etc/profile sets root's), so the app the run executes is not
    the one the entry's PATH finds. That program is left out of the digest rather than
    digested wrongly (README, the program section): rebuilding the app the entry's PATH finds
    is no new program. A program named by its path in the string still is covered."""
    from opptune.agent.runner import Runner, RunSpec
    env_bin, profile_bin, home = tmp_path / "bin", tmp_path / "profile-bin", tmp_path / "home"
    for d in (env_bin, profile_bin, home, tmp_path / "state"):
        d.mkdir()
    _script(env_bin / "app", "echo '{\"time_s\": 1}'")
    _script(profile_bin / "app", "echo '{\"time_s\": 2}'")
    (home / ".bash_profile").write_text(f"PATH={profile_bin}:$PATH\n")
    env = {"PATH": f"{env_bin}:/usr/bin:/bin", "HOME": str(home)}
    cw = CommandWorkload("s", ["bash", "-lc", "app {threads}"], env=env)
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"),
                               workloads=[cw]), catalogue={})
    runner = Runner(ws, "p", state_dir=str(tmp_path / "state"))
    rec = runner.run_once(RunSpec("s", "default", [0], 1))
    runner.close()
    assert rec.ok and rec.time_s == 2, rec.error  # the profile's app, not the entry's PATH's
    base = _programs([cw])["s"]
    _script(env_bin / "app", "echo '{\"time_s\": 3}'")
    assert _programs([cw])["s"] == base
    # without -l the entry's PATH is the run's: covered
    plain = CommandWorkload("s", ["bash", "-c", "app {threads}"], env=env)
    before = _programs([plain])["s"]
    _script(env_bin / "app", "echo '{\"time_s\": 4}'")
    assert _programs([plain])["s"] != before
    # a path in the string: covered under -l too
    by_path = CommandWorkload("s", ["bash", "-lc", f"{profile_bin}/app"], env=env)
    before = _programs([by_path])["s"]
    _script(profile_bin / "app", "echo '{\"time_s\": 5}'")
    assert _programs([by_path])["s"] != before
    assert program_id.reads_profile(["bash", "-lc", "app"])
    assert program_id.reads_profile(["bash", "-e", "-i", "-c", "app"])
    assert not program_id.reads_profile(["bash", "-ec", "app"])


@pytest.mark.parametrize("line, names", [
    ("#!/bin/sh -e", ["/bin/sh"]),
    ("#! /usr/bin/env tool", ["/usr/bin/env", "BIN/tool"]),
    ("#!/usr/bin/env -S A=1 tool -x", ["/usr/bin/env", "BIN/tool"]),
    ("#!/usr/bin/env --split-string=tool -x", ["/usr/bin/env", "BIN/tool"]),
    ("#!/usr/bin/env tool -x", ["/usr/bin/env", "tool -x"]),  # env takes it whole: fails
    ("#!/usr/bin/env nosuch", ["/usr/bin/env", "nosuch"]),  # said missing by its name
    ("#!/usr/bin/env -i tool", ["/usr/bin/env"]),  # other options: env alone
    ("#!/usr/bin/env", ["/usr/bin/env"]),
    ("print(1)", []),
])
def test_the_interpreters_a_shebang_line_names(tmp_path, line, names):
    """A #! line's interpreter, and through env the program the run's PATH finds."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_text("")
    (tmp_path / "bin" / "tool").chmod(0o755)
    (tmp_path / "script").write_text(line + "\nrest\n")
    got = program_id.shebang(str(tmp_path / "script"), str(tmp_path / "bin"))
    assert got == [n.replace("BIN", str(tmp_path / "bin")) for n in names]


def test_a_relative_path_entry_is_taken_from_the_runs_directory(tmp_path, monkeypatch):
    """PATH = "bin:..." (or ".", or an empty entry: the directory itself): the run's execvp
    takes it from the directory the run starts in, the entry's cwd, and so does its digest.
    Before, the digest took it from the agent's working directory, where another app was (or
    none): the app the runs execute rebuilt made no new program."""
    from opptune.agent.runner import Runner, RunSpec
    run, agent, state = tmp_path / "run", tmp_path / "agent", tmp_path / "state"
    for d in (run / "bin", agent / "bin", state):
        d.mkdir(parents=True)
    _script(run / "bin" / "app", "echo '{\"time_s\": 1}'")
    _script(agent / "bin" / "app", "echo '{\"time_s\": 9}'")
    _script(agent / "app", "echo '{\"time_s\": 9}'")
    monkeypatch.chdir(agent)
    cw = CommandWorkload("c", ["app", "{threads}"], env={"PATH": f"bin:{os.defpath}"},
                         cwd=str(run))
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(state), workloads=[cw]),
                   catalogue={})
    runner = Runner(ws, "p", state_dir=str(state))
    rec = runner.run_once(RunSpec("c", "default", [0], 1))
    runner.close()
    assert rec.ok and rec.time_s == 1, rec.error  # the run's bin/app, not the agent's
    for workload, app in [
            (cw, run / "bin" / "app"),
            (CommandWorkload("s", ["sh", "-c", "app {threads}"], env=cw.env, cwd=str(run)),
             run / "bin" / "app"),
            (CommandWorkload("d", ["app"], env={"PATH": f".:{os.defpath}"},
                             cwd=str(run / "bin")), run / "bin" / "app"),
            (CommandWorkload("e", ["app"], env={"PATH": f":{os.defpath}"},
                             cwd=str(run / "bin")), run / "bin" / "app")]:
        before = _programs([workload])[workload.name]
        _script(agent / "bin" / "app", "echo 8")  # the agent's: no matter
        _script(agent / "app", "echo 8")
        assert _programs([workload])[workload.name] == before, workload
        _script(app, f"echo {workload.name}")  # the run's, rebuilt: a new program
        assert _programs([workload])[workload.name] != before, workload
    # a #! line's env finds its program on the run's PATH from the run's directory too
    _script(run / "bin" / "tool", "echo 1")
    (run / "script").write_text("#!/usr/bin/env tool\n")
    assert program_id.shebang(str(run / "script"), "bin", str(run)) == [
        "/usr/bin/env", str(run / "bin" / "tool")]


def test_a_tilde_in_a_runs_path_is_taken_as_it_is(tmp_path, monkeypatch, caplog):
    """PATH = "~/bin:...": execvp does not expand the "~" (nor does dash): the run looks in a
    directory named "~" in its own directory, and so does the digest. bash expands it with
    the HOME of the run, which the agent knows only then: a bash string's program named by a
    bare name is left out, as a login shell's, rather than said missing (before: a warning
    that the program its runs do find is not there)."""
    from opptune.agent.runner import Runner, RunSpec
    home, run, state = tmp_path / "home", tmp_path / "run", tmp_path / "state"
    for d in (home / "bin", run / "~" / "bin", state):
        d.mkdir(parents=True)
    _script(home / "bin" / "app", "echo '{\"time_s\": 2}'")
    literal = _script(run / "~" / "bin" / "app", "echo '{\"time_s\": 3}'")
    env = {"PATH": "~/bin:/usr/bin:/bin", "HOME": str(home)}
    plain = CommandWorkload("plain", ["app"], env=env, cwd=str(run))
    bash = CommandWorkload("bash", ["bash", "-c", "app {threads}"], env=env, cwd=str(run))
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(state), workloads=[plain, bash]),
                   catalogue={})
    runner = Runner(ws, "p", state_dir=str(state))
    recs = [runner.run_once(RunSpec(n, "default", [0], 1)) for n in ("plain", "bash")]
    runner.close()
    assert [r.time_s for r in recs] == [3, 2], [r.error for r in recs]
    before = _programs([plain, bash])
    _script(run / "~" / "bin" / "app", "echo 4")
    after = _programs([plain, bash])
    assert after["plain"] != before["plain"] and after["bash"] == before["bash"]
    assert ws.get("plain").seen[0][0] == literal
    assert "no program 'app'" not in caplog.text
    # where no such directory is in the run's, its runs fail, and the start's check and the
    # run's error say what to write instead
    from opptune.agent.workload_check import tilde_hint
    assert tilde_hint(env) == (f" (a '~' in PATH is not expanded for the run: write its "
                               f"entries out in full, ~/bin as {home}/bin)")
    os.unlink(literal)
    runner = Runner(ws, "p", state_dir=str(state))
    rec = runner.run_once(RunSpec("plain", "default", [0], 1))
    runner.close()
    assert not rec.ok and rec.error == ("cannot start app: no program 'app' on the PATH of its "
                                        f"run (~/bin:/usr/bin:/bin){tilde_hint(env)}")


def test_the_agents_own_path_is_read_once(tmp_path, monkeypatch):
    """A workload whose env sets no PATH or LD_LIBRARY_PATH gets the agent's, which the agent
    never changes: read at its start, as its hwcaps variables, not at each look before a run
    (benchmarks/program_check.py)."""
    first, other = tmp_path / "first", tmp_path / "other"
    for d in (first, other):
        d.mkdir()
        _script(d / "app", f"echo {d.name}")
    monkeypatch.setenv("PATH", str(first))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(first))
    ws = Workloads(AgentConfig(agent_id="a1", workloads=[CommandWorkload("c", ["app"])]),
                   catalogue={})
    assert ws.get("c").seen[0][0] == str(first / "app")
    monkeypatch.setenv("PATH", str(other))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(other))
    assert ws.refresh("c") is False
    assert ws._env(ws.get("c").command)["LD_LIBRARY_PATH"] == str(first)


def test_a_program_through_a_symlink_follows_its_target(tmp_path):
    """command = [app], app a symlink (update-alternatives, a `current` link): its target
    edited in place, the link moved to another target, the target replaced by mv (a new
    inode) are each a new program at the look before the next run; the same bytes written
    again are not."""
    _script(tmp_path / "v1", "echo 1")
    _script(tmp_path / "v2", "echo 2")
    (tmp_path / "app").symlink_to("v1")
    ws = Workloads(AgentConfig(agent_id="a1", workloads=[
        CommandWorkload("c", [str(tmp_path / "app")])]), catalogue={})
    programs = [ws.get("c").program]
    _script(tmp_path / "v1", "echo 3")  # in place: the same inode
    assert ws.refresh("c") is True
    programs.append(ws.get("c").program)
    (tmp_path / "app").unlink()
    (tmp_path / "app").symlink_to("v2")
    assert ws.refresh("c") is True
    programs.append(ws.get("c").program)
    new = tmp_path / "v2.new"
    new.write_text("#!/bin/sh\necho 4\n")
    os.replace(new, tmp_path / "v2")
    assert ws.refresh("c") is True
    programs.append(ws.get("c").program)
    assert len(set(programs)) == 4
    _script(tmp_path / "v2", "echo 4")  # the same bytes again: looked at, the same program
    assert ws.refresh("c") is False and ws.get("c").program == programs[-1]


def test_a_cwd_given_as_a_link_is_followed_at_each_run(tmp_path):
    """A workload's cwd that is a link (``current`` -> a release): the configuration keeps the
    link, so the run enters what it points to then and the digest looks there too. It was
    resolved when the configuration was read: a link re-pointed to a new release ran the new
    ``./bench`` while the digest read the old one's (no new program)."""
    from opptune.shared.config import load_agent_config
    for release, body in (("r1", "echo 1"), ("r2", "echo 2")):
        (tmp_path / release).mkdir()
        _script(tmp_path / release / "bench", body)
    os.symlink("r1", tmp_path / "current")
    cfg = tmp_path / "agent.toml"
    cfg.write_text('agent_id = "a1"\nbench_kernels = []\n[[workloads]]\nname = "c"\n'
                   'command = ["./bench"]\ncwd = "current"\n')
    config = load_agent_config(cfg)
    (w,) = config.workloads
    assert w.cwd == str(tmp_path / "current")
    ws = Workloads(config, catalogue={})
    before = ws.get("c").program
    os.unlink(tmp_path / "current")
    os.symlink("r2", tmp_path / "current")
    assert ws.refresh("c") is True and ws.get("c").program != before
