"""The shared libraries a command's program loads are part of its program digest
(agent/shared_libs.py): found as ld.so finds them, without running the program. Before, a
library rebuilt or upgraded under an unchanged executable was the same program."""

from __future__ import annotations

import json
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
    d.mkdir(parents=True, exist_ok=True)
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


def _new_cache(entries: list[tuple[str, str]], hwcaps: dict[str, int] | None = None
               ) -> bytes:
    """A cache in glibc's new format: header, entries (``hwcaps``: path -> its entry's
    hwcap, else 0), then their strings (offsets from the header's start)."""
    import struct
    strings, offsets = b"", []
    base = 48 + 24 * len(entries)
    for name, path in entries:
        offsets.append((base + len(strings), base + len(strings) + len(name) + 1,
                        (hwcaps or {}).get(path, 0)))
        strings += name.encode() + b"\0" + path.encode() + b"\0"
    head = b"glibc-ld.so.cache1.1" + struct.pack("=IIB3xI3I", len(entries), len(strings), 0,
                                                   0, 0, 0, 0)
    return head + b"".join(struct.pack("=iIIIQ", 0x303, k, v, 0, hw)
                           for k, v, hw in offsets) + strings


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
    count), while a library rebuilt after it is a change. The same for a script's ``#!``
    interpreter and its libraries, which agents before did not cover either."""
    from opptune.agent import program_id, workloads
    build_lib(tmp_path / "lib", 1)
    app = build_app(tmp_path, "$ORIGIN/lib")
    script = tmp_path / "bench.sh"
    script.write_text("#!/bin/sh\necho '{\"time_s\": 1}'\n")
    script.chmod(0o755)
    (tmp_path / "state").mkdir()
    config = AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"), workloads=[
        CommandWorkload("c", [app]), CommandWorkload("s", [str(script)])])
    now = {w["name"]: w for w in Workloads(config, catalogue={}).describe()}
    # the agent of before (0.4): the same digests with no library nor #! interpreter found
    for module in (program_id, workloads):
        monkeypatch.setattr(module, "program_files", lambda *args: [])
    before = {w["name"]: w for w in Workloads(config, catalogue={}).describe()}
    monkeypatch.undo()
    for name in ("c", "s"):
        assert now[name]["program"] != before[name]["program"]
        assert now[name]["program_core"] == before[name]["program"]
        # the daemon's rule (daemon/drift.py)
        assert changed_programs([before[name]], [now[name]]) == []
    build_lib(tmp_path / "lib", 2)
    rebuilt = {w["name"]: w for w in Workloads(config, catalogue={}).describe()}
    assert rebuilt["c"]["program_core"] == now["c"]["program_core"]
    assert changed_programs([now["c"]], [rebuilt["c"]]) == ["c"]
    # an executable rebuilt under an upgrade is a change all the same
    assert changed_programs([{**before["c"], "program": "0" * 16}], [now["c"]]) == ["c"]


def build_interp(tmp, add: int) -> None:
    """bin/myinterp, a script's interpreter: prints value() (lib/libbench.so) + ``add``,
    whatever script it is given; replaced as a build does."""
    (tmp / "bin").mkdir(exist_ok=True)
    (tmp / "interp.c").write_text(APP.replace("value()", f"value() + {add}"))
    subprocess.run([CC, "-o", str(tmp / "bin" / "myinterp.new"), str(tmp / "interp.c"),
                    f"-L{tmp / 'lib'}", "-lbench", "-Wl,-rpath,$ORIGIN/../lib"], check=True)
    os.replace(tmp / "bin" / "myinterp.new", tmp / "bin" / "myinterp")


@needs_cc
@pytest.mark.parametrize("line", ["#!{bin}/myinterp", "#!/usr/bin/env myinterp",
                                  "#! /usr/bin/env -S myinterp -x"])
def test_a_scripts_interpreter_and_its_libraries_are_its_program(tmp_path, line):
    """A script run as the command (its #! line names its interpreter, by path or through
    env on the run's PATH): the interpreter rebuilt, or a library it loads rebuilt, makes the
    next run a new program, said before it; the script never changed. Before, only the
    script was digested."""
    if not os.access("/usr/bin/env", os.X_OK):
        pytest.skip("no /usr/bin/env")
    build_lib(tmp_path / "lib", 1)
    build_interp(tmp_path, 0)
    script = tmp_path / "bench"
    script.write_text(line.format(bin=tmp_path / "bin") + "\nwhatever the interpreter reads\n")
    script.chmod(0o755)
    (tmp_path / "state").mkdir()
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ.get('PATH', os.defpath)}"}
    _new_program_at_each_rebuild(tmp_path, CommandWorkload("c", [str(script)], env=env))


def _new_program_at_each_rebuild(tmp_path, workload):
    """Runs of ``workload`` (its script's interpreter and library built by build_interp and
    build_lib under ``tmp_path``) before and after its library and then its interpreter are
    rebuilt: three programs, each change told."""
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(tmp_path / "state"),
                               workloads=[workload]), catalogue={})
    runner = Runner(ws, "p", state_dir=str(tmp_path / "state"))
    told = []
    runner.on_program_change = told.append
    spec = RunSpec("c", "default", [0], 1)
    recs = [runner.run_once(spec)]
    build_lib(tmp_path / "lib", 2)
    recs.append(runner.run_once(spec))
    build_interp(tmp_path, 10)
    recs.append(runner.run_once(spec))
    runner.close()
    assert [r.time_s for r in recs] == [1, 2, 12], [r.error for r in recs]
    assert told == ["c", "c"]
    assert len({r.extra["program"] for r in recs}) == 3


def _loader_facts(program: str):
    """What this machine's loader says it searches (loader_facts.LoaderFacts)."""
    from opptune.agent.shared_libs import _read
    elf = _read(program)
    return Libraries().loader_facts(elf.interp, elf.kind)


def _diagnostics() -> bool:
    interp = "/lib64/ld-linux-x86-64.so.2"
    return os.uname().machine == "x86_64" and os.path.exists(interp) and subprocess.run(
        [interp, "--list-diagnostics"], capture_output=True).returncode == 0


needs_diagnostics = pytest.mark.skipif(CC is None or not _diagnostics(),
                                       reason="no C compiler or no glibc 2.33 x86-64 loader")


@needs_diagnostics
def test_the_library_digested_is_the_glibc_hwcaps_one_ld_so_loads(tmp_path):
    """libbench.so in a directory and in its glibc-hwcaps/x86-64-v2, -v3, -v4 subdirectories
    (each returning another value): the real run says which one ld.so loaded, and that one
    is digested, no other. An rpath with $LIB and $PLATFORM finds the library the run loads
    there. Before, the plain one was digested whatever ran."""
    values = {"": 1, "x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}
    d = tmp_path / "lib"
    for level, value in values.items():
        build_lib(d / "glibc-hwcaps" / level if level else d, value)
    app = build_app(tmp_path, None)
    ran = subprocess.run([app], capture_output=True, text=True, check=True,
                         env={"LD_LIBRARY_PATH": str(d)}).stdout
    level = {v: k for k, v in values.items()}[int(ran.split(":")[1].strip(" }\n"))]
    loaded = str(d / "glibc-hwcaps" / level / "libbench.so" if level else d / "libbench.so")
    libs = Libraries().of(app, str(d))
    assert loaded in libs and [p for p in libs if "libbench" in p] == [loaded]
    facts = _loader_facts(app)
    assert level == (facts.hwcaps[0] if facts.hwcaps else "")
    build_lib(tmp_path / "tok" / facts.lib / facts.platform, 7)
    app = build_app(tmp_path, "$ORIGIN/tok/$LIB/$PLATFORM")
    assert subprocess.run([app], capture_output=True, text=True, check=True
                          ).stdout == '{"time_s": 7}\n'
    assert str(tmp_path / "tok" / facts.lib / facts.platform / "libbench.so") in \
        Libraries().of(app)


@needs_diagnostics
def test_the_cpu_flags_give_the_levels_the_loader_gives():
    """Where the loader cannot say (glibc before 2.33), /proc/cpuinfo's flags say which
    x86-64 levels it supports: the same as this machine's loader says."""
    from opptune.agent.loader_facts import cpuinfo_levels
    assert cpuinfo_levels() == _loader_facts(os.path.realpath(sys.executable)).hwcaps


@needs_cc
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 levels")
def test_a_glibc_hwcaps_level_the_loader_does_not_support_is_passed_over(tmp_path):
    """A program whose loader (a fake one: the test's) supports x86-64-v3 and -v2, not -v4:
    of libbench.so under $ORIGIN/$LIB/$PLATFORM's glibc-hwcaps/x86-64-v4 and -v2, the -v2 one
    is its library. A loader others may write or replace is not run: its $LIB is not known,
    so that path is left out."""
    build_lib(tmp_path / "lib", 1)
    under = tmp_path / "mylib" / "myplat" / "glibc-hwcaps"
    build_lib(under / "x86-64-v4", 4)
    build_lib(under / "x86-64-v2", 2)
    loader = tmp_path / "ld-fake.so"
    loader.write_text("#!/bin/sh\n"
                      f"echo ran >> {tmp_path / 'loader-ran'}\n"
                      "echo 'dl_dst_lib=\"mylib\"'\necho 'dl_platform=\"myplat\"'\n"
                      "echo 'dl_hwcaps_subdirs=\"x86-64-v4:x86-64-v3:x86-64-v2\"'\n"
                      "echo 'dl_hwcaps_subdirs_active=0x6'\n")
    loader.chmod(0o755)
    (tmp_path / "app.c").write_text(APP)
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(tmp_path / "app.c"),
                    f"-L{tmp_path / 'lib'}", "-lbench", "-Wl,-rpath,$ORIGIN/$LIB/$PLATFORM",
                    f"-Wl,--dynamic-linker={loader}"], check=True)
    app = str(tmp_path / "app")
    libs = Libraries().of(app)
    assert libs[0] == str(loader)
    assert [p for p in libs if "libbench" in p] == [str(under / "x86-64-v2" / "libbench.so")]
    loader.chmod(0o757)
    os.utime(loader, ns=(1, 1))  # another loader file for the facts kept by its identity
    (tmp_path / "loader-ran").unlink()
    assert [p for p in Libraries().of(app) if "libbench" in p] == []
    assert not (tmp_path / "loader-ran").exists()
    # nor one in a directory others may write (they could put another file in its place)
    loader.chmod(0o755)
    os.utime(loader, ns=(2, 2))
    tmp_path.chmod(0o777)
    try:
        assert [p for p in Libraries().of(app) if "libbench" in p] == []
    finally:
        tmp_path.chmod(0o700)
    assert not (tmp_path / "loader-ran").exists()


