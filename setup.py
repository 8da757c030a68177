"""Adds the native kernels to the build; all project metadata lives in pyproject.toml."""
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

setup(ext_modules=[kernels])
