"""The shared libraries a command's program loads are part of its program digest
(agent/shared_libs.py): found as ld.so finds them, without running the program. Before, a
library rebuilt or upgraded under an unchanged executable was the same program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from opptune.agent.runner import Runner, RunSpec
from opptune.agent.shared_libs import Libraries, read_ld_cache
from opptune.agent.workloads import Workloads
from opptune.daemon.drift import changed_programs
from opptune.shared.config import AgentConfig, CommandWorkload

CC = shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")

APP = '#include <stdio.h>\nint value(void);\n' \
      'int main(void) { printf("{\\"time_s\\": %d}\\n", value()); return 0; }\n'


def build_lib(d, value: int) -> None:
    """libbench.so in ``d``, its value() returning ``value``; replaced as a build does."""
    d.mkdir(exist_ok=True)
    (d / "bench.c").write_text(f"int value(void) {{ return {value}; }}\n")
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(d / "libbench.so.new"),
                    str(d / "bench.c")], check=True)
    os.replace(d / "libbench.so.new", d / "libbench.so")


def build_app(tmp, rpath: str | None) -> str:
    (tmp / "app.c").write_text(APP)
    cmd = [CC, "-o", str(tmp / "app"), str(tmp / "app.c"), f"-L{tmp / 'lib'}", "-lbench"]
    if rpath:
        cmd.append(f"-Wl,-rpath,{rpath}")
    subprocess.run(cmd, check=True)
    return str(tmp / "app")


@needs_cc
def test_a_library_rebuilt_under_the_same_executable_is_a_new_program(tmp_path):
    """app linked to libbench.so by an $ORIGIN rpath: rebuilding the library (a new value)
    makes the next run a new program, said before it and carried by its record; the
    executable never changed."""
    build_lib(tmp_path / "lib", 1)
    app = build_app(tmp_path, "$ORIGIN/lib")
    (tmp_path / "state").mkdir()
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"), workloads=[
        CommandWorkload("c", [app])]), catalogue={})
    runner = Runner(ws, "p", state_dir=str(tmp_path / "state"))
    told = []
    runner.on_program_change = told.append
    spec = RunSpec("c", "default", [0], 1)
    first = runner.run_once(spec)
    assert first.ok and first.time_s == 1, first.error
    build_lib(tmp_path / "lib", 2)
    second = runner.run_once(spec)
    runner.close()
    assert second.ok and second.time_s == 2, second.error
    assert told == ["c"]
    assert second.extra["program"] != first.extra["program"]


@needs_cc
def test_the_library_digested_is_the_one_the_runs_ld_library_path_finds(tmp_path):
    """No rpath: the run's LD_LIBRARY_PATH (the entry's env) says which libbench.so loads,
    and that one is digested; the other one's rebuild is no new program."""
    build_lib(tmp_path / "lib", 1)
    build_lib(tmp_path / "other", 5)
    app = build_app(tmp_path, None)

    def program(lib_dir) -> str:
        cw = CommandWorkload("c", [app], env={"LD_LIBRARY_PATH": str(lib_dir)})
        return Workloads(AgentConfig(agent_id="a1", workloads=[cw]),
                         catalogue={}).get("c").program

    assert str(tmp_path / "lib" / "libbench.so") in Libraries().of(app, str(tmp_path / "lib"))
    before = program(tmp_path / "lib")
    build_lib(tmp_path / "other", 6)
    assert program(tmp_path / "lib") == before
    build_lib(tmp_path / "lib", 2)
    assert program(tmp_path / "lib") != before


@pytest.mark.skipif(not os.path.exists("/etc/ld.so.cache") or shutil.which("ldconfig") is None,
                    reason="no ld.so.cache or ldconfig")
def test_the_ld_so_cache_is_read_as_ldconfig_prints_it():
    names = read_ld_cache()
    printed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    pairs = [(ln.split()[0], ln.rsplit("=> ", 1)[1]) for ln in printed.splitlines()[1:]
             if "=> " in ln]
    assert pairs and all(path in names.get(name, []) for name, path in pairs)