@needs_cc
def test_a_musl_program_is_searched_as_musl_does(tmp_path):
    """A program whose loader is musl's (PT_INTERP ld-musl-ARCH.so.1; a fake tree): its
    libraries come from /etc/ld-musl-ARCH.path's directories (colons and newlines), else from
    /lib, /usr/local/lib, /usr/lib; libc's own names are the loader. Before, glibc's search
    was made (its cache, /lib64...)."""
    root = tmp_path / "root"
    build_lib(tmp_path / "lib", 1)
    for d in ("a", "c"):
        build_lib(tmp_path / d, 1)
    build_lib(root / "usr" / "lib", 1)
    (tmp_path / "app.c").write_text(APP)
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(tmp_path / "app.c"),
                    f"-L{tmp_path / 'lib'}", "-lbench",
                    "-Wl,--dynamic-linker=/lib/ld-musl-x86_64.so.1"], check=True)
    app = str(tmp_path / "app")
    interp = str(root / "lib" / "ld-musl-x86_64.so.1")
    assert Libraries(root=str(root)).of(app) == [interp, str(root / "usr/lib/libbench.so")]
    (root / "etc").mkdir()
    (root / "etc" / "ld-musl-x86_64.path").write_text(
        f"{tmp_path / 'b'}:{tmp_path / 'c'}\n{tmp_path / 'a'}\n")
    assert Libraries(root=str(root)).of(app) == [interp, str(tmp_path / "c/libbench.so")]
    assert Libraries(root=str(root)).of(app, str(tmp_path / "a")) == [
        interp, str(tmp_path / "a/libbench.so")]


