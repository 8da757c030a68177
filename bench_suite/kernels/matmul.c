/* Compute-bound with cache reuse: C = A B for n x n doubles, blocked in MM_BS x MM_BS tiles
 * so each tile of B is reused from cache; row blocks of C are split statically across
 * threads, each thread first-touching its own rows of A and C. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define MM_BS 64
#define MM_MAX 65536

typedef struct {
    int64_t n, nblocks;
    double *a, *b, *c;
} mm_state;

/* Small multiples of 1/8 and 1/4: every product and partial sum is exact in double for the
 * sizes accepted, so the result does not depend on summation order or contraction. */
static inline double a_val(int64_t i, int64_t k) { return (double)((i * 3 + k * 5) % 17 - 8) * 0.125; }
static inline double b_val(int64_t k, int64_t j) { return (double)((k * 7 + j * 2) % 13 - 6) * 0.25; }

static void block_rows(const ob_ctx *ctx, const mm_state *s, int64_t *r0, int64_t *r1) {
    int64_t lo, hi;
    ob_split(ctx, s->nblocks, &lo, &hi);
    *r0 = lo * MM_BS;
    *r1 = hi * MM_BS < s->n ? hi * MM_BS : s->n;
}

static int mm_setup(ob_ctx *ctx) {
    mm_state *s = ctx->arg;
    int64_t n = s->n, r0, r1;
    block_rows(ctx, s, &r0, &r1);
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = 0; j < n; j++) {
            s->a[i * n + j] = a_val(i, j);
            s->b[i * n + j] = b_val(i, j);
            s->c[i * n + j] = 0.0;
        }
    return 0;
}

static int mm_work(ob_ctx *ctx) {
    mm_state *s = ctx->arg;
    int64_t n = s->n, lo, hi;
    ob_split(ctx, s->nblocks, &lo, &hi);
    const double *restrict a = s->a;
    const double *restrict b = s->b;
    double *restrict c = s->c;
    for (int64_t ib = lo; ib < hi; ib++) {
        int64_t i0 = ib * MM_BS, i1 = i0 + MM_BS < n ? i0 + MM_BS : n;
        for (int64_t k0 = 0; k0 < n; k0 += MM_BS) {
            int64_t k1 = k0 + MM_BS < n ? k0 + MM_BS : n;
            for (int64_t j0 = 0; j0 < n; j0 += MM_BS) {
                int64_t j1 = j0 + MM_BS < n ? j0 + MM_BS : n;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t k = k0; k < k1; k++) {
                        double aik = a[i * n + k];
                        const double *brow = b + k * n;
                        double *crow = c + i * n;
                        for (int64_t j = j0; j < j1; j++)
                            crow[j] += aik * brow[j];
                    }
            }
        }
        ob_task_done(ctx, 1);
    }
    return 0;
}

int ob_kernel_matmul(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                     size_t errlen) {
    if (spec->size < 1 || spec->size > MM_MAX) {
        snprintf(err, errlen, "matmul size must be 1..%d (matrix side), got %lld", MM_MAX,
                 (long long)spec->size);
        return OB_EINVAL;
    }
    int64_t n = spec->size;
    mm_state s = {.n = n, .nblocks = (n + MM_BS - 1) / MM_BS};
    size_t bytes = (size_t)n * (size_t)n * sizeof(double);
    if (posix_memalign((void **)&s.a, 4096, bytes) != 0) s.a = NULL;
    if (posix_memalign((void **)&s.b, 4096, bytes) != 0) s.b = NULL;
    if (posix_memalign((void **)&s.c, 4096, bytes) != 0) s.c = NULL;
    double *v = malloc(2 * (size_t)n * sizeof *v);
    if (!s.a || !s.b || !s.c || !v) {
        free(s.a); free(s.b); free(s.c); free(v);
        snprintf(err, errlen, "matmul: cannot allocate 3 x %zu bytes", bytes);
        return OB_ENOMEM;
    }
    ob_kernel_ops ops = {.setup = mm_setup, .work = mm_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* Row sums C 1 must equal A (B 1), and column sums 1'C must equal (1'A) B: two
         * matrix-vector products, O(n^2), computed from the same formulas as the inputs. */
        double *b1 = v, *a1 = v + n, total = 0.0;
        for (int64_t k = 0; k < n; k++) {
            b1[k] = 0.0;
            a1[k] = 0.0;
            for (int64_t j = 0; j < n; j++) {
                b1[k] += b_val(k, j);
                a1[k] += a_val(j, k);
            }
        }
        double worst = 0.0;
        int64_t where = -1;
        for (int64_t i = 0; i < n; i++) {
            double row = 0.0, want_row = 0.0, col = 0.0, want_col = 0.0, scale = 1.0;
            for (int64_t j = 0; j < n; j++) {
                row += s.c[i * n + j];
                col += s.c[j * n + i];
                want_row += a_val(i, j) * b1[j];
                want_col += a1[j] * b_val(j, i);
                scale += fabs(a_val(i, j) * b1[j]) + fabs(a1[j] * b_val(j, i));
            }
            double e = (fabs(row - want_row) + fabs(col - want_col)) / scale;
            if (!(e <= worst)) {  /* NaN counts as the worst */
                worst = isnan(e) ? INFINITY : e;
                where = i;
            }
            total += row;
        }
        *check_value = total;
        if (!(worst <= 1e-12)) {
            snprintf(err, errlen,
                     "matmul check failed: row/column sums of C differ from A(B1)/(1'A)B at "
                     "index %lld by %.3g (relative; tolerance 1e-12)", (long long)where, worst);
            rc = OB_ECHECK;
        }
    }
    free(s.a); free(s.b); free(s.c); free(v);
    return rc;
}
