/* Recursive task spawning: fib(size) computed by the naive recursion, spawning fib(n-1) as a
 * task and computing fib(n-2) in place down to a cut-off, below which it recurses serially.
 * The work is tiny per call and the task tree unbalanced (left branches are deeper), so
 * creation, distribution, switching and joins show up beside execution. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

/* Below this the recursion is serial: ~30 us per leaf task here, so pool overheads are a few
 * per cent of the run instead of all of it. */
#define CUTOFF 20
#define MAX_N 60

typedef struct {
    int n;
    uint64_t result;
} fib_arg;

static uint64_t fib_serial(int n) { return n < 2 ? (uint64_t)n : fib_serial(n - 1) + fib_serial(n - 2); }

static void fib_task(ob_ctx *ctx, void *vp) {
    fib_arg *a = vp;
    if (a->n <= CUTOFF) {
        a->result = fib_serial(a->n);
        return;
    }
    fib_arg left = {.n = a->n - 1}, right = {.n = a->n - 2};
    ob_taskgroup g = {0};
    if (ob_spawn(ctx, &g, fib_task, &left) != 0)
        fib_task(ctx, &left);
    fib_task(ctx, &right);
    ob_wait(ctx, &g);
    a->result = left.result + right.result;
}

static int fib_work(ob_ctx *ctx) {
    ob_tasks_main(ctx, fib_task, ctx->arg);
    return 0;
}

int ob_kernel_fib_tasks(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                        size_t errlen) {
    if (spec->size < 1 || spec->size > MAX_N) {
        snprintf(err, errlen, "fib_tasks size must be in 1..%d (the fib index), got %lld",
                 MAX_N, (long long)spec->size);
        return OB_EINVAL;
    }
    fib_arg root = {.n = (int)spec->size};
    ob_kernel_ops ops = {.setup = NULL, .work = fib_work};
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &root, out, err, errlen) != 0)
        return OB_ERUN;
    uint64_t a = 0, b = 1;  /* the iterative value, independent of the task tree */
    for (int i = 0; i < root.n; i++) {
        uint64_t c = a + b;
        a = b;
        b = c;
    }
    *check_value = (double)root.result;
    if (root.result != a) {
        snprintf(err, errlen, "fib_tasks check failed: fib(%d) came out %llu, expected %llu",
                 root.n, (unsigned long long)root.result, (unsigned long long)a);
        return OB_ECHECK;
    }
    return OB_OK;
}
