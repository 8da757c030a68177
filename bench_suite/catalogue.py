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
    # Loop and data-parallel kernels (issue 19). Sizes: "small" a few to ~50 ms on one core of
    # the 2-core VM, "default" about 1 s there (1-2 s on one core of a board), "large" several
    # times default.
    _kernel(
        name="pointer_chase", kind="memory",
        description="memory latency: chase through one random cyclic permutation of 64-byte "
                    "nodes, every load's address from the previous load; the cycle cut into "
                    "one static stretch per thread, each walked 8 times",
        sizes={"small": 1 << 16, "default": 1 << 20, "large": 1 << 22},
        size_unit="nodes of 64 bytes (8 passes)",
        check="each thread's walk ends where the next stretch starts and the visited indices "
              "sum to n(n-1)/2: the whole cycle of n nodes, each node once",
        tags=("latency", "static"),
    ),
    _kernel(
        name="matmul", kind="compute",
        description="cache-blocked C = A B of n x n doubles in 64 x 64 tiles, row blocks split "
                    "statically, rows first-touched by their threads",
        sizes={"small": 192, "default": 1280, "large": 2560},
        size_unit="matrix side (3 n x n doubles)",
        check="row sums C1 equal A(B1) and column sums 1'C equal (1'A)B within 1e-12 relative "
              "(inputs exact in double, so in practice exactly)",
        tags=("blocked", "static"),
    ),
    _kernel(
        name="stencil", kind="memory",
        description="Jacobi 5-point sweeps on a periodic n x n grid of doubles, 64 sweeps, rows "
                    "split statically, a barrier after each sweep",
        sizes={"small": 512, "default": 3584, "large": 6144},
        size_unit="grid side (2 n x n doubles, 64 sweeps)",
        check="every point equals the analytic solution 1 + lambda^64 cos(2 pi x/n) cos(4 pi y/n) "
              "(the start field is an eigenmode of the sweep) within 1e-9",
        tags=("barrier", "static"),
    ),
    _kernel(
        name="histogram", kind="lock",
        description="reduction with atomics: keys hashed from their index counted into one "
                    "shared 1024-bin table with atomic fetch-add, keys split statically",
        sizes={"small": 1_000_000, "default": 200_000_000, "large": 800_000_000},
        size_unit="keys",
        check="the bins hold n keys in all and each bin exactly its closed-form count "
              "(bin = a bijection of key mod 1024)",
        tags=("atomics", "static"),
    ),
    _kernel(
        name="shared_queue", kind="lock",
        description="producer/consumer over one bounded FIFO ring under one lock: every thread "
                    "produces its static share in batches of 4 (hashing work) and consumes the "
                    "oldest items (more hashing), so items cross threads",
        sizes={"small": 50_000, "default": 8_000_000, "large": 32_000_000},
        size_unit="items",
        check="every item id consumed exactly once (count, sum, sum of squares and xor of the "
              "ids equal their closed forms) and each payload intact",
        tags=("lock", "queue"),
    ),
    _kernel(
        name="triangle", kind="compute",
        description="imbalanced loop: row i does i iterations of invertible integer hashing, "
                    "rows split statically in blocks so the last thread has the most work",
        sizes={"small": 4000, "default": 39_000, "large": 80_000},
        size_unit="rows (n(n-1)/2 inner iterations)",
        check="the sum of the hashed-and-unhashed indices equals its closed form "
              "n sum i^2 + sum i(i-1)/2 (mod 2^64)",
        tags=("imbalanced", "static"),
    ),
    _kernel(
        name="wavefront", kind="compute",
        description="Needleman-Wunsch alignment score of two DNA sequences, DP in 256 x 256 "
                    "blocks, anti-diagonals of blocks split statically with a barrier between "
                    "them (parallelism ramps up and down)",
        sizes={"small": 3000, "default": 36_000, "large": 72_000},
        size_unit="sequence length (n^2 cells)",
        check="the score equals a single-threaded row-by-row computation of the same DP "
              "(run after the timed region)",
        tags=("wavefront", "barrier"),
    ),
    _kernel(
        name="bfs", kind="memory",
        description="level-synchronous BFS from vertex 0 of a connected random graph "
                    "(random tree + 4 random edges per vertex), frontier in dynamic chunks "
                    "of 64, vertices claimed by compare-and-swap, two barriers per level",
        sizes={"small": 200_000, "default": 4_500_000, "large": 12_000_000},
        size_unit="vertices (about 10 neighbours each)",
        check="root at level 0, every vertex reached, and each vertex's level is 1 + the "
              "minimum of its neighbours' levels",
        tags=("irregular", "dynamic", "barrier"),
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