def _workload_program(app: str, env: dict) -> str:
    """The program digest of a workload running ``app`` with ``env``."""
    cw = CommandWorkload("c", [app], env=env)
    return Workloads(AgentConfig(agent_id="a1", workloads=[cw]), catalogue={}).get("c").program


def _loaded(app: str, env: dict, cwd=None) -> int:
    """The value the app's run prints: which libbench.so ld.so loaded."""
    return json.loads(subprocess.run([app], capture_output=True, text=True, check=True,
                                     env=env, cwd=cwd).stdout)["time_s"]


@needs_cc
def test_the_library_digested_is_the_legacy_hwcaps_one_ld_so_loads(tmp_path):
    """glibc 2.33 to 2.36 (Debian 12, Raspberry Pi OS bookworm) search each directory's legacy
    hwcaps subdirectories (tls/, the platform's, x86_64/...) before it, in their own order.
    libbench.so in a directory, in some of those subdirectories and in one not searched,
    each returning another value: the one the real run loads is the one digested, and its
    rebuild is a new program, the others' not. Before, the plain one was digested whatever
    ran."""
    build_lib(tmp_path / "lib", 0)
    app = build_app(tmp_path, None)
    legacy = _loader_facts(app).legacy
    if not legacy:
        pytest.skip("this loader searches no legacy hwcaps subdirectory (glibc 2.37 on)")
    d = tmp_path / "lib"
    subdirs = ["nosuchcap", legacy[-1], legacy[len(legacy) // 2], legacy[1], ""]
    for value, sub in enumerate(subdirs, 1):
        build_lib(d / sub if sub else d, value)
    env = {"LD_LIBRARY_PATH": str(d)}
    loaded = subdirs[_loaded(app, env) - 1]
    assert loaded == legacy[1]
    assert [p for p in Libraries().of(app, str(d)) if "libbench" in p] == [
        str(d / loaded / "libbench.so")]
    before = _workload_program(app, env)
    build_lib(d, 10)
    build_lib(d / legacy[-1], 11)
    assert _workload_program(app, env) == before
    build_lib(d / loaded, 12)
    assert _loaded(app, env) == 12
    assert _workload_program(app, env) != before


def test_the_legacy_subdirectories_are_those_ld_so_help_lists_in_glibcs_order():
    """ld.so --help's list (glibc 2.33 to 2.36; Raspberry Pi OS armhf's here) gives the
    power set of tls, the platform and the hwcaps searched, in elf/dl-hwcaps.c's order; a
    masked one (not searched) is left out; no list, no legacy subdirectory."""
    from opptune.agent.loader_facts import legacy_subdirs
    listed = ("Subdirectories of glibc-hwcaps directories, in priority order:\n\n"
              "Legacy HWCAP subdirectories under library search path directories:\n"
              "  v7l (AT_PLATFORM; supported, searched)\n"
              "  tls (supported, searched)\n"
              "  neon (supported, searched)\n"
              "  vfp (supported, masked)\n")
    assert legacy_subdirs(listed) == (
        "tls/v7l/neon", "tls/v7l", "tls/neon", "tls", "v7l/neon", "v7l", "neon")
    assert legacy_subdirs(listed.replace("masked", "searched")) == (
        "tls/v7l/neon/vfp", "tls/v7l/neon", "tls/v7l/vfp", "tls/v7l", "tls/neon/vfp",
        "tls/neon", "tls/vfp", "tls", "v7l/neon/vfp", "v7l/neon", "v7l/vfp", "v7l",
        "neon/vfp", "neon", "vfp")
    # no platform (AT_PLATFORM unknown): tls and the hwcaps alone
    assert legacy_subdirs(listed.replace("  v7l (AT_PLATFORM; supported, searched)\n", "")) \
        == ("tls/neon", "tls", "neon")
    assert legacy_subdirs("Usage: ld.so [OPTION]...\n") == ()


@needs_diagnostics
def test_the_glibc_hwcaps_level_digested_is_the_one_the_runs_tunables_leave(tmp_path):
    """A run whose environment turns AVX2 off (GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2, as one
    does to compare) loads glibc-hwcaps/x86-64-v2's library, not -v3's nor -v4's: that one is
    digested, its rebuild a new program, the others' not. Before, the levels were the CPU's
    whatever the run's tunables."""
    values = {"": 1, "x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}
    d = tmp_path / "lib"
    for level, value in values.items():
        build_lib(d / "glibc-hwcaps" / level if level else d, value)
    app = build_app(tmp_path, None)
    if "x86-64-v3" not in _loader_facts(app).hwcaps:
        pytest.skip("this CPU has no x86-64-v3: turning AVX2 off changes nothing")
    env = {"LD_LIBRARY_PATH": str(d), "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-AVX512F"}
    assert _loaded(app, env) == 2
    loaded = str(d / "glibc-hwcaps" / "x86-64-v2" / "libbench.so")
    from opptune.agent.loader_facts import hwcaps_env
    assert [p for p in Libraries().of(app, str(d), hwcaps_env(env))
            if "libbench" in p] == [loaded]
    before = _workload_program(app, env)
    build_lib(d / "glibc-hwcaps" / "x86-64-v3", 13)
    build_lib(d / "glibc-hwcaps" / "x86-64-v4", 14)
    assert _workload_program(app, env) == before
    build_lib(d / "glibc-hwcaps" / "x86-64-v2", 12)
    assert _loaded(app, env) == 12
    assert _workload_program(app, env) != before


def test_only_the_hwcaps_variables_of_a_runs_environment_reach_the_loader():
    """The loader is asked with the run's glibc.cpu.hwcaps and hwcap_mask (GLIBC_TUNABLES,
    LD_HWCAP_MASK) alone: other tunables, and a value of other characters, are not given to
    it; where the loader cannot be asked, the features turned off take their levels away
    from /proc/cpuinfo's."""
    from opptune.agent.loader_facts import _turned_off, cpuinfo_levels, hwcaps_env
    assert hwcaps_env({"PATH": "/bin"}) == ()
    env = {"GLIBC_TUNABLES": "glibc.malloc.check=3:glibc.cpu.hwcaps=-AVX2,-AVX512F:"
                             "glibc.cpu.hwcap_mask=0x2:glibc.cpu.hwcaps=x=y",
           "LD_HWCAP_MASK": "6"}
    assert hwcaps_env(env) == (
        ("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2,-AVX512F:glibc.cpu.hwcap_mask=0x2"),
        ("LD_HWCAP_MASK", "6"))
    assert _turned_off(hwcaps_env(env)) == {"avx2", "avx512f"}
    levels = cpuinfo_levels()
    if "x86-64-v3" in levels:
        assert cpuinfo_levels(off=frozenset({"avx2"})) == ("x86-64-v2",)


@needs_cc
@pytest.mark.parametrize("line", ["#!../bin/myinterp", "#!/usr/bin/env ../bin/myinterp"])
def test_a_relative_interpreter_is_the_one_in_the_runs_directory(tmp_path, line):
    """A script whose #! line names its interpreter by a relative path (``#!../bin/myinterp``,
    which Linux opens from the process's working directory, the entry's ``cwd``): that
    interpreter, and a library it loads, rebuilt make the next run a new program, said before
    it. Before, the path was taken from where the agent runs: missing, no change seen."""
    if not os.access("/usr/bin/env", os.X_OK):
        pytest.skip("no /usr/bin/env")
    build_lib(tmp_path / "lib", 1)
    build_interp(tmp_path, 0)
    work = tmp_path / "work"
    work.mkdir()
    script = work / "bench"
    script.write_text(line + "\nwhatever the interpreter reads\n")
    script.chmod(0o755)
    (tmp_path / "state").mkdir()
    _new_program_at_each_rebuild(tmp_path, CommandWorkload("c", ["./bench"], cwd=str(work)))


@needs_cc
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="a fake loader linked on x86-64")
def test_legacy_subdirectories_and_cache_entries_are_those_the_loader_lists(tmp_path):
    """A program whose loader (a fake one: the test's) is glibc 2.36 listing its legacy
    hwcaps (platform myplat, tls, hwa searched, hwb masked; GLIBC_TUNABLES' hwcap_mask=0 in
    the run's env masks hwa too): of libbench.so under LD_LIBRARY_PATH's tls/myplat/hwa and
    hwb, the first is its library; of ld.so.cache's entries (in a fake cache) those under a
    masked hwcap, another platform or an arm-style tls bit are passed over, as
    elf/dl-cache.c does. The loader gets the run's hwcaps variables, no other."""
    d, c = tmp_path / "d", tmp_path / "c"
    build_lib(d / "hwb", 1)
    build_lib(d / "tls" / "myplat" / "hwa", 2)
    ordered = {"hwb": 1 << 5, "tls": 1 << 15, "hwa": 1 << 4, "tls/otherplat": 1 << 63 | 1 << 49,
               "tls/myplat": 1 << 63 | 1 << 48, "": 0}
    for sub in ordered:
        build_lib(c / sub if sub else c, 3)
    paths = {str((c / sub if sub else c) / "libbench.so"): hw for sub, hw in ordered.items()}
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(_new_cache([("libbench.so", p) for p in paths], paths))
    loader = tmp_path / "ld-fake.so"
    loader.write_text(
        "#!/bin/sh\n"
        f"echo \"$1 $GLIBC_TUNABLES|$LD_HWCAP_MASK|$HOME\" >> {tmp_path / 'loader-env'}\n"
        'if [ "$1" = --list-diagnostics ]; then\n'
        "  echo 'version.version=\"2.36\"'\n  echo 'dl_hwcaps_subdirs=\"\"'\n"
        "  echo 'dl_hwcaps_subdirs_active=0x0'\n  exit 0\nfi\n"
        "echo 'Legacy HWCAP subdirectories under library search path directories:'\n"
        "echo '  myplat (AT_PLATFORM; supported, searched)'\n"
        "echo '  tls (supported, searched)'\n"
        'case "$GLIBC_TUNABLES" in *hwcap_mask=0) echo \'  hwb (supported, masked)\'\n'
        "  echo '  hwa (supported, masked)';;\n"
        "*) echo '  hwb (supported, masked)'\n  echo '  hwa (supported, searched)';; esac\n")
    loader.chmod(0o755)
    (tmp_path / "app.c").write_text(APP)
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(tmp_path / "app.c"),
                    f"-L{tmp_path / 'c'}", "-lbench", f"-Wl,--dynamic-linker={loader}"],
                   check=True)
    app = str(tmp_path / "app")
    libs = Libraries(cache_path=str(cache))
    assert [p for p in libs.of(app, str(d)) if "libbench" in p] == [
        str(d / "tls" / "myplat" / "hwa" / "libbench.so")]
    assert [p for p in libs.of(app) if "libbench" in p] == [str(c / "hwa" / "libbench.so")]
    env = {"GLIBC_TUNABLES": "glibc.malloc.check=3:glibc.cpu.hwcap_mask=0", "HOME": "/x"}
    from opptune.agent.loader_facts import hwcaps_env
    assert [p for p in libs.of(app, "", hwcaps_env(env)) if "libbench" in p] == [
        str(c / "tls" / "myplat" / "libbench.so")]
    assert set((tmp_path / "loader-env").read_text().splitlines()) == {
        "--list-diagnostics ||", "--help ||", "--list-diagnostics glibc.cpu.hwcap_mask=0||",
        "--help glibc.cpu.hwcap_mask=0||"}


