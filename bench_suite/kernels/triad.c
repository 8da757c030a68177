/* Memory-bandwidth-bound: STREAM-style triad a[i] = b[i] + s*c[i] over three arrays of `size`
 * doubles, TRIAD_PASSES passes with a team barrier between passes. Each thread first-touches
 * its own block on its own cpu, so pages land on that cpu's memory node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define TRIAD_PASSES 40
#define SCALAR 3.0
/* Largest array we accept (elements): 3 arrays of 2^32 doubles is already 96 GiB. */
#define TRIAD_MAX ((int64_t)1 << 32)

typedef struct {
    int64_t n;
    double *a, *b, *c;
} triad_state;

/* Small integers and quarters: every product and sum is exact, so the check can demand
 * equality whether or not the compiler fuses the multiply-add. */
static inline double b_val(int64_t i) { return (double)(i & 1023); }
static inline double c_val(int64_t i) { return (double)(i & 511) * 0.25; }

static int triad_setup(ob_ctx *ctx) {
    triad_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        s->a[i] = -1.0;
        s->b[i] = b_val(i);
        s->c[i] = c_val(i);
    }
    return 0;
}

static int triad_work(ob_ctx *ctx) {
    triad_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    double *restrict a = s->a;
    const double *restrict b = s->b;
    const double *restrict c = s->c;
    for (int p = 0; p < TRIAD_PASSES; p++) {
        for (int64_t i = lo; i < hi; i++)
            a[i] = b[i] + SCALAR * c[i];
        ob_task_done(ctx, hi > lo);
        ob_barrier(ctx);
    }
    return 0;
}

int ob_kernel_triad(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                    size_t errlen) {
    if (spec->size < 1 || spec->size > TRIAD_MAX) {
        snprintf(err, errlen, "triad size must be 1..%lld elements per array, got %lld",
                 (long long)TRIAD_MAX, (long long)spec->size);
        return OB_EINVAL;
    }
    triad_state s = {.n = spec->size};
    size_t bytes = (size_t)s.n * sizeof(double);
    /* Page alignment (not calloc) so no page is touched before the pinned first touch. */
    if (posix_memalign((void **)&s.a, 4096, bytes) != 0) s.a = NULL;
    if (posix_memalign((void **)&s.b, 4096, bytes) != 0) s.b = NULL;
    if (posix_memalign((void **)&s.c, 4096, bytes) != 0) s.c = NULL;
    if (!s.a || !s.b || !s.c) {
        free(s.a); free(s.b); free(s.c);
        snprintf(err, errlen, "triad: cannot allocate 3 x %zu bytes", bytes);
        return OB_ENOMEM;
    }
    ob_kernel_ops ops = {.setup = triad_setup, .work = triad_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        double sum = 0.0;
        for (int64_t i = 0; i < s.n; i++) {
            double want = b_val(i) + SCALAR * c_val(i);
            if (s.a[i] != want || s.b[i] != b_val(i) || s.c[i] != c_val(i)) {
                snprintf(err, errlen, "triad check failed at element %lld: a=%g, expected %g",
                         (long long)i, s.a[i], want);
                rc = OB_ECHECK;
                break;
            }
            sum += s.a[i];
        }
        *check_value = sum;
    }
    free(s.a); free(s.b); free(s.c);
    return rc;
}
