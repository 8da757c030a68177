"""Adds the compiled parts to the build; all project metadata lives in pyproject.toml."""
from glob import glob

from setuptools import Extension, setup

kernels = Extension(
    "opptune.bench_suite._kernels",
    sources=["bench_suite/_kernels.c", "bench_suite/runtime.c",
             *sorted(glob("bench_suite/kernels/*.c"))],
    depends=["bench_suite/runtime.h", "bench_suite/kernels/kernels.h"],
    extra_compile_args=["-O2", "-pthread", "-std=gnu11"],
    extra_link_args=["-pthread"],
)

# eq. 15 of the variable-delay model, the inner loop of its fit. No floating-point contraction:
# without FMA it gives the same doubles as the numpy reference in memwall.py (aarch64 GCC
# would otherwise fuse multiply-adds)
memwall_eq15 = Extension(
    "opptune.daemon.models._memwall_eq15",
    sources=["daemon/models/_memwall_eq15.c"],
    extra_compile_args=["-O2", "-ffp-contract=off", "-std=gnu11"],
)

setup(ext_modules=[kernels, memwall_eq15])
