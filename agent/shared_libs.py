"""The shared libraries an ELF program loads, found as the dynamic loader (glibc's ld.so,
ld.so(8)) finds them, without running it: its program interpreter (PT_INTERP), then each
DT_NEEDED name, and theirs in turn, searched in the object's DT_RPATH (and the program's,
where the object has no DT_RUNPATH), the run's LD_LIBRARY_PATH, the object's DT_RUNPATH, the
names of /etc/ld.so.cache and the loader's system directories (a relative directory of
LD_LIBRARY_PATH from the directory the run starts in), a candidate taken only where
its ELF class, byte order and machine are the program's (ld.so skips the others). ``$ORIGIN``
in a path is the object's directory; ``$LIB``, ``$PLATFORM``, the system directories and the
hwcaps subdirectories searched under each directory before it (``glibc-hwcaps/x86-64-v3``, up
to glibc 2.36 the legacy ``tls/haswell/x86_64``...) are what agent/loader_facts.py says this
machine's loader searches (ld.so.cache's entries in a legacy one only where it searches it,
``_searched``); without them a path with ``$LIB``/``$PLATFORM`` is left out and the system
directories are /lib, /usr/lib, /lib64, /usr/lib64.

A musl program (PT_INTERP ``ld-musl-ARCH.so.1``) is searched as musl does: LD_LIBRARY_PATH,
the DT_RUNPATH (else DT_RPATH) of the object and of those that loaded it, then the directories
of /etc/ld-musl-ARCH.path (split at colons and newlines), else /lib, /usr/local/lib, /usr/lib;
no ld.so.cache, no hwcaps; libc's own names (libc.*, libpthread.*, libm.*...) are the loader.

Not followed (the libraries found otherwise are still covered): glibc's legacy hwcaps
subdirectories where the loader's facts do not list them, and of a hwcap_mask its bits other
than the loader's own (``--help`` names only those), LD_PRELOAD and /etc/ld.so.preload,
libraries opened at run time (dlopen: plugins, Python's extension modules), and a name not
found (the run fails or finds it where ld.so alone knows).

The search reads a few headers of each object (no hashing): ``libraries`` keeps its answer
by the program's identity (file_identity.file_key), LD_LIBRARY_PATH, the run's hwcaps
variables and the cache's mtime, so the look before each run only stats; under each directory
it opens only the subdirectories whose first directory (tls/, glibc-hwcaps/...) is there."""

from __future__ import annotations

import functools
import itertools
import os
import re
import struct
import sys
import time
from dataclasses import replace
from typing import IO

from .file_identity import file_key
from .loader_facts import DEFAULT_DIRS, LoaderFacts, glibc_facts, musl_facts

LD_SO_CACHE = "/etc/ld.so.cache"
_MAX_LIBS = 256  # a bound on a broken or hostile tree's closure
_CACHE_NEW = b"glibc-ld.so.cache1.1"
_CACHE_OLD = b"ld.so-1.7.0"
# an entry's hwcap of a glibc-hwcaps subdirectory: this bit and an ISA level's (dl-cache.h)
_HWCAP_EXTENSION, _ISA_LEVEL_MASK = 1 << 62, (1 << 10) - 1
_TLS_BIT = 1 << 63  # ldconfig's for a tls/ directory (elf/ldconfig.c TLS_HWCAP_BIT)
_MUSL_LOADER = re.compile(r"ld-musl-(.+)\.so\.1")
# names musl's loader takes for itself (ldso/dynlink.c's "reserved"): libc.so, libc.musl-*...
_MUSL_SELF = re.compile(r"lib(?:c|pthread|rt|m|dl|util|xnet)\.")

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


@functools.cache
def _own_kind() -> tuple | None:
    """The ELF kind (class, byte order, machine) of the Python this agent runs."""
    own = _read(os.path.realpath(sys.executable))
    return own.kind if own is not None else None