@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd")
def test_the_libraries_found_are_those_ld_so_loads():
    """The same files as ldd (ld.so --list, which loads them) names for this Python and sh."""
    for program in (os.path.realpath(sys.executable), shutil.which("sh")):
        listed = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
        loaded = {os.path.realpath(w) for ln in listed.splitlines()
                  for w in ln.split() if w.startswith("/")}
        found = {os.path.realpath(p) for p in Libraries().of(program)}
        assert found == loaded, program


def _new_cache(entries: list[tuple[str, str]]) -> bytes:
    """A cache in glibc's new format: header, entries, then their strings (offsets from the
    header's start)."""
    import struct
    strings, offsets = b"", []
    base = 48 + 24 * len(entries)
    for name, path in entries:
        offsets.append((base + len(strings), base + len(strings) + len(name) + 1))
        strings += name.encode() + b"\0" + path.encode() + b"\0"
    head = b"glibc-ld.so.cache1.1" + struct.pack("=IIB3xI3I", len(entries), len(strings), 0,
                                                   0, 0, 0, 0)
    return head + b"".join(struct.pack("=iIIIQ", 0x303, k, v, 0, 0)
                           for k, v in offsets) + strings


def test_both_layouts_of_the_ld_so_cache_are_read(tmp_path):
    """The new format alone (glibc 2.32 on), and after an old-format part (older ldconfig's
    compat layout); an unknown file is no cache."""
    import struct
    entries = [("libfoo.so.1", "/opt/lib/libfoo.so.1"), ("libfoo.so.1", "/usr/lib/libfoo.so.1")]
    new = tmp_path / "new.cache"
    new.write_bytes(_new_cache(entries))
    old = tmp_path / "old.cache"
    old_part = b"ld.so-1.7.0\0" + struct.pack("=I", 1) + struct.pack("=iII", 0x303, 0, 0)
    old.write_bytes(old_part + b"\0" * (-len(old_part) % 8) + _new_cache(entries))
    for path in (new, old):
        assert read_ld_cache(str(path)) == {"libfoo.so.1": ["/opt/lib/libfoo.so.1",
                                                            "/usr/lib/libfoo.so.1"]}
    (tmp_path / "junk").write_bytes(b"not a cache")
    assert read_ld_cache(str(tmp_path / "junk")) == {}
    assert read_ld_cache(str(tmp_path / "missing")) == {}


@needs_cc
def test_an_upgraded_agent_tells_its_program_from_before_the_libraries(tmp_path, monkeypatch):
    """The hello says beside a dynamic program's digest the digest without its libraries
    (``program_core``), which is what an agent that did not cover them said: the daemon takes
    it for the same program (no drift: the measurements from before the upgrade still
    count), while a library rebuilt after it is a change. A script's digest has no libraries:
    nothing is said beside it."""
    build_lib(tmp_path / "lib", 1)
    app = build_app(tmp_path, "$ORIGIN/lib")
    script = tmp_path / "bench.sh"
    script.write_text("#!/bin/sh\necho '{\"time_s\": 1}'\n")
    script.chmod(0o755)
    (tmp_path / "state").mkdir()
    config = AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"), workloads=[
        CommandWorkload("c", [app]), CommandWorkload("s", [str(script)])])
    now = {w["name"]: w for w in Workloads(config, catalogue={}).describe()}
    # the agent of before: the same digests with no library found
    monkeypatch.setattr(Libraries, "of", lambda self, exe, lib_path: [])
    before = {w["name"]: w for w in Workloads(config, catalogue={}).describe()}
    monkeypatch.undo()
    assert now["c"]["program"] != before["c"]["program"]
    assert now["c"]["program_core"] == before["c"]["program"]
    assert "program_core" not in now["s"] and now["s"]["program"] == before["s"]["program"]
    # the daemon's rule (daemon/drift.py)
    assert changed_programs([before["c"]], [now["c"]]) == []
    build_lib(tmp_path / "lib", 2)
    rebuilt = {w["name"]: w for w in Workloads(config, catalogue={}).describe()}
    assert rebuilt["c"]["program_core"] == now["c"]["program_core"]
    assert changed_programs([now["c"]], [rebuilt["c"]]) == ["c"]
    # an executable rebuilt under an upgrade is a change all the same
    assert changed_programs([{**before["c"], "program": "0" * 16}], [now["c"]]) == ["c"]
