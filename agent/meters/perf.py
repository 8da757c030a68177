"""Performance counters through perf_event_open(2), called with ctypes (no perf binary).

How a run is counted. Two ways, both counting the workload, all its threads and children
(``inherit=1``; one fd per event because inherited counters cannot be read as a group):

* ``spawn(argv)`` (precise; the caller must be allowed to attach to the child): the workload
  starts behind a gate, a ``/bin/sh`` that blocks reading a pipe and then ``exec``s the
  workload. While it blocks the agent opens the counters on the shell's pid with
  ``enable_on_exec=1`` and opens the gate; the counters switch on at the exec, so only the
  workload is counted. ``stop()`` after the process has been waited for reads the totals
  (children's counts fold into the parent's at exit).
* ``start()`` / ``stop()`` around the fork (what the runner's PerfMeter does; no attach, so no
  CAP_SYS_PTRACE over a workload dropped to run_as): counters on the calling thread,
  enabled at start; the child tree created afterwards inherits them. The agent thread's own
  work between start and stop (fork, wait: well under a millisecond) is counted too.

Every value is scaled for multiplexing (value * time_enabled / time_running) and the ratio is
recorded. An event the kernel refuses is invalid with the errno text, never zero.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
import subprocess
import sysconfig
from typing import TYPE_CHECKING, Any

from ...shared.records import DERIVED_COUNTERS

if TYPE_CHECKING:
    from ...shared.records import RunRecord
    from ..runspec import RunSpec

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_HW_CACHE = 0, 1, 3
FORMAT_TOTAL_TIME_ENABLED, FORMAT_TOTAL_TIME_RUNNING = 1 << 0, 1 << 1
IOC_ENABLE, IOC_DISABLE, IOC_RESET = 0x2400, 0x2401, 0x2403
PERF_FLAG_FD_CLOEXEC = 1 << 3

# Bits of the attr flag word (include/uapi/linux/perf_event.h).
F_DISABLED, F_INHERIT, F_EXCLUDE_KERNEL, F_EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
F_ENABLE_ON_EXEC = 1 << 12

# __NR_perf_event_open per syscall ABI, each checked against the kernel's own table
# (torvalds/linux; the line quoted is the table's entry).
SYSCALL_NR = {
    # arch/x86/entry/syscalls/syscall_64.tbl: "298  common  perf_event_open  sys_perf_event_open"
    "x86_64": 298,
    # arch/x86/entry/syscalls/syscall_32.tbl:
    # "336  i386  perf_event_open  sys_perf_event_open  __ia32_sys_perf_event_open"
    "i386": 336,
    # arch/arm/tools/syscall.tbl (EABI; arm64 kernels run 32-bit processes with this table):
    # "364  common  perf_event_open  sys_perf_event_open"
    "arm": 364,
    # include/uapi/asm-generic/unistd.h, the table of arm64, riscv and loongarch:
    # "#define __NR_perf_event_open 241"
    "aarch64": 241,
    "riscv64": 241,
    "riscv32": 241,
    "loongarch64": 241,
    # arch/powerpc/kernel/syscalls/syscall.tbl: "319  common  perf_event_open  sys_perf_event_open"
    "ppc": 319,
    "ppc64": 319,
    # arch/s390/kernel/syscalls/syscall.tbl:
    # "331  common  perf_event_open  sys_perf_event_open  sys_perf_event_open"
    "s390": 331,
    "s390x": 331,
}

# uname machine -> (ABI of a 64-bit process, ABI of a 32-bit process). The number depends on
# the calling process's ABI, not on the kernel's: a 32-bit (armhf) userland on an arm64 kernel
# reports "aarch64" (or "armv8l" under linux32) and must use the arm number. Any "arm*" other
# than arm64 (armv5tel, armv6l, armv7l, armv8l) is 32-bit ARM.
MACHINE_ABIS: dict[str, tuple[str | None, str | None]] = {
    "x86_64": ("x86_64", "i386"), "amd64": ("x86_64", "i386"),
    "i386": (None, "i386"), "i486": (None, "i386"), "i586": (None, "i386"),
    "i686": (None, "i386"),
    "aarch64": ("aarch64", "arm"), "arm64": ("aarch64", "arm"),
    "riscv64": ("riscv64", "riscv32"), "riscv32": (None, "riscv32"),
    "loongarch64": ("loongarch64", None),
    "ppc64le": ("ppc64", "ppc"), "ppc64": ("ppc64", "ppc"), "ppc": (None, "ppc"),
    "s390x": ("s390x", "s390"), "s390": (None, "s390"),
}


def process_abi(machine: str | None = None, pointer_bits: int | None = None,
                multiarch: str | None = None) -> str | None:
    """The syscall ABI this process uses: the kernel's machine name and the interpreter's own
    pointer size (a 32-bit Python on a 64-bit kernel is a compat process). None if unknown."""
    m = (machine or os.uname().machine).lower()
    bits = pointer_bits or struct.calcsize("P") * 8
    if multiarch is None:
        multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    if m.startswith("arm") and m != "arm64":
        abis: tuple[str | None, str | None] = (None, "arm")
    else:
        abis = MACHINE_ABIS.get(m, (None, None))
    if bits == 32 and abis[0] == "x86_64" and multiarch.endswith("x32"):
        return None  # x32: 64-bit kernel calls with __X32_SYSCALL_BIT; not supported here
    return abis[0] if bits == 64 else abis[1]


def syscall_number(machine: str | None = None, pointer_bits: int | None = None,
                   multiarch: str | None = None) -> int | None:
    """__NR_perf_event_open for this process (see :func:`process_abi`); None if unknown."""
    abi = process_abi(machine, pointer_bits, multiarch)
    return SYSCALL_NR.get(abi) if abi else None


def _cache(cache_id: int, op: int, result: int) -> int:
    return cache_id | (op << 8) | (result << 16)


L1D, LL, OP_READ, ACCESS, MISS = 0, 2, 0, 0, 1

# name -> (type, config), names as perf(1) spells them.
EVENTS: dict[str, tuple[int, int]] = {
    "cycles": (PERF_TYPE_HARDWARE, 0),
    "instructions": (PERF_TYPE_HARDWARE, 1),
    "cache-references": (PERF_TYPE_HARDWARE, 2),
    "cache-misses": (PERF_TYPE_HARDWARE, 3),
    "branches": (PERF_TYPE_HARDWARE, 4),
    "branch-misses": (PERF_TYPE_HARDWARE, 5),
    "L1-dcache-loads": (PERF_TYPE_HW_CACHE, _cache(L1D, OP_READ, ACCESS)),
    "L1-dcache-load-misses": (PERF_TYPE_HW_CACHE, _cache(L1D, OP_READ, MISS)),
    "LLC-loads": (PERF_TYPE_HW_CACHE, _cache(LL, OP_READ, ACCESS)),
    "LLC-load-misses": (PERF_TYPE_HW_CACHE, _cache(LL, OP_READ, MISS)),
    "task-clock": (PERF_TYPE_SOFTWARE, 1),  # nanoseconds on cpu
    "page-faults": (PERF_TYPE_SOFTWARE, 2),
    "context-switches": (PERF_TYPE_SOFTWARE, 3),
    "cpu-migrations": (PERF_TYPE_SOFTWARE, 4),
}
DEFAULT_EVENTS = tuple(EVENTS)

# derived name -> (numerator, denominator)
DERIVED = DERIVED_COUNTERS  # defined with the record, which carries them


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr up to PERF_ATTR_SIZE_VER5 (112 bytes)."""
    _fields_ = [
        ("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64), ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16), ("reserved_2", ctypes.c_uint16),
    ]


assert ctypes.sizeof(PerfEventAttr) == 112

_libc = None


def _syscall():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall


def perf_event_open(type_: int, config: int, pid: int, flags: int) -> int:
    """Open one counter; returns the fd or raises OSError carrying the kernel's errno."""
    nr = syscall_number()
    if nr is None:
        raise OSError(errno.ENOSYS, f"perf_event_open syscall number unknown for machine "
                                    f"{os.uname().machine} with a "
                                    f"{struct.calcsize('P') * 8}-bit userland")
    attr = PerfEventAttr()
    attr.type, attr.size, attr.config = type_, ctypes.sizeof(PerfEventAttr), config
    attr.read_format = FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING
    attr.flags = flags
    fd = _syscall()(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_int(pid), ctypes.c_int(-1),
                    ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, str(exc.errno))
    hint = {errno.ENOENT: "event not supported by this cpu/kernel (no hardware PMU?)",
            errno.EOPNOTSUPP: "event not supported (no PMU or no sampling support)",
            errno.EINVAL: "event or attribute not supported by this PMU/kernel",
            errno.EACCES: "not permitted (perf_event_paranoid)",
            errno.EPERM: "not permitted (perf_event_paranoid)",
            errno.ENODEV: "no such PMU"}.get(exc.errno, "")
    return f"perf_event_open: {name} {exc.strerror}" + (f" - {hint}" if hint else "")


class PerfSession:
    """Counters for one run. Use ``spawn`` or ``start``/``stop`` (see the module docstring).

    ``stop()`` returns ``(counters, invalid, scaling)``: counters maps every requested event and
    derived ratio to a float or None; invalid maps each None to its reason; scaling maps each
    valid event to time_running / time_enabled (1.0: counted the whole time, no multiplexing).
    """

    def __init__(self, events=DEFAULT_EVENTS):
        unknown = [e for e in events if e not in EVENTS]
        if unknown:
            raise ValueError(f"unknown perf events: {', '.join(unknown)}; known: "
                             f"{', '.join(EVENTS)}")
        self.events = tuple(events)
        self.fds: dict[str, int] = {}
        self.invalid: dict[str, str] = {}
        self.user_only = False

    def _open_all(self, pid: int, flags: int) -> None:
        self.close()
        self.invalid = {}
        for name in self.events:
            type_, config = EVENTS[name]
            try:
                self.fds[name] = perf_event_open(type_, config, pid, flags)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM) and not flags & F_EXCLUDE_KERNEL:
                    # Unprivileged under paranoid >= 2: user-space counts are still allowed.
                    try:
                        self.fds[name] = perf_event_open(
                            type_, config, pid, flags | F_EXCLUDE_KERNEL | F_EXCLUDE_HV)
                        self.user_only = True
                        continue
                    except OSError as exc2:
                        exc = exc2
                self.invalid[name] = _reason(exc)

    def start(self) -> "PerfSession":
        """Count the calling thread and every thread/child it creates from now on."""
        self._open_all(0, F_DISABLED | F_INHERIT)
        for fd in self.fds.values():
            fcntl.ioctl(fd, IOC_RESET, 0)
            fcntl.ioctl(fd, IOC_ENABLE, 0)
        return self

    def attach(self, pid: int, enable_on_exec: bool = True) -> "PerfSession":
        """Count process ``pid`` (and what it creates later), from its next exec if asked."""
        flags = F_INHERIT | ((F_DISABLED | F_ENABLE_ON_EXEC) if enable_on_exec else 0)
        self._open_all(pid, flags)
        return self

    def spawn(self, argv, **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` behind an exec gate with counters attached; see the module doc."""
        r, w = os.pipe()
        try:
            # Read through /proc: dash redirects only fds 0-9, and no preexec_fn (unsafe with
            # the agent's threads) is needed to move the pipe there.
            gate = ["/bin/sh", "-c", f'read _ < /proc/self/fd/{r}; exec "$@"', "opptune-gate",
                    *argv]
            pass_fds = tuple(popen_kwargs.pop("pass_fds", ()))
            proc = subprocess.Popen(gate, pass_fds=pass_fds + (r,), **popen_kwargs)
        finally:
            os.close(r)
        try:
            self.attach(proc.pid, enable_on_exec=True)
        finally:
            os.write(w, b"go\n")
            os.close(w)
        return proc

    def read(self) -> dict[str, tuple[int, int, int]]:
        """Raw (value, time_enabled, time_running) per open event."""
        out = {}
        for name, fd in self.fds.items():
            try:
                data = os.read(fd, 24)
                out[name] = struct.unpack("QQQ", data[:24])
            except (OSError, struct.error) as exc:
                self.invalid[name] = f"read failed: {exc}"
        return out

    def stop(self):
        for fd in self.fds.values():
            try:
                fcntl.ioctl(fd, IOC_DISABLE, 0)
            except OSError:
                pass
        raw = self.read()
        self.close()
        counters: dict[str, float | None] = {}
        invalid = dict(self.invalid)
        scaling: dict[str, float] = {}
        for name in self.events:
            if name in invalid:
                counters[name] = None
                continue
            value, enabled, running = raw[name]
            if enabled == 0:
                counters[name] = None
                invalid[name] = "counter never enabled (workload did not exec?)"
            elif running == 0:
                counters[name] = None
                invalid[name] = "counter never scheduled on the PMU (multiplexed out)"
            else:
                counters[name] = value * enabled / running
                scaling[name] = running / enabled
        for name, (num, den) in DERIVED.items():
            if num not in self.events or den not in self.events:
                continue
            a, b = counters.get(num), counters.get(den)
            if a is None or b is None:
                counters[name] = None
                invalid[name] = f"needs {num} and {den}"
            elif b == 0:
                counters[name] = None
                invalid[name] = f"{den} is zero"
            else:
                counters[name] = a / b
        if self.user_only:
            scaling["user_only"] = 1.0  # kernel-mode counts excluded (paranoid setting)
        return counters, invalid, scaling

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}

    def __enter__(self) -> "PerfSession":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.fds:
            self.result = self.stop()


class PerfMeter:
    """Adapter from :class:`PerfSession` to the meter plug point (runspec.py): counters armed
    on the worker thread just before the fork, inherited by the child tree, read after the
    child was reaped."""

    name = "perf"

    def __init__(self, events: Any = None):
        self._make = lambda: PerfSession(events or DEFAULT_EVENTS)
        self._session = None

    def start(self, spec: "RunSpec") -> None:
        self._session = self._make().start()

    def stop(self, record: "RunRecord", ctx: dict[str, Any]) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        counters, invalid, scaling = session.stop()
        record.counters.update(counters)
        for k, reason in invalid.items():
            record.invalid[f"counter:{k}"] = reason
        if scaling:
            record.extra["counter_scaling"] = scaling