def _dirs(spec: str | None, origin: str, facts: LoaderFacts, cwd: str | None) -> list[str]:
    """The directories of a DT_RPATH/DT_RUNPATH or LD_LIBRARY_PATH; ``$ORIGIN`` replaced,
    ``$LIB`` and ``$PLATFORM`` where the loader said them, a directory with another token
    left out (not followed); a relative one (``lib``, no $ORIGIN), as any relative path, from
    ``cwd``, the directory the run starts in, not the agent's (``_from``)."""
    tokens = {"ORIGIN": origin, "LIB": facts.lib, "PLATFORM": facts.platform}
    out = []
    for d in (spec or "").split(":"):
        for token, value in tokens.items():
            if value is not None:
                d = d.replace("${%s}" % token, value).replace("$" + token, value)
        if d and "$" not in d:
            out.append(_from(cwd, d))
    return out


def _from(cwd: str | None, directory: str) -> str:
    """``directory`` as a process started in ``cwd`` opens it: a relative one from there."""
    if cwd is None or os.path.isabs(directory):
        return directory
    return cwd if directory == "." else os.path.join(cwd, directory)


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
           loader_env: tuple[tuple[str, str], ...] = (), cwd: str | None = None
           ) -> list[str]:
        """The resolved paths of the libraries (and interpreter) ``program`` loads, in the
        order found, its run's environment giving ``ld_library_path`` and ``loader_env``
        (``hwcaps_env``), a relative directory of ``ld_library_path`` (glibc's empty one
        too) taken from ``cwd``, the directory the run starts in, as the loader does (None:
        this process's); [] for a file that is no dynamic ELF program or cannot be read."""
        try:
            st = os.stat(program)
        except OSError:
            return []
        ident = self._cache_identity()
        # (device, inode) is the file whichever name it has (no realpath: its lstat of each
        # component was most of the cost of a look)
        key = (program, *file_key(st), ld_library_path, loader_env, ident, cwd)
        found = self._known.get(key)
        if found is None:
            found = self._resolve(program, ld_library_path, loader_env, cwd)
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
            key: tuple = (loader, *file_key(st), kind, loader_env)
        except OSError:
            key = (loader, kind, loader_env)
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = (
                musl_facts(musl.group(1), self.root) if musl else
                glibc_facts(loader, kind, loader_env, _own_kind()))
            if not facts.musl_dirs and facts.system_dirs is DEFAULT_DIRS:
                facts = self._facts[key] = replace(
                    facts, system_dirs=tuple(self.root + d for d in DEFAULT_DIRS))
        return facts

    def _resolve(self, program: str, ld_library_path: str,
                 loader_env: tuple[tuple[str, str], ...], cwd: str | None = None
                 ) -> list[str]:
        top = _read(program)
        if top is None:
            return []
        interp = self.root + top.interp if top.interp else None
        facts = self.loader_facts(interp, top.kind, loader_env) if interp else LoaderFacts()
        musl = facts.musl_dirs is not None
        exe_dir = os.path.dirname(os.path.realpath(program))
        exe_rpath = _dirs(top.rpath, exe_dir, facts, cwd) if top.runpath is None else []
        if ld_library_path and not musl:
            # glibc's empty entry is the directory the run starts in; musl skips it
            ld_library_path = ":".join(d or "." for d in ld_library_path.split(":"))
        env_dirs = _dirs(ld_library_path, exe_dir, facts, cwd)
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
                candidates = [_from(cwd, name)]
            elif musl:
                if _MUSL_SELF.match(name):
                    seen.add(name)  # the loader itself, found first
                    continue
                candidates = [os.path.join(d, name) for d in env_dirs + [
                    d for spec, o in chain for d in _dirs(spec, o, facts, cwd)]
                    + list(facts.musl_dirs or ())]
            else:
                dirs = (env_dirs + _dirs(obj.runpath, origin, facts, cwd)
                        if obj.runpath is not None else
                        _dirs(obj.rpath, origin, facts, cwd) + exe_rpath + env_dirs)
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