@pytest.mark.parametrize("env", [{}, {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"},
                                 {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"},
                                 {"GLIBC_TUNABLES": "glibc.cpu.hwcap_mask=0"},
                                 {"LD_HWCAP_MASK": "2"}])
def test_the_subdirectories_searched_are_those_ld_so_says_it_searches(env):
    """Under an LD_LIBRARY_PATH directory, the glibc-hwcaps and legacy subdirectories, in
    their order, for a run with ``env``, are those this machine's loader says it searches
    (LD_DEBUG=libs's search path, which the real run prints)."""
    import re
    from opptune.agent.loader_facts import hwcaps_env
    from opptune.agent.shared_libs import _read
    true = shutil.which("true")
    elf = _read(true) if true else None
    if elf is None or not elf.interp:
        pytest.skip("no dynamic true")
    printed = subprocess.run([true], capture_output=True, text=True, env={
        **env, "LD_DEBUG": "libs", "LD_LIBRARY_PATH": "/nowhere"}).stderr
    said = re.search(r"search path=(\S+)\s+\(LD_LIBRARY_PATH\)", printed)
    if said is None:
        pytest.skip("a loader that does not say its search path (not glibc)")
    facts = Libraries().loader_facts(elf.interp, elf.kind, hwcaps_env(env))
    assert said.group(1).split(":") == [
        f"/nowhere/{sub}".rstrip("/") for sub in Libraries._subdirs(facts)]


@needs_cc
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 levels")
def test_a_glibc_older_than_2_33_searches_no_glibc_hwcaps_subdirectory(tmp_path):
    """A program whose loader is glibc 2.31's (Debian 11, Raspberry Pi OS bullseye: its file
    ld-2.31.so, its link ld-linux-x86-64.so.2; a fake one that cannot say its facts): the
    plain libbench.so is its library, not glibc-hwcaps/x86-64-v2's, which only glibc 2.33
    and later search. Before, the CPU's levels were taken whatever the loader's version."""
    from opptune.agent.loader_facts import cpuinfo_levels
    if not cpuinfo_levels():
        pytest.skip("no x86-64-v2 on this CPU: no level to pass over")
    d = tmp_path / "lib"
    build_lib(d, 1)
    build_lib(d / "glibc-hwcaps" / "x86-64-v2", 2)
    loader = tmp_path / "ld-2.31.so"
    loader.write_text("#!/bin/sh\nexit 127\n")  # glibc 2.31 knows no --list-diagnostics
    loader.chmod(0o755)
    (tmp_path / "ld-linux-x86-64.so.2").symlink_to(loader)
    (tmp_path / "app.c").write_text(APP)
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(tmp_path / "app.c"), f"-L{d}",
                    "-lbench", f"-Wl,--dynamic-linker={tmp_path / 'ld-linux-x86-64.so.2'}"],
                   check=True)
    assert [p for p in Libraries().of(str(tmp_path / "app"), str(d)) if "libbench" in p] == [
        str(d / "libbench.so")]
    # the same loader as glibc 2.33's file: its levels (from /proc/cpuinfo) are searched
    (tmp_path / "ld-linux-x86-64.so.2").unlink()
    (tmp_path / "ld-linux-x86-64.so.2").symlink_to(loader.rename(tmp_path / "ld-2.33.so"))
    assert [p for p in Libraries().of(str(tmp_path / "app"), str(d)) if "libbench" in p] == [
        str(d / "glibc-hwcaps" / "x86-64-v2" / "libbench.so")]


