/* Imbalanced compute: row i of a triangular loop does i inner iterations (i < size), rows
 * split statically in contiguous blocks, so the thread holding the last rows has the most
 * work (about 3x the first's with two threads) and the others wait for it at the end. Each
 * inner iteration hashes the index forward and back through invertible rounds: real work
 * the compiler cannot fold, whose result is the index itself, so the sum is known exactly. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define TRI_ROUNDS 3
#define TRI_MAX ((int64_t)1 << 31)
#define TRI_MUL 0x9e3779b97f4a7c15ULL

typedef struct {
    int64_t n;
    uint64_t mul, inv;  /* read from memory so the compiler cannot cancel them */
    struct { uint64_t v; char pad[56]; } *partial;
} tri_state;

static int tri_work(ob_ctx *ctx) {
    tri_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    const uint64_t mul = s->mul, inv = s->inv, n = (uint64_t)s->n;
    uint64_t total = 0;
    for (int64_t i = lo; i < hi; i++) {
        for (int64_t j = 0; j < i; j++) {
            uint64_t x = (uint64_t)i * n + (uint64_t)j;
            for (int r = 0; r < TRI_ROUNDS; r++) {
                x ^= x >> 33;
                x *= mul;
            }
            for (int r = 0; r < TRI_ROUNDS; r++) {
                x *= inv;
                x ^= x >> 33;  /* its own inverse, as 2 * 33 >= 64 */
            }
            total += x;
        }
        ob_task_done(ctx, 1);
    }
    s->partial[ctx->tid].v = total;
    return 0;
}

int ob_kernel_triangle(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                       size_t errlen) {
    if (spec->size < 1 || spec->size > TRI_MAX) {
        snprintf(err, errlen, "triangle size must be 1..%lld rows, got %lld",
                 (long long)TRI_MAX, (long long)spec->size);
        return OB_EINVAL;
    }
    tri_state s = {.n = spec->size, .mul = TRI_MUL, .inv = TRI_MUL};
    /* Inverse of an odd number mod 2^64 by Newton's iteration (each step doubles the bits). */
    for (int k = 0; k < 6; k++)
        s.inv *= 2 - TRI_MUL * s.inv;
    s.partial = calloc((size_t)spec->nthreads, sizeof *s.partial);
    if (!s.partial) {
        snprintf(err, errlen, "out of memory");
        return OB_ENOMEM;
    }
    ob_kernel_ops ops = {.setup = NULL, .work = tri_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* sum_{i<n} sum_{j<i} (i n + j) = n sum i^2 + sum i(i-1)/2
         *                               = n (n-1)n(2n-1)/6 + n(n-1)(n-2)/6, mod 2^64. */
        uint64_t got = 0;
        for (int t = 0; t < spec->nthreads; t++)
            got += s.partial[t].v;
        uint64_t n = (uint64_t)s.n;
        uint64_t want = n * ob_prod_div6(n - 1, n, 2 * n - 1) + ob_prod_div6(n, n - 1, n - 2);
        *check_value = (double)got;
        if (got != want) {
            snprintf(err, errlen, "triangle check failed: sum %llu, expected %llu",
                     (unsigned long long)got, (unsigned long long)want);
            rc = OB_ECHECK;
        }
    }
    free(s.partial);
    return rc;
}
