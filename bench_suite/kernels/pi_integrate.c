/* Compute-bound: midpoint-rule integral of 4/(1+x^2) over [0,1] (= pi) with `size` points,
 * split statically across threads. No memory traffic beyond a few cache lines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define CHUNK 65536

typedef struct {
    int64_t n;
    double h;
    /* Padded so partial sums of different threads do not share a cache line. */
    struct { double v; char pad[56]; } *partial;
} pi_state;

static int pi_work(ob_ctx *ctx) {
    pi_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    double h = s->h, total = 0.0;
    for (int64_t c = lo; c < hi; c += CHUNK) {
        int64_t end = c + CHUNK < hi ? c + CHUNK : hi;
        /* Per-chunk partials keep rounding error small at large n. */
        double sum = 0.0;
        for (int64_t i = c; i < end; i++) {
            double x = ((double)i + 0.5) * h;
            sum += 4.0 / (1.0 + x * x);
        }
        total += sum;
        ob_task_done(ctx, 1);
    }
    s->partial[ctx->tid].v = total;
    return 0;
}

int ob_kernel_pi_integrate(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                           size_t errlen) {
    if (spec->size < 1) {
        snprintf(err, errlen, "pi_integrate size must be >= 1 point, got %lld",
                 (long long)spec->size);
        return OB_EINVAL;
    }
    pi_state s = {.n = spec->size, .h = 1.0 / (double)spec->size};
    s.partial = calloc((size_t)spec->nthreads, sizeof *s.partial);
    if (!s.partial) {
        snprintf(err, errlen, "out of memory");
        return OB_ENOMEM;
    }
    ob_kernel_ops ops = {.setup = NULL, .work = pi_work};
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        free(s.partial);
        return OB_ERUN;
    }
    double sum = 0.0;
    for (int t = 0; t < spec->nthreads; t++)
        sum += s.partial[t].v;
    free(s.partial);
    double pi = sum * s.h;
    *check_value = pi;
    /* Midpoint error for this integrand is h^2/12; the rest is rounding. */
    double tol = s.h * s.h / 12.0 * 1.01 + 1e-10;
    if (!(fabs(pi - M_PI) <= tol)) {
        snprintf(err, errlen, "pi_integrate check failed: got %.15f, expected pi within %.3g",
                 pi, tol);
        return OB_ECHECK;
    }
    return OB_OK;
}