def _old_loader(tmp_path, version: str) -> str:
    """A fake glibc loader ``ld-VERSION.so`` that cannot say its facts (no
    --list-diagnostics before 2.33), behind ld-linux-x86-64.so.2 as glibc before 2.34
    installs it; the link's path."""
    loader = tmp_path / f"ld-{version}.so"
    loader.write_text("#!/bin/sh\nexit 127\n")
    loader.chmod(0o755)
    link = tmp_path / "ld-linux-x86-64.so.2"
    link.symlink_to(loader)
    return str(link)


@needs_cc
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64's legacy hwcaps")
def test_glibc_2_31s_legacy_subdirectories_are_known_from_the_cpu(tmp_path):
    """A program whose loader is glibc 2.31's (Debian 11, Ubuntu 20.04), which cannot list
    its legacy subdirectories: they are known from /proc/cpuinfo as its cpu-features.c sets
    them, and libbench.so under LD_LIBRARY_PATH's x86_64/ (searched on every x86-64 CPU) is
    its library, not the plain one. Where this machine's loader is glibc 2.33 to 2.36 (the
    same rules), its own list is the same."""
    d = tmp_path / "lib"
    build_lib(d, 1)
    build_lib(d / "x86_64", 2)
    (tmp_path / "app.c").write_text(APP)
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(tmp_path / "app.c"), f"-L{d}",
                    "-lbench", f"-Wl,--dynamic-linker={_old_loader(tmp_path, '2.31')}"],
                   check=True)
    assert [p for p in Libraries().of(str(tmp_path / "app"), str(d)) if "libbench" in p] == [
        str(d / "x86_64" / "libbench.so")]
    old = _loader_facts(str(tmp_path / "app"))
    real = _loader_facts(os.path.realpath(sys.executable))
    if real.legacy:
        assert (old.legacy, old.unsearched) == (real.legacy, real.unsearched)


