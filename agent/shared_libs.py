"""The shared libraries an ELF program loads, found as the dynamic loader (glibc's ld.so,
ld.so(8)) finds them, without running it: its program interpreter (PT_INTERP), then each
DT_NEEDED name, and theirs in turn, searched in the object's DT_RPATH (and the program's,
where the object has no DT_RUNPATH), the run's LD_LIBRARY_PATH, the object's DT_RUNPATH, the
names of /etc/ld.so.cache and the loader's system directories, a candidate taken only where
its ELF class, byte order and machine are the program's (ld.so skips the others). ``$ORIGIN``
in a path is the object's directory; ``$LIB`` and ``$PLATFORM`` are what the loader says they
are, and each directory's ``glibc-hwcaps/`` subdirectories of the levels the loader says this
CPU supports (``x86-64-v3``) come before it: glibc 2.33's ``ld.so --list-diagnostics`` prints
them (``loader_facts``); then, up to glibc 2.36, its legacy hwcaps subdirectories, which
``ld.so --help`` lists (``legacy_subdirs``; ld.so.cache's entries in one only where it
searches it, ``_searched``). That runs the loader alone, no program nor
library, once per loader file and per run environment's hwcaps variables (``hwcaps_env``:
``GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2`` takes a level away, so the loader is asked with
them), and only a loader that no one but root or the agent's user may write or replace (the
program's PT_INTERP names it: a program writable by a workload's user must not have the agent
run a file of that user's choice). Where it cannot (an older glibc, another loader), the
x86-64 levels are read from /proc/cpuinfo's flags (less those the tunables turn off; none
for a loader file named ld-2.32.so or older: glibc-hwcaps came with 2.33), no legacy
subdirectory is searched but glibc 2.27 to 2.32's on x86-64, known from the CPU
(``cpuinfo_legacy``), and 2.28 to 2.32's on arm and arm64 for a program of the agent's own
kind, known from the kernel's AT_HWCAP and AT_PLATFORM (``auxv_legacy``; neither with
hwcaps variables in the run's environment), a path with
``$LIB``/``$PLATFORM`` is left out and the system directories are /lib, /usr/lib, /lib64,
/usr/lib64.

A musl program (PT_INTERP ``ld-musl-ARCH.so.1``) is searched as musl does: LD_LIBRARY_PATH,
the DT_RUNPATH (else DT_RPATH) of the object and of those that loaded it, then the directories
of /etc/ld-musl-ARCH.path (split at colons and newlines), else /lib, /usr/local/lib, /usr/lib;
no ld.so.cache, no hwcaps; libc's own names (libc.*, libpthread.*, libm.*...) are the loader.

Not followed (the libraries found otherwise are still covered): glibc's legacy hwcaps
subdirectories where the loader cannot list them (glibc before 2.33 but the above, a loader
not run), and of
a hwcap_mask its bits other than the loader's own (``--help`` names only those), LD_PRELOAD and
/etc/ld.so.preload, libraries opened at run time (dlopen: plugins, Python's extension
modules), and a name not found (the run fails or finds it where ld.so alone knows).

The search reads a few headers of each object (no hashing): ``libraries`` keeps its answer
by the program's identity (device, inode, size, mtime), LD_LIBRARY_PATH, the run's hwcaps
variables and the cache's mtime, so the look before each run only stats; under each directory
it opens only the subdirectories whose first directory (tls/, glibc-hwcaps/...) is there.
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import IO, Mapping

LD_SO_CACHE = "/etc/ld.so.cache"
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
_MAX_LIBS = 256  # a bound on a broken or hostile tree's closure
_CACHE_NEW = b"glibc-ld.so.cache1.1"
_CACHE_OLD = b"ld.so-1.7.0"
# an entry's hwcap of a glibc-hwcaps subdirectory: this bit and an ISA level's (dl-cache.h)
_HWCAP_EXTENSION, _ISA_LEVEL_MASK = 1 << 62, (1 << 10) - 1
_TLS_BIT = 1 << 63  # ldconfig's for a tls/ directory (elf/ldconfig.c TLS_HWCAP_BIT)

MUSL_DEFAULT_DIRS = ("/lib", "/usr/local/lib", "/usr/lib")
_MUSL_LOADER = re.compile(r"ld-musl-(.+)\.so\.1")
# names musl's loader takes for itself (ldso/dynlink.c's "reserved"): libc.so, libc.musl-*...
_MUSL_SELF = re.compile(r"lib(?:c|pthread|rt|m|dl|util|xnet)\.")
_EM_X86_64, _EM_ARM, _EM_AARCH64 = 62, 40, 183
# glibc 2.28 to 2.32's HWCAP_IMPORTANT on arm and arm64 (sysdeps/unix/sysv/linux/*/
# dl-procinfo.h): AT_HWCAP's bits and glibc's names for them (the kernel's), highest first
_ARM_IMPORTANT = {_EM_ARM: ((12, "neon"), (6, "vfp")), _EM_AARCH64: ((8, "atomics"),)}
_AT_PLATFORM, _AT_HWCAP = 15, 16
# glibc's x86-64 levels (sysdeps/x86/get-isa-level.h), each on top of the one before, as
# /proc/cpuinfo names their features (abm: LZCNT; xsave: the kernel's AVX state, OSXSAVE)
_X86_64_LEVELS = (
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
)

# glibc.cpu.hwcaps' names (sysdeps/x86/cpu-tunables.c) of the level features above that it can
# turn off (``-AVX2``), as /proc/cpuinfo names them (OSXSAVE: the kernel's AVX state, xsave)
_TUNABLE_FLAGS = {
    "AVX": "avx", "AVX2": "avx2", "BMI1": "bmi1", "BMI2": "bmi2", "FMA": "fma", "LZCNT": "abm",
    "MOVBE": "movbe", "XSAVE": "xsave", "OSXSAVE": "xsave", "POPCNT": "popcnt",
    "SSSE3": "ssse3", "SSE4_1": "sse4_1", "SSE4_2": "sse4_2", "AVX512F": "avx512f",
    "AVX512CD": "avx512cd", "AVX512BW": "avx512bw", "AVX512DQ": "avx512dq",
    "AVX512VL": "avx512vl"}
# the run's variables that change which hwcaps subdirectories its loader searches, and the
# values passed on to the loader when it is asked (others are not: it is run with them)
_HWCAPS_TUNABLES = {"glibc.cpu.hwcaps": re.compile(r"[A-Za-z0-9_,+-]*"),
                    "glibc.cpu.hwcap_mask": re.compile(r"(?:0[xX])?[0-9A-Fa-f]+")}
HWCAPS_VARIABLES = ("GLIBC_TUNABLES", "LD_HWCAP_MASK")
_LEGACY_HEADER = "Legacy HWCAP subdirectories under library search path directories:"

_PT_INTERP, _PT_LOAD, _PT_DYNAMIC = 3, 1, 2
_DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_RPATH, _DT_RUNPATH = 1, 5, 10, 15, 29


class _Elf:
    """What ld.so reads of one object: its kind (class, byte order, machine), interpreter,
    DT_NEEDED names, DT_RPATH and DT_RUNPATH (None where absent)."""

    def __init__(self, f: IO[bytes]):
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
            raise ValueError("not an ELF file")
        wide = head[4] == 2
        end = "<" if head[5] == 1 else ">"
        self.kind = (head[4], head[5], struct.unpack_from(end + "H", head, 0x12)[0])
        phoff, = struct.unpack_from(end + ("Q" if wide else "I"), head, 0x20 if wide else 0x1C)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36 if wide else 0x2A)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, dynamic, self.interp = [], None, None
        for i in range(phnum):
            if wide:
                ptype, _, off, vaddr, _, filesz, _, _ = struct.unpack_from(
                    end + "IIQQQQQQ", table, i * phentsize)
            else:
                ptype, off, vaddr, _, filesz, _, _, _ = struct.unpack_from(
                    end + "IIIIIIII", table, i * phentsize)
            if ptype == _PT_LOAD:
                loads.append((vaddr, filesz, off))
            elif ptype == _PT_DYNAMIC:
                dynamic = (off, filesz)
            elif ptype == _PT_INTERP:
                f.seek(off)
                self.interp = f.read(filesz).split(b"\0", 1)[0].decode(errors="replace")
        self.needed: list[str] = []
        self.rpath: str | None = None
        self.runpath: str | None = None
        if dynamic is None:
            return  # linked statically
        f.seek(dynamic[0])
        data = f.read(dynamic[1])
        entry = "qQ" if wide else "iI"
        size = struct.calcsize(end + entry)
        tags: list[tuple[int, int]] = []
        for i in range(len(data) // size):
            tag, val = struct.unpack_from(end + entry, data, i * size)
            if tag == 0:
                break
            tags.append((tag, val))
        strtab = next((v for t, v in tags if t == _DT_STRTAB), None)
        strsz = next((v for t, v in tags if t == _DT_STRSZ), 0)
        # DT_STRTAB is an address: the load segment holding it says where it is in the file
        at = next((off + strtab - vaddr for vaddr, filesz, off in loads
                   if strtab is not None and vaddr <= strtab < vaddr + filesz), None)
        if at is None:
            return
        f.seek(at)
        strings = f.read(strsz)

        def text(i: int) -> str:
            return strings[i:strings.index(b"\0", i)].decode(errors="replace")

        self.needed = [text(v) for t, v in tags if t == _DT_NEEDED]
        self.rpath = next((text(v) for t, v in tags if t == _DT_RPATH), None)
        self.runpath = next((text(v) for t, v in tags if t == _DT_RUNPATH), None)


def _read(path: str) -> _Elf | None:
    try:
        with open(path, "rb") as f:
            return _Elf(f)
    except (OSError, ValueError, struct.error, IndexError):
        return None


@dataclass(frozen=True)
class LoaderFacts:
    """What a program's loader searches beside its program's own paths: the glibc-hwcaps
    subdirectories this CPU supports, best first; ``$LIB`` and ``$PLATFORM`` (None: not known,
    a path with it left out); its system directories; for musl, ``musl_dirs``, the whole
    system path (None: glibc); and glibc 2.36's and older legacy hwcaps subdirectories, in its
    order (``tls/haswell/x86_64``...; the directory itself, after them, not among them)."""
    hwcaps: tuple[str, ...] = ()
    lib: str | None = None
    platform: str | None = None
    system_dirs: tuple[str, ...] = DEFAULT_DIRS
    musl_dirs: tuple[str, ...] | None = None
    legacy: tuple[str, ...] = ()
    # the loader's hwcaps it does not search (masked, or not this CPU's): ld.so.cache's
    # entries under one are not taken
    unsearched: frozenset[str] = frozenset()


def hwcaps_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What of a run's environment changes the hwcaps subdirectories its loader searches:
    ``GLIBC_TUNABLES``' glibc.cpu.hwcaps (``-AVX2``: features turned off, a level less) and
    glibc.cpu.hwcap_mask, and ``LD_HWCAP_MASK`` (its old name), as (variable, value) pairs
    to run the loader with; a tunable with other characters than such a value has is left
    out (the loader is not given it). () where there is none (the common case)."""
    if "GLIBC_TUNABLES" not in env and "LD_HWCAP_MASK" not in env:
        return ()  # the look before each run: no split of nothing
    out = []
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":")
                if t.partition("=")[0] in _HWCAPS_TUNABLES
                and _HWCAPS_TUNABLES[t.partition("=")[0]].fullmatch(t.partition("=")[2])]
    if tunables:
        out.append(("GLIBC_TUNABLES", ":".join(tunables)))
    mask = env.get("LD_HWCAP_MASK")
    if mask is not None and _HWCAPS_TUNABLES["glibc.cpu.hwcap_mask"].fullmatch(mask):
        out.append(("LD_HWCAP_MASK", mask))
    return tuple(out)


