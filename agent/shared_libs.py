"""The shared libraries an ELF program loads, found as the dynamic loader (glibc's ld.so,
ld.so(8)) finds them, without running it: its program interpreter (PT_INTERP), then each
DT_NEEDED name, and theirs in turn, searched in the object's DT_RPATH (and the program's,
where the object has no DT_RUNPATH), the run's LD_LIBRARY_PATH, the object's DT_RUNPATH, the
names of /etc/ld.so.cache and the default directories (/lib, /usr/lib, /lib64, /usr/lib64), a
candidate taken only where its ELF class, byte order and machine are the program's (ld.so skips
the others). ``$ORIGIN`` in a path is the object's directory.

Not followed (the libraries found otherwise are still covered): ``$LIB`` and ``$PLATFORM`` in a
path, the glibc-hwcaps subdirectories (``glibc-hwcaps/x86-64-v3``), LD_PRELOAD and
/etc/ld.so.preload, libraries opened at run time (dlopen: plugins, Python's extension
modules), and a name not found (the run fails or finds it where ld.so alone knows). A program
that is no ELF file (a script) has none here: its interpreter's are not looked for.

The search reads a few headers of each object (no hashing): ``libraries`` keeps its answer
by the program's identity (device, inode, size, mtime), LD_LIBRARY_PATH and the cache's mtime,
so the look before each run only stats.
"""

from __future__ import annotations

import os
import struct
import time
from typing import IO

LD_SO_CACHE = "/etc/ld.so.cache"
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
_MAX_LIBS = 256  # a bound on a broken or hostile tree's closure
_CACHE_NEW = b"glibc-ld.so.cache1.1"
_CACHE_OLD = b"ld.so-1.7.0"

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


def _dirs(spec: str | None, origin: str) -> list[str]:
    """The directories of a DT_RPATH/DT_RUNPATH or LD_LIBRARY_PATH; ``$ORIGIN`` replaced, a
    directory with another token ($LIB, $PLATFORM) left out (not followed)."""
    out = []
    for d in (spec or "").split(":"):
        d = d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        if d and "$" not in d:
            out.append(d)
    return out


def read_ld_cache(path: str = LD_SO_CACHE) -> dict[str, list[str]]:
    """name -> the paths /etc/ld.so.cache gives for it, in its order (every architecture's:
    the caller checks the kind); {} where it is missing or in a format not known here."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {}
    start = 0
    if data.startswith(_CACHE_OLD):  # the old format first, the new one after it
        nlibs, = struct.unpack_from("=I", data, 12)
        start = (16 + nlibs * 12 + 7) & ~7
    if data[start:start + len(_CACHE_NEW)] != _CACHE_NEW:
        return {}
    out: dict[str, list[str]] = {}
    try:
        nlibs, = struct.unpack_from("=I", data, start + 20)
        for i in range(nlibs):
            _, key, value = struct.unpack_from("=iII", data, start + 48 + i * 24)
            name = data[start + key:data.index(b"\0", start + key)].decode(errors="replace")
            where = data[start + value:data.index(b"\0", start + value)].decode(
                errors="replace")
            out.setdefault(name, []).append(where)
    except (struct.error, ValueError):
        return {}
    return out


class Libraries:
    """The libraries of programs, kept by their identity (see the module's docstring)."""

    def __init__(self, cache_path: str = LD_SO_CACHE):
        self.cache_path = cache_path
        self._ld_cache: tuple[tuple, dict[str, list[str]]] | None = None
        self._known: dict[tuple, list[str]] = {}
        self._ident: tuple = ()
        self._ident_at = -1e9

    def of(self, program: str, ld_library_path: str = "") -> list[str]:
        """The resolved paths of the libraries (and interpreter) ``program`` loads, in the
        order found; [] for a file that is no dynamic ELF program or cannot be read."""
        try:
            st = os.stat(program)
        except OSError:
            return []
        ident = self._cache_identity()
        # (device, inode) is the file whichever name it has (no realpath: its lstat of each
        # component was most of the cost of a look)
        key = (program, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, ld_library_path,
               ident)
        found = self._known.get(key)
        if found is None:
            found = self._resolve(program, ld_library_path)
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

    def _names(self) -> dict[str, list[str]]:
        ident = self._cache_identity()
        if self._ld_cache is None or self._ld_cache[0] != ident:
            self._ld_cache = (ident, read_ld_cache(self.cache_path))
        return self._ld_cache[1]

    def _resolve(self, program: str, ld_library_path: str) -> list[str]:
        top = _read(program)
        if top is None:
            return []
        exe_dir = os.path.dirname(os.path.realpath(program))
        exe_rpath = _dirs(top.rpath, exe_dir) if top.runpath is None else []
        env_dirs = _dirs(ld_library_path, exe_dir)
        names = self._names()
        found: list[str] = []
        seen: set[str] = set()
        done: set[str] = set()
        if top.interp:
            found.append(top.interp)
            done.add(os.path.realpath(top.interp))
        queue = [(top, exe_dir, name) for name in top.needed]
        while queue and len(found) < _MAX_LIBS:
            obj, origin, name = queue.pop(0)
            if name in seen:
                continue
            if "/" in name:
                candidates = [name]
            elif obj.runpath is not None:
                candidates = [os.path.join(d, name) for d in
                              env_dirs + _dirs(obj.runpath, origin)]
            else:
                candidates = [os.path.join(d, name) for d in
                              _dirs(obj.rpath, origin) + exe_rpath + env_dirs]
            if "/" not in name:
                candidates += names.get(name, []) + [os.path.join(d, name)
                                                     for d in DEFAULT_DIRS]
            for path in candidates:
                lib = _read(path)
                if lib is None or lib.kind != top.kind:
                    continue
                seen.add(name)
                real = os.path.realpath(path)
                if real not in done:  # one file by two names (/lib64/ld-linux..., /lib/...)
                    done.add(real)
                    found.append(path)
                queue += [(lib, os.path.dirname(os.path.realpath(path)), n)
                          for n in lib.needed]
                break
        return found