def test_glibc_2_31s_x86_64_platform_and_hwcaps_follow_the_cpu(tmp_path):
    """cpuinfo_legacy on fake /proc/cpuinfo files: an Intel CPU with AVX2 (and the rest of
    Haswell's) is haswell, with AVX-512 F/CD/BW/DQ/VL also avx512_1; a Xeon Phi is xeon_phi;
    an AMD one keeps the kernel's platform, x86_64, whatever its features."""
    from opptune.agent.loader_facts import cpuinfo_legacy
    haswell = "fpu sse2 avx avx2 fma bmi1 bmi2 abm movbe popcnt"
    avx512 = haswell + " avx512f avx512cd avx512bw avx512dq avx512vl"

    def legacy(vendor: str, flags: str):
        (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {vendor}\n"
                                          f"flags\t\t: {flags}\n\nprocessor\t: 1\n")
        return cpuinfo_legacy(str(tmp_path / "cpuinfo"))

    assert legacy("GenuineIntel", haswell) == (
        ("tls/haswell/x86_64", "tls/haswell", "tls/x86_64", "tls", "haswell/x86_64",
         "haswell", "x86_64"), frozenset({"avx512_1"}))
    assert legacy("GenuineIntel", avx512)[0][:2] == ("tls/haswell/avx512_1/x86_64",
                                                     "tls/haswell/avx512_1")
    assert legacy("GenuineIntel", avx512)[1] == frozenset()
    assert legacy("GenuineIntel", avx512 + " avx512er avx512pf")[0][0] == "tls/xeon_phi/x86_64"
    assert legacy("AuthenticAMD", avx512)[0] == (
        "tls/x86_64/x86_64", "tls/x86_64", "tls/x86_64", "tls", "x86_64/x86_64", "x86_64",
        "x86_64")
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert cpuinfo_legacy(str(tmp_path / "arm")) == ((), frozenset())


