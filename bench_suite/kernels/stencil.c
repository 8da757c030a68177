/* Memory-bound with neighbour exchange: Jacobi 5-point sweeps on an n x n periodic grid, rows
 * split statically, a team barrier after every sweep (each sweep reads what the neighbouring
 * threads wrote in the previous one). The start field is 1 + cos(2 pi x/n) cos(4 pi y/n), an
 * eigenmode of the sweep, so the exact result after any number of sweeps is known. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define STENCIL_SWEEPS 64
#define STENCIL_MAX 65536

typedef struct {
    int64_t n;
    double *u, *v;
} stencil_state;

static inline double start_val(int64_t n, int64_t x, int64_t y) {
    return 1.0 + cos(2.0 * M_PI * (double)x / (double)n) * cos(4.0 * M_PI * (double)y / (double)n);
}

static int stencil_setup(ob_ctx *ctx) {
    stencil_state *s = ctx->arg;
    int64_t n = s->n, lo, hi;
    ob_split(ctx, n, &lo, &hi);
    for (int64_t y = lo; y < hi; y++)
        for (int64_t x = 0; x < n; x++) {
            s->u[y * n + x] = start_val(n, x, y);
            s->v[y * n + x] = 0.0;
        }
    return 0;
}

static int stencil_work(ob_ctx *ctx) {
    stencil_state *s = ctx->arg;
    int64_t n = s->n, lo, hi;
    ob_split(ctx, n, &lo, &hi);
    double *src = s->u, *dst = s->v;
    for (int sweep = 0; sweep < STENCIL_SWEEPS; sweep++) {
        for (int64_t y = lo; y < hi; y++) {
            const double *up = src + ((y + n - 1) % n) * n;
            const double *mid = src + y * n;
            const double *dn = src + ((y + 1) % n) * n;
            double *out = dst + y * n;
            out[0] = 0.25 * (up[0] + dn[0] + mid[n - 1] + mid[1]);
            for (int64_t x = 1; x < n - 1; x++)
                out[x] = 0.25 * (up[x] + dn[x] + mid[x - 1] + mid[x + 1]);
            out[n - 1] = 0.25 * (up[n - 1] + dn[n - 1] + mid[n - 2] + mid[0]);
        }
        ob_task_done(ctx, hi > lo);
        ob_barrier(ctx);
        double *t = src; src = dst; dst = t;
    }
    return 0;
}

int ob_kernel_stencil(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                      size_t errlen) {
    if (spec->size < 4 || spec->size > STENCIL_MAX) {
        snprintf(err, errlen, "stencil size must be 4..%d (grid side), got %lld", STENCIL_MAX,
                 (long long)spec->size);
        return OB_EINVAL;
    }
    int64_t n = spec->size;
    stencil_state s = {.n = n};
    size_t bytes = (size_t)n * (size_t)n * sizeof(double);
    if (posix_memalign((void **)&s.u, 4096, bytes) != 0) s.u = NULL;
    if (posix_memalign((void **)&s.v, 4096, bytes) != 0) s.v = NULL;
    double *cx = malloc(2 * (size_t)n * sizeof *cx);
    if (!s.u || !s.v || !cx) {
        free(s.u); free(s.v); free(cx);
        snprintf(err, errlen, "stencil: cannot allocate 2 x %zu bytes", bytes);
        return OB_ENOMEM;
    }
    ob_kernel_ops ops = {.setup = stencil_setup, .work = stencil_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* The mode's eigenvalue under one sweep is (cos(2 pi/n) + cos(4 pi/n)) / 2; the
         * constant 1 is kept. An even number of sweeps leaves the result in u. */
        double *cy = cx + n;
        for (int64_t i = 0; i < n; i++) {
            cx[i] = cos(2.0 * M_PI * (double)i / (double)n);
            cy[i] = cos(4.0 * M_PI * (double)i / (double)n);
        }
        double lam = pow((cx[1 % n] + cy[1 % n]) / 2.0, STENCIL_SWEEPS);
        const double *u = STENCIL_SWEEPS % 2 == 0 ? s.u : s.v;
        double worst = 0.0, sum = 0.0;
        int64_t where = 0;
        for (int64_t y = 0; y < n; y++)
            for (int64_t x = 0; x < n; x++) {
                double e = fabs(u[y * n + x] - (1.0 + lam * cx[x] * cy[y]));
                if (!(e <= worst)) {  /* NaN counts as the worst */
                    worst = isnan(e) ? INFINITY : e;
                    where = y * n + x;
                }
                sum += u[y * n + x];
            }
        *check_value = sum;
        if (!(worst <= 1e-9)) {
            snprintf(err, errlen,
                     "stencil check failed: point (%lld, %lld) is off the analytic solution by "
                     "%.3g (tolerance 1e-9)", (long long)(where % n), (long long)(where / n),
                     worst);
            rc = OB_ECHECK;
        }
    }
    free(s.u); free(s.v); free(cx);
    return rc;
}
