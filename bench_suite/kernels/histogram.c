/* Reduction with atomics: `size` keys, each derived by a short private hash from its index,
 * counted into one shared table of HIST_BINS bins with atomic fetch-add. Keys are split
 * statically; the table's cache lines move between the cores that increment them. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define HIST_BITS 10
#define HIST_BINS (1 << HIST_BITS)
#define HIST_MASK ((uint64_t)HIST_BINS - 1)
#define HIST_ROUNDS 4

typedef struct {
    int64_t n;
    uint64_t *bins;
} hist_state;

/* A bijection of [0, HIST_BINS): odd multiplications and xor-shifts within HIST_BITS bits are
 * each invertible. The bin of key i is scramble(i mod HIST_BINS), so the exact count of every
 * bin is known in closed form while consecutive keys still land on scattered bins. */
static inline uint64_t scramble(uint64_t x) {
    for (int r = 0; r < HIST_ROUNDS; r++) {
        x = (x * 0x2545f4914f6cdd1dULL) & HIST_MASK;
        x ^= x >> 3;
    }
    return x;
}

static int hist_work(ob_ctx *ctx) {
    hist_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    uint64_t *bins = s->bins;
    for (int64_t c = lo; c < hi; c += 65536) {
        int64_t end = c + 65536 < hi ? c + 65536 : hi;
        for (int64_t i = c; i < end; i++)
            __atomic_fetch_add(&bins[scramble((uint64_t)i & HIST_MASK)], 1, __ATOMIC_RELAXED);
        ob_task_done(ctx, 1);
    }
    return 0;
}

int ob_kernel_histogram(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                        size_t errlen) {
    if (spec->size < 1) {
        snprintf(err, errlen, "histogram size must be >= 1 key, got %lld", (long long)spec->size);
        return OB_EINVAL;
    }
    hist_state s = {.n = spec->size};
    s.bins = calloc(HIST_BINS, sizeof *s.bins);
    if (!s.bins) {
        snprintf(err, errlen, "out of memory");
        return OB_ENOMEM;
    }
    ob_kernel_ops ops = {.setup = NULL, .work = hist_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* Residue r of the key index occurs n/B times, once more if r < n mod B. */
        uint64_t total = 0, full = (uint64_t)s.n / HIST_BINS, rest = (uint64_t)s.n % HIST_BINS;
        int64_t bad = -1;
        for (uint64_t r = 0; r < HIST_BINS; r++) {
            uint64_t b = scramble(r);
            if (s.bins[b] != full + (r < rest) && bad < 0)
                bad = (int64_t)b;
            total += s.bins[b];
        }
        *check_value = (double)total;
        if (bad >= 0 || total != (uint64_t)s.n) {
            snprintf(err, errlen,
                     "histogram check failed: %llu keys counted (expected %lld)%s",
                     (unsigned long long)total, (long long)s.n,
                     bad >= 0 ? ", and at least one bin holds a wrong count" : "");
            rc = OB_ECHECK;
        }
    }
    free(s.bins);
    return rc;
}