def test_glibc_2_31s_arm_and_arm64_subdirectories_follow_the_kernels_hwcaps():
    """auxv_legacy: on arm (Raspberry Pi OS bullseye) tls, AT_PLATFORM (v7l; v8l under an
    arm64 kernel) and of AT_HWCAP's bits neon (12) and vfp (6), in elf/dl-hwcaps.c's order;
    on arm64 atomics (8); a bit the CPU lacks is not searched (listed as such)."""
    from opptune.agent.loader_facts import auxv_legacy
    pi = 1 << 12 | 1 << 6 | 1 << 15 | 1 << 1  # neon vfp tls half: tls is not glibc's then
    assert auxv_legacy(40, pi, "v7l") == (
        ("tls/v7l/neon/vfp", "tls/v7l/neon", "tls/v7l/vfp", "tls/v7l", "tls/neon/vfp",
         "tls/neon", "tls/vfp", "tls", "v7l/neon/vfp", "v7l/neon", "v7l/vfp", "v7l",
         "neon/vfp", "neon", "vfp"), frozenset())
    assert auxv_legacy(40, 1 << 6, "v8l") == (
        ("tls/v8l/vfp", "tls/v8l", "tls/vfp", "tls", "v8l/vfp", "v8l", "vfp"),
        frozenset({"neon"}))
    assert auxv_legacy(183, 1 << 8 | 0b11, "aarch64")[0] == (
        "tls/aarch64/atomics", "tls/aarch64", "tls/atomics", "tls", "aarch64/atomics",
        "aarch64", "atomics")
    assert auxv_legacy(183, 0b11, "aarch64") == (("tls/aarch64", "tls", "aarch64"),
                                                 frozenset({"atomics"}))