def _turned_off(loader_env: tuple[tuple[str, str], ...]) -> set[str]:
    """The /proc/cpuinfo flags of the level features the run's glibc.cpu.hwcaps turns off."""
    off = set()
    for var, value in loader_env:
        for tunable in value.split(":") if var == "GLIBC_TUNABLES" else ():
            name, _, names = tunable.partition("=")
            if name == "glibc.cpu.hwcaps":
                off |= {_TUNABLE_FLAGS[n[1:]] for n in names.split(",")
                        if n[:1] == "-" and n[1:] in _TUNABLE_FLAGS}
    return off


def cpuinfo_levels(cpuinfo: str = "/proc/cpuinfo", off: frozenset[str] = frozenset()
                   ) -> tuple[str, ...]:
    """The x86-64 levels (glibc-hwcaps names) the first CPU of ``cpuinfo`` supports, with the
    flags ``off`` turned off, best first; () where it cannot be read or has no x86 flags."""
    flags = _cpuinfo(cpuinfo)[1] - off
    out: list[str] = []
    for name, needs in _X86_64_LEVELS:
        if not needs <= flags:
            break
        out.insert(0, name)
    return tuple(out)


def _cpuinfo(cpuinfo: str) -> tuple[str, set[str]]:
    """The vendor_id and flags of the first CPU of ``cpuinfo`` ("" and none where it cannot
    be read or is no x86's)."""
    vendor, flags = "", None
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for ln in f:
                key, _, value = ln.partition(":")
                if key.strip() == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return vendor, flags or set()


