"""The program digest of a workload follows the code its runs execute (agent/program_id.py):
a binary or script changed in place, or the kernels built anew, make a new program though the
configuration is the same; a copy built elsewhere from the same sources does not."""

from __future__ import annotations

import os
import struct

import pytest

import opptune.agent.workloads as wl
from opptune.agent.program_id import CACHE_FILENAME, FileIds, content_digest
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
    out), the log names it, and its program changes once it is installed."""
    cw = CommandWorkload("c", ["opptune-no-such-bench", "{threads}"],
                         env={"PATH": str(tmp_path)})
    missing = _programs([cw])["c"]
    assert len(missing) == 16
    assert "cannot read opptune-no-such-bench" in caplog.text
    _script(tmp_path / "opptune-no-such-bench", "echo 1")
    assert _programs([cw])["c"] != missing


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
