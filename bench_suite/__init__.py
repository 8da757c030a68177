"""opptune.bench_suite: native pthread kernels with an instrumented runtime.

Light on purpose (the agent runs kernels as `python -m opptune.bench_suite run ...`): only the
standard library and the compiled `_kernels` module, which loads on first run.
"""
from .catalogue import KERNELS, Kernel
from .runner import run_kernel

__all__ = ["KERNELS", "Kernel", "run_kernel"]