def cpuinfo_legacy(cpuinfo: str = "/proc/cpuinfo") -> tuple[tuple[str, ...], frozenset[str]]:
    """The legacy hwcaps subdirectories glibc 2.27 to 2.32 search on x86-64 (as
    ``legacy_subdirs`` orders them) and its hwcaps not searched, from the first CPU's vendor and
    flags, as sysdeps/x86/cpu-features.c sets them: hwcap x86_64 always, avx512_1 on Intel
    with AVX512F, CD, BW, DQ and VL but no ER; the platform on Intel xeon_phi (AVX512F, CD,
    ER, PF), else haswell (AVX2, FMA, BMI1, BMI2, LZCNT, MOVBE, POPCNT), else the kernel's
    AT_PLATFORM, x86_64. ((), none) where ``cpuinfo`` has no x86 flags."""
    vendor, flags = _cpuinfo(cpuinfo)
    if not flags:
        return (), frozenset()
    platform, hwcaps = "x86_64", ["x86_64"]
    if vendor == "GenuineIntel":
        chosen = None
        if {"avx512f", "avx512cd"} <= flags:
            if "avx512er" in flags:
                chosen = "xeon_phi" if "avx512pf" in flags else None
            elif {"avx512bw", "avx512dq", "avx512vl"} <= flags:
                hwcaps.insert(0, "avx512_1")  # bit 2, above x86_64's 1
        if chosen is None and {"avx2", "fma", "bmi1", "bmi2", "abm", "movbe", "popcnt"} <= flags:
            chosen = "haswell"
        platform = chosen or platform
    return (_power_set(["tls", platform] + hwcaps),
            frozenset({"avx512_1"} - set(hwcaps)))


