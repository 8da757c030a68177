"""The native kernels: names, kinds, size classes and what each one checks.

Size classes are measured on a 2-core AMD EPYC VM: "small" runs in a few to ~50 ms on one
core (tests), "default" in about 1 s on one core.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Mapping

Kind = Literal["compute", "memory", "lock"]


@dataclass(frozen=True)
class Kernel:
    """One native kernel as the catalogue describes it."""

    name: str
    kind: Kind
    description: str
    sizes: Mapping[str, int]
    size_unit: str
    check: str  # what the kernel verifies about its own result
    tags: tuple[str, ...] = field(default=())

    def resolve_size(self, size: str | int) -> int:
        """A size class name or a positive integer -> the integer size. ValueError otherwise."""
        if isinstance(size, bool):
            raise ValueError(f"size must be a size class or a positive integer, got {size!r}")
        if isinstance(size, int):
            if size < 1:
                raise ValueError(f"size must be >= 1 {self.size_unit}, got {size}")
            return size
        if isinstance(size, str):
            if size in self.sizes:
                return self.sizes[size]
            raise ValueError(f"unknown size class {size!r} for kernel {self.name!r}; "
                             f"known: {', '.join(sorted(self.sizes))} or a positive integer")
        raise ValueError(f"size must be a size class or a positive integer, got {size!r}")

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "description": self.description,
                "sizes": dict(self.sizes), "size_unit": self.size_unit, "check": self.check}


def _kernel(**kw) -> Kernel:
    kw["sizes"] = MappingProxyType(dict(kw["sizes"]))
    return Kernel(**kw)


_ALL = [
    _kernel(
        name="pi_integrate", kind="compute",
        description="midpoint-rule integral of 4/(1+x^2) on [0,1]; floating-point divides in "
                    "registers, static block split, no shared data",
        sizes={"small": 2_000_000, "default": 700_000_000},
        size_unit="integration points",
        check="result equals pi within the midpoint-rule error bound h^2/12",
    ),
    _kernel(
        name="triad", kind="memory",
        description="STREAM-style triad a[i] = b[i] + 3*c[i], 40 passes with a barrier between "
                    "passes; arrays first-touched by their pinned threads",
        # default: 3 x 128 MiB, four times a 32 MiB LLC
        sizes={"small": 1 << 17, "default": 1 << 24},
        size_unit="doubles per array (3 arrays, 40 passes)",
        check="every a[i] equals b[i] + 3*c[i] exactly (values chosen exactly representable)",
    ),
    _kernel(
        name="locked_update", kind="lock",
        description="updates of one shared 64-slot table under one mutex, with private "
                    "hashing of random length outside; ~40% of the work is inside the lock",
        sizes={"small": 30_000, "default": 2_500_000},
        size_unit="locked updates",
        check="shared counter equals size and the table sum equals what threads added",
    ),
    # Task-parallel kernels on the runtime's task pool (issue 19, runtime helper).
    _kernel(
        name="fib_tasks", kind="compute",
        description="naive recursive fib(size): fib(n-1) spawned as a task, fib(n-2) in place, "
                    "serial for n <= 20; per-thread deques with stealing, unbalanced tree",
        # small ~12 ms, default ~1.5 s, large ~6.5 s on one core here
        sizes={"small": 35, "default": 45, "large": 48},
        size_unit="fib index (1..60)",
        check="result equals fib(size) computed iteratively",
        tags=("tasks", "recursive"),
    ),
    _kernel(
        name="merge_sort", kind="memory",
        description="merge sort of random 64-bit keys: left half spawned, right half in place, "
                    "serial merge by the parent, serial sort below 8192 keys",
        # small ~36 ms, default ~1.5 s (2 x 128 MiB), large ~7 s (2 x 512 MiB) on one core
        sizes={"small": 1 << 18, "default": 1 << 24, "large": 1 << 26},
        size_unit="64-bit keys (plus as many scratch)",
        check="output sorted, and its sum and multiset hash equal the input's (a permutation)",
        tags=("tasks", "recursive"),
    ),
]

KERNELS: Mapping[str, Kernel] = MappingProxyType({k.name: k for k in _ALL})
