"""What a program's dynamic loader searches on this machine beside the program's own paths
(``LoaderFacts``): glibc's ``glibc-hwcaps/`` levels this CPU supports (``x86-64-v3``), best
first; ``$LIB`` and ``$PLATFORM``; its system directories; up to glibc 2.36 its legacy hwcaps
subdirectories (``tls/haswell/x86_64``...), and musl's path file. glibc 2.33's ``ld.so
--list-diagnostics`` prints most of it, and up to 2.36 ``ld.so --help`` lists the legacy
subdirectories (``glibc_facts``): that runs the loader alone, no program nor library, with the
run's hwcaps variables alone (``hwcaps_env``: ``GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2`` takes
a level away), and only a loader that no one but root or the agent's user may write or replace
(``_trusted``: a program writable by a workload's user must not have the agent run a file of
that user's choice). Where it cannot (an older glibc, another loader), the x86-64 levels are
read from /proc/cpuinfo's flags, less those the tunables turn off (none for a loader file named
ld-2.32.so or older: glibc-hwcaps came with 2.33); no legacy subdirectory is searched but glibc
2.27 to 2.32's on x86-64, known from the CPU (``cpuinfo_legacy``), and 2.28 to 2.32's on arm
and arm64 for a program of the agent's own kind, known from the kernel's AT_HWCAP and
AT_PLATFORM (``auxv_legacy``; neither with hwcaps variables in the run's environment).
agent/shared_libs.py searches with these facts."""

from __future__ import annotations

import os
import re
import struct
import subprocess
from dataclasses import dataclass
from typing import Mapping

DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
MUSL_DEFAULT_DIRS = ("/lib", "/usr/local/lib", "/usr/lib")
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


def glibc_facts(loader: str, kind: tuple, loader_env: tuple[tuple[str, str], ...] = (),
                own_kind: tuple | None = None) -> LoaderFacts:
    """What ``loader --list-diagnostics`` says (glibc 2.33 on), and up to 2.36 its ``--help``
    (the legacy subdirectories), run with the run's hwcaps variables (``hwcaps_env``), for a
    program of ELF ``kind``; where it says nothing, the CPU's x86-64 levels less those the
    tunables turn off, no $LIB/$PLATFORM, and no legacy subdirectory but glibc 2.27 to 2.32's
    on x86-64 (``cpuinfo_legacy``) and 2.28 to 2.32's on arm and arm64 (``auxv_legacy``: for a
    program of the agent's own ELF kind, ``own_kind``, whose kernel hwcaps it shares)."""
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
            elif kind[2] in _ARM_IMPORTANT and version >= (2, 28) and kind == own_kind:
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


def musl_facts(arch: str, root: str) -> LoaderFacts:
    """musl's system path: /etc/ld-musl-ARCH.path's directories, else its defaults."""
    try:
        with open(f"{root}/etc/ld-musl-{arch}.path", encoding="utf-8",
                  errors="replace") as f:
            dirs = tuple(d for d in re.split(r"[:\n]", f.read()) if d)
    except OSError:
        dirs = tuple(root + d for d in MUSL_DEFAULT_DIRS)
    return LoaderFacts(system_dirs=(), musl_dirs=dirs)