def auxv_legacy(machine: int, hwcap: int, platform: str | None
                ) -> tuple[tuple[str, ...], frozenset[str]]:
    """The legacy hwcaps subdirectories glibc 2.28 to 2.32 search on arm (``machine``
    EM_ARM) or arm64 (EM_AARCH64), as ``legacy_subdirs`` orders them, and its hwcaps not
    searched: tls, the kernel's AT_PLATFORM (``v7l``; ``v8l`` under an arm64 kernel;
    ``aarch64``) and those of AT_HWCAP's bits glibc searches (neon, vfp; atomics), as
    elf/dl-hwcaps.c takes them."""
    bits = _ARM_IMPORTANT[machine]
    return (_power_set(["tls"] + ([platform] if platform else [])
                       + [n for b, n in bits if hwcap >> b & 1]),
            frozenset(n for b, n in bits if not hwcap >> b & 1))


def _own_auxv() -> tuple[int, str | None]:
    """This process's AT_HWCAP and AT_PLATFORM as the kernel gave them (/proc/self/auxv; not
    getauxval(3), whose AT_HWCAP is glibc's own on x86): a program of its own kind gets the
    same. (0, None) where they cannot be had."""
    import ctypes
    word = struct.calcsize("L")
    try:
        with open("/proc/self/auxv", "rb") as f:
            data = f.read()
    except OSError:
        return 0, None
    pairs = dict(struct.iter_unpack("=QQ" if word == 8 else "=II",
                                    data[:len(data) // (2 * word) * 2 * word]))
    at = pairs.get(_AT_PLATFORM)
    return pairs.get(_AT_HWCAP, 0), ctypes.string_at(at).decode(errors="replace") if at else None


def _own_kind() -> tuple | None:
    """The ELF kind (class, byte order, machine) of the Python this agent runs."""
    own = _read(os.path.realpath(sys.executable))
    return own.kind if own is not None else None


def parse_diagnostics(text: str) -> dict[str, str]:
    """``key=value`` lines of ``ld.so --list-diagnostics``, a quoted value unquoted."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value[1:-1] if value[:1] == value[-1:] == '"' and len(value) > 1 \
                else value
    return out


def _trusted(path: str) -> str | None:
    """``path`` resolved, where the agent may run it: it and each directory above it owned by
    root or the agent's user, none that others may write (but a sticky one, /tmp: no one
    else may rename what is in it), so no one else can put another file there between this
    look and the run; else None."""
    real = os.path.realpath(path)
    at = real
    while True:
        try:
            st = os.stat(at)
        except OSError:
            return None
        if st.st_uid not in (0, os.getuid()) or st.st_mode & 0o022 and not (
                at != real and st.st_mode & 0o1000):
            return None
        if at == os.path.dirname(at):
            return real
        at = os.path.dirname(at)


def legacy_subdirs(help_text: str) -> tuple[str, ...]:
    """The legacy hwcaps subdirectories glibc 2.33 to 2.36 search under each directory before
    it, from ``ld.so --help``'s list of them: its platform (``AT_PLATFORM``), ``tls`` and the
    hwcaps it searches, highest bit first (elf/dl-usage.c). Their paths are each subset of
    ``tls``, the platform and those hwcaps, in that order, the subsets in the order of a
    binary count down from all of them, ``tls`` its highest bit (elf/dl-hwcaps.c's power set:
    ``tls/haswell/avx512_1/x86_64``, ``tls/haswell/avx512_1``, ``tls/haswell/x86_64`` ...
    ``x86_64``); the directory itself, last, is not among them. () where it lists none."""
    return _power_set(_legacy_list(help_text)[0])


def _power_set(parts: list[str]) -> tuple[str, ...]:
    """elf/dl-hwcaps.c's subdirectories of ``parts`` (tls, the platform, the hwcaps highest
    bit first), all of them first, the directory itself (no part) left out."""
    top = len(parts) - 1
    return tuple("/".join(p for i, p in enumerate(parts) if subset >> (top - i) & 1)
                 for subset in range((1 << len(parts)) - 1, 0, -1))


def _legacy_list(help_text: str) -> tuple[list[str], frozenset[str]]:
    """What ``ld.so --help`` lists of the legacy subdirectories: ``tls``, the platform and
    the hwcaps searched, in their paths' order ([] for no list), and the hwcaps not
    searched."""
    lines = help_text.splitlines()
    if _LEGACY_HEADER not in lines:
        return [], frozenset()
    listed = []
    for line in lines[lines.index(_LEGACY_HEADER) + 1:]:
        name, _, how = line.strip().partition(" ")
        if not line.startswith("  ") or not name:
            break
        listed.append((name, how))
    platform = [n for n, how in listed[:1] if "AT_PLATFORM" in how]
    # after the platform, tls, then the loader's hwcap bits
    hwcaps = listed[len(platform) + 1:]
    return (["tls"] + platform + [n for n, how in hwcaps if "searched" in how],
            frozenset(n for n, how in hwcaps if "searched" not in how))


def _ask(loader: str, option: str, loader_env: tuple[tuple[str, str], ...]) -> str | None:
    """What ``loader option`` prints, run with the run's hwcaps variables alone; None where
    it fails."""
    try:
        done = subprocess.run([loader, option], capture_output=True, text=True,
                              errors="replace", timeout=10, env=dict(loader_env),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _version(text: str | None) -> tuple[int, ...]:
    """``2.36`` as (2, 36); () where not a version."""
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else ()


def _glibc_facts(loader: str, kind: tuple, loader_env: tuple[tuple[str, str], ...] = ()
                 ) -> LoaderFacts:
    """What ``loader --list-diagnostics`` says (glibc 2.33 on), and up to 2.36 its ``--help``
    (the legacy subdirectories), run with the run's hwcaps variables (``hwcaps_env``), for a
    program of ELF ``kind``; where it says nothing, the CPU's x86-64 levels less those the
    tunables turn off, no $LIB/$PLATFORM, and no legacy subdirectory but glibc 2.27 to 2.32's
    on x86-64 (``cpuinfo_legacy``) and 2.28 to 2.32's on arm and arm64 (``auxv_legacy``)."""
    x86_64 = kind[0] == 2 and kind[2] == _EM_X86_64
    facts = {}
    real = _trusted(loader)
    if real is not None:
        facts = parse_diagnostics(_ask(real, "--list-diagnostics", loader_env) or "")
    if "dl_hwcaps_subdirs" not in facts:
        # glibc before 2.34 installs its loader as ld-VERSION.so (ld-2.31.so), the name ld.so's
        # links point to; glibc-hwcaps subdirectories came with 2.33
        named = re.fullmatch(r"ld-(\d+\.\d+)\.so", os.path.basename(os.path.realpath(loader)))
        version = _version(named.group(1)) if named else ()
        if version and version < (2, 33):
            # the legacy subdirectories of 2.27 to 2.32 are known from the CPU; not where the
            # run's hwcaps variables change them (their names and effects differ there)
            old: tuple[tuple[str, ...], frozenset[str]] = ((), frozenset())
            if loader_env:
                pass
            elif x86_64 and version >= (2, 27):
                old = cpuinfo_legacy()
            elif kind[2] in _ARM_IMPORTANT and version >= (2, 28) and kind == _own_kind():
                old = auxv_legacy(kind[2], *_own_auxv())
            return LoaderFacts(legacy=old[0], unsearched=old[1])
        if not x86_64:
            return LoaderFacts()
        return LoaderFacts(hwcaps=cpuinfo_levels(off=frozenset(_turned_off(loader_env))))
    legacy: tuple[str, ...] = ()
    unsearched: frozenset[str] = frozenset()
    if real is not None and _version(facts.get("version.version")) < (2, 37):
        listed = _ask(real, "--help", loader_env) or ""
        legacy, unsearched = legacy_subdirs(listed), _legacy_list(listed)[1]
    names = [n for n in facts["dl_hwcaps_subdirs"].split(":") if n]
    try:
        active = int(facts.get("dl_hwcaps_subdirs_active", "0"), 0)
    except ValueError:
        active = 0
    system = tuple(v.rstrip("/") or "/" for k, v in sorted(
        ((k, v) for k, v in facts.items() if k.startswith("path.system_dirs[")),
        key=lambda kv: int(kv[0][len("path.system_dirs["):-1], 16)))
    return LoaderFacts(hwcaps=tuple(n for i, n in enumerate(names) if active >> i & 1),
                       lib=facts.get("dl_dst_lib") or None,
                       platform=facts.get("dl_platform") or None,
                       system_dirs=system or DEFAULT_DIRS, legacy=legacy,
                       unsearched=unsearched)


def _musl_facts(arch: str, root: str) -> LoaderFacts:
    """musl's system path: /etc/ld-musl-ARCH.path's directories, else its defaults."""
    try:
        with open(f"{root}/etc/ld-musl-{arch}.path", encoding="utf-8",
                  errors="replace") as f:
            dirs = tuple(d for d in re.split(r"[:\n]", f.read()) if d)
    except OSError:
        dirs = tuple(root + d for d in MUSL_DEFAULT_DIRS)
    return LoaderFacts(system_dirs=(), musl_dirs=dirs)


def _dirs(spec: str | None, origin: str, facts: LoaderFacts = LoaderFacts()) -> list[str]:
    """The directories of a DT_RPATH/DT_RUNPATH or LD_LIBRARY_PATH; ``$ORIGIN`` replaced,
    ``$LIB`` and ``$PLATFORM`` where the loader said them, a directory with another token
    left out (not followed)."""
    tokens = {"ORIGIN": origin, "LIB": facts.lib, "PLATFORM": facts.platform}
    out = []
    for d in (spec or "").split(":"):
        for token, value in tokens.items():
            if value is not None:
                d = d.replace("${%s}" % token, value).replace("$" + token, value)
        if d and "$" not in d:
            out.append(d)
    return out


def read_ld_cache(path: str = LD_SO_CACHE) -> dict[str, list[str]]:
    """name -> the paths /etc/ld.so.cache gives for it, in its order (every architecture's:
    the caller checks the kind); {} where it is missing or in a format not known here."""
    return _read_ld_cache(path)[0]


def _read_ld_cache(path: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """``read_ld_cache``'s answer, and the legacy hwcaps of its paths that have some (path ->
    its entry's hwcap: a bit for each of its last directories that ldconfig took for a hwcap,
    platform or tls; a glibc-hwcaps entry's is not one)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {}, {}
    start = 0
    if data.startswith(_CACHE_OLD):  # the old format first, the new one after it
        nlibs, = struct.unpack_from("=I", data, 12)
        start = (16 + nlibs * 12 + 7) & ~7
    if data[start:start + len(_CACHE_NEW)] != _CACHE_NEW:
        return {}, {}
    out: dict[str, list[str]] = {}
    legacy: dict[str, int] = {}
    try:
        nlibs, = struct.unpack_from("=I", data, start + 20)
        for i in range(nlibs):
            # struct file_entry_new (sysdeps/generic/dl-cache.h): flags, key, value,
            # osversion, hwcap
            _, key, value, _, hwcap = struct.unpack_from("=iIIIQ", data, start + 48 + i * 24)
            name = data[start + key:data.index(b"\0", start + key)].decode(errors="replace")
            where = data[start + value:data.index(b"\0", start + value)].decode(
                errors="replace")
            out.setdefault(name, []).append(where)
            if hwcap and (hwcap >> 32) & ~_ISA_LEVEL_MASK != _HWCAP_EXTENSION >> 32:
                legacy[where] = hwcap
    except (struct.error, ValueError):
        return {}, {}
    return out, legacy


class Libraries:
    """The libraries of programs, kept by their identity (see the module's docstring).
    ``root`` is where the system's files are (a fake tree's in tests): the loader, its cache
    and path file, the default directories (a path file's are taken as written)."""

    def __init__(self, cache_path: str | None = None, root: str = ""):
        self.root = root
        self.cache_path = cache_path if cache_path is not None else root + LD_SO_CACHE
        self._ld_cache: tuple[tuple, dict[str, list[str]], dict[str, int]] | None = None
        self._known: dict[tuple, list[str]] = {}
        self._facts: dict[tuple, LoaderFacts] = {}
        self._ident: tuple = ()
        self._ident_at = -1e9

    def of(self, program: str, ld_library_path: str = "",
           loader_env: tuple[tuple[str, str], ...] = ()) -> list[str]:
        """The resolved paths of the libraries (and interpreter) ``program`` loads, in the
        order found, its run's environment giving ``ld_library_path`` and ``loader_env``
        (``hwcaps_env``); [] for a file that is no dynamic ELF program or cannot be read."""
        try:
            st = os.stat(program)
        except OSError:
            return []
        ident = self._cache_identity()
        # (device, inode) is the file whichever name it has (no realpath: its lstat of each
        # component was most of the cost of a look)
        key = (program, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, ld_library_path,
               loader_env, ident)
        found = self._known.get(key)
        if found is None:
            found = self._resolve(program, ld_library_path, loader_env)
            if len(self._known) > 1000:
                self._known.clear()
            self._known[key] = found
        return found

    def _cache_identity(self) -> tuple:
        """The ld.so.cache's (inode, size, mtime), stat'ed at most once a second: ldconfig
        run after a library was installed is seen from the next look on."""
        now = time.monotonic()
        if now - self._ident_at >= 1.0:
            try:
                st = os.stat(self.cache_path)
                self._ident = (st.st_ino, st.st_size, st.st_mtime_ns)
            except OSError:
                self._ident = ()
            self._ident_at = now
        return self._ident

    def _names(self) -> tuple[dict[str, list[str]], dict[str, int]]:
        """The ld.so.cache's names and legacy hwcaps (``_read_ld_cache``), read again once
        it changed."""
        ident = self._cache_identity()
        if self._ld_cache is None or self._ld_cache[0] != ident:
            self._ld_cache = (ident, *_read_ld_cache(self.cache_path))
        return self._ld_cache[1], self._ld_cache[2]

    def loader_facts(self, loader: str, kind: tuple,
                     loader_env: tuple[tuple[str, str], ...] = ()) -> LoaderFacts:
        """What the loader at ``loader`` (the root's) searches (``LoaderFacts``) for a run
        with the hwcaps variables ``loader_env`` (``hwcaps_env``), kept by its identity: asked
        once per loader file and such variables."""
        musl = _MUSL_LOADER.fullmatch(os.path.basename(loader))
        try:
            st = os.stat(loader)
            key: tuple = (loader, st.st_dev, st.st_ino, st.st_mtime_ns, kind, loader_env)
        except OSError:
            key = (loader, kind, loader_env)
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = (
                _musl_facts(musl.group(1), self.root) if musl else
                _glibc_facts(loader, kind, loader_env))
            if not facts.musl_dirs and facts.system_dirs is DEFAULT_DIRS:
                facts = self._facts[key] = replace(
                    facts, system_dirs=tuple(self.root + d for d in DEFAULT_DIRS))
        return facts

    def _resolve(self, program: str, ld_library_path: str,
                 loader_env: tuple[tuple[str, str], ...]) -> list[str]:
        top = _read(program)
        if top is None:
            return []
        interp = self.root + top.interp if top.interp else None
        facts = self.loader_facts(interp, top.kind, loader_env) if interp else LoaderFacts()
        musl = facts.musl_dirs is not None
        exe_dir = os.path.dirname(os.path.realpath(program))
        exe_rpath = _dirs(top.rpath, exe_dir, facts) if top.runpath is None else []
        env_dirs = _dirs(ld_library_path, exe_dir, facts)
        names, legacy = ({}, {}) if musl else self._names()
        found: list[str] = []
        seen: set[str] = set()
        done: set[str] = set()
        present: dict[str, list[str]] = {}  # directory -> its subdirectories to look in
        if interp:
            found.append(interp)
            done.add(os.path.realpath(interp))
        # (object, its directory, the name it needs, the search paths of those that loaded it:
        # musl's inherited DT_RUNPATH/DT_RPATH)
        queue = [(top, exe_dir, name, ()) for name in top.needed]
        while queue and len(found) < _MAX_LIBS:
            obj, origin, name, above = queue.pop(0)
            if name in seen:
                continue
            own = obj.runpath if obj.runpath is not None else obj.rpath
            chain = ((own, origin),) + above if musl else ()
            if "/" in name:
                candidates = [name]
            elif musl:
                if _MUSL_SELF.match(name):
                    seen.add(name)  # the loader itself, found first
                    continue
                candidates = [os.path.join(d, name) for d in env_dirs + [
                    d for spec, o in chain for d in _dirs(spec, o, facts)]
                    + list(facts.musl_dirs or ())]
            else:
                dirs = (env_dirs + _dirs(obj.runpath, origin, facts)
                        if obj.runpath is not None else
                        _dirs(obj.rpath, origin, facts) + exe_rpath + env_dirs)
                # opened in turn up to the first found: the cache before the system
                # directories, whose subdirectories are not even looked for then
                candidates = itertools.chain(
                    (os.path.join(d, sub, name) for d in dirs
                     for sub in self._present(d, facts, present)),
                    self._cached(names.get(name, []), facts, legacy),
                    (os.path.join(d, sub, name) for d in facts.system_dirs
                     for sub in self._present(d, facts, present)))
            for path in candidates:
                lib = _read(path)
                if lib is None or lib.kind != top.kind:
                    continue
                seen.add(name)
                real = os.path.realpath(path)
                if real not in done:  # one file by two names (/lib64/ld-linux..., /lib/...)
                    done.add(real)
                    found.append(path)
                queue += [(lib, os.path.dirname(real), n, chain) for n in lib.needed]
                break
        return found

    @classmethod
    def _present(cls, directory: str, facts: LoaderFacts, memo: dict[str, list[str]]
                 ) -> list[str]:
        """``_subdirs`` of ``directory`` less those whose first directory is not there (a
        stat for each of glibc-hwcaps, tls, the platform and each hwcap, not an open for each
        of the 19 subdirectories glibc 2.36 searches on x86-64), kept in ``memo``."""
        found = memo.get(directory)
        if found is None:
            there: dict[str, bool] = {}
            found = memo[directory] = []
            for sub in cls._subdirs(facts):
                top = sub.partition("/")[0]
                if top and top not in there:
                    there[top] = os.path.isdir(os.path.join(directory, top))
                if not top or there[top]:
                    found.append(sub)
        return found

    @staticmethod
    def _subdirs(facts: LoaderFacts) -> list[str]:
        """What glibc looks in under each directory, in its order: the hwcaps subdirectories
        of the supported levels, best first, the legacy ones (glibc 2.36 and before), then
        the directory itself."""
        return [f"glibc-hwcaps/{h}" for h in facts.hwcaps] + list(facts.legacy) + [""]

    @staticmethod
    def _cached(paths: list[str], facts: LoaderFacts, legacy: dict[str, int]) -> list[str]:
        """ld.so.cache's paths of a name as glibc takes them: those in a glibc-hwcaps
        subdirectory only of a supported level, the best level first, then the others; of
        those an entry of legacy hwcaps (``legacy``: path -> its hwcap), where the loader
        lists what it searches (glibc 2.33 to 2.36), only where it searches each."""
        def level(path: str) -> int | None:
            m = re.search(r"/glibc-hwcaps/([^/]+)/[^/]+$", path)
            if m is None:
                hwcap = legacy.get(path)
                if hwcap and facts.legacy and not _searched(path, hwcap, facts):
                    return None
                return len(facts.hwcaps)
            return facts.hwcaps.index(m.group(1)) if m.group(1) in facts.hwcaps else None
        ranked = [(level(p), i, p) for i, p in enumerate(paths)]
        return [p for lv, _, p in sorted(r for r in ranked if r[0] is not None)]


def _searched(path: str, hwcap: int, facts: LoaderFacts) -> bool:
    """Whether glibc 2.33 to 2.36 take ld.so.cache's entry ``path`` of legacy hwcaps
    ``hwcap``: ldconfig gave it a bit for each of its last directories that names a hwcap, a
    platform or tls (elf/ldconfig.c path_hwcap), and the loader takes it only where each is
    one it searches (elf/dl-cache.c): a hwcap it searches (not one it lists unsearched, even
    where that is its platform's name too), its platform, tls by bit 63 (on arm ldconfig
    takes ``tls`` for the hwcap of that name, which the loader searches for no entry)."""
    count = bin(hwcap).count("1")
    last = path.split("/")[-1 - count:-1]
    searched = set(facts.legacy[0].split("/"))
    return len(last) == count and ("tls" in last) == bool(hwcap & _TLS_BIT) and all(
        d in searched and d not in facts.unsearched for d in last)