@pytest.mark.skipif(shutil.which("true") is None, reason="no true")
def test_the_kernels_hwcap_and_platform_are_read_as_ld_so_shows_them():
    """_own_auxv's AT_HWCAP and AT_PLATFORM are those LD_SHOW_AUXV prints for a program
    (the same kernel, a program of this Python's kind)."""
    from opptune.agent.loader_facts import _own_auxv
    shown = subprocess.run([shutil.which("true")], env={"LD_SHOW_AUXV": "1"},
                           capture_output=True, text=True).stdout
    said = dict(ln.split(":", 1) for ln in shown.splitlines() if ":" in ln)
    if "AT_HWCAP" not in said:
        pytest.skip("a loader that shows no auxv (not glibc)")
    hwcap, platform = _own_auxv()
    assert hwcap == int(said["AT_HWCAP"].strip(), 16)
    assert platform == said["AT_PLATFORM"].strip()


@needs_cc
def test_a_relative_ld_library_path_entry_is_taken_from_the_runs_directory(tmp_path,
                                                                            monkeypatch):
    """LD_LIBRARY_PATH = "lib" (or an empty entry, ":/x": the directory itself, for glibc):
    ld.so opens it from the directory the run starts in, the entry's cwd, and so does its
    digest. Before, it took it from the agent's working directory: the library the runs load
    rebuilt made no new program (the agent's own lib/ rebuilt did)."""
    build_lib(tmp_path / "lib", 1)
    app = build_app(tmp_path, None)
    run, agent, state = tmp_path / "run", tmp_path / "agent", tmp_path / "state"
    build_lib(run / "lib", 3)
    build_lib(agent / "lib", 7)
    state.mkdir()
    monkeypatch.chdir(agent)
    cw = CommandWorkload("c", [app], env={"LD_LIBRARY_PATH": "lib"}, cwd=str(run))
    ws = Workloads(AgentConfig(agent_id="a1", state_dir=str(state), workloads=[cw]),
                   catalogue={})
    runner = Runner(ws, "p", state_dir=str(state))
    rec = runner.run_once(RunSpec("c", "default", [0], 1))
    runner.close()
    assert rec.ok and rec.time_s == 3, rec.error  # the run's lib/, not the agent's
    empty = CommandWorkload("e", [app], env={"LD_LIBRARY_PATH": ":/nonexistent"},
                            cwd=str(run / "lib"))
    assert _loaded(app, {"LD_LIBRARY_PATH": ":/nonexistent"}, run / "lib") == 3
    for workload in (cw, empty):
        def program() -> str:
            return Workloads(AgentConfig(agent_id="a1", workloads=[workload]),
                             catalogue={}).get(workload.name).program
        before = program()
        build_lib(agent / "lib", 8)
        assert program() == before, workload
        build_lib(run / "lib", 4)
        assert program() != before, workload
        build_lib(run / "lib", 3)


@needs_cc
@pytest.mark.parametrize("flag", ["--disable-new-dtags", "--enable-new-dtags"])
def test_a_relative_rpath_entry_is_taken_from_the_runs_directory(tmp_path, monkeypatch,
                                                                 flag):
    """DT_RPATH (or DT_RUNPATH) "lib", no $ORIGIN: ld.so opens it from the directory the run
    starts in, the entry's cwd, as it does a relative LD_LIBRARY_PATH entry; the digest took
    it from the agent's working directory (a rebuild of the library the runs load made no
    new program; the agent's own lib/ rebuilt did)."""
    build_lib(tmp_path / "lib", 1)
    (tmp_path / "app.c").write_text(APP)
    app = str(tmp_path / "app")
    subprocess.run([CC, "-o", app, str(tmp_path / "app.c"), f"-L{tmp_path / 'lib'}",
                    "-lbench", "-Wl,-rpath,lib", f"-Wl,{flag}"], check=True)
    run, agent = tmp_path / "run", tmp_path / "agent"
    build_lib(run / "lib", 3)
    build_lib(agent / "lib", 7)
    assert _loaded(app, {}, run) == 3  # what the loader does
    monkeypatch.chdir(agent)
    cw = CommandWorkload("c", [app], cwd=str(run))

    def program() -> str:
        return Workloads(AgentConfig(agent_id="a1", workloads=[cw]),
                         catalogue={}).get("c").program
    before = program()
    build_lib(agent / "lib", 8)
    assert program() == before
    build_lib(run / "lib", 4)
    assert program() != before
