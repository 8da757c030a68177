/* Memory-latency-bound: a chase through one random cyclic permutation of `size` nodes, one
 * cache line each. Every load's address comes from the previous load, so no prefetcher or
 * out-of-order window hides the latency. The cycle is cut into one contiguous stretch per
 * thread (static split of the steps), each thread walking its stretch CHASE_PASSES times. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define CHASE_PASSES 8
/* Indices are stored in 32 bits of a 64-byte node: 2^31 nodes is already 128 GiB. */
#define CHASE_MAX ((int64_t)1 << 31)

typedef struct {
    uint32_t next;
    uint32_t pad[15];
} chase_node;

typedef struct {
    int64_t n;
    chase_node *nodes;
    /* Per thread: where its stretch starts and ends on the cycle, and what it saw. */
    struct {
        uint32_t start, want_end, end;
        uint64_t sum;
        char pad[40];
    } *t;
} chase_state;

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int chase_work(ob_ctx *ctx) {
    chase_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    const chase_node *nodes = s->nodes;
    uint32_t x = s->t[ctx->tid].start;
    uint64_t sum = 0;
    for (int p = 0; p < CHASE_PASSES; p++) {
        x = s->t[ctx->tid].start;
        sum = 0;
        for (int64_t k = lo; k < hi; k++) {
            sum += x;
            x = nodes[x].next;
        }
        ob_task_done(ctx, hi > lo);
    }
    s->t[ctx->tid].end = x;
    s->t[ctx->tid].sum = sum;
    return 0;
}

int ob_kernel_pointer_chase(const ob_spec *spec, ob_result *out, double *check_value,
                            char *err, size_t errlen) {
    if (spec->size < 2 || spec->size > CHASE_MAX) {
        snprintf(err, errlen, "pointer_chase size must be 2..%lld nodes, got %lld",
                 (long long)CHASE_MAX, (long long)spec->size);
        return OB_EINVAL;
    }
    int64_t n = spec->size;
    chase_state s = {.n = n};
    uint32_t *order = malloc((size_t)n * sizeof *order);
    if (posix_memalign((void **)&s.nodes, 4096, (size_t)n * sizeof(chase_node)) != 0)
        s.nodes = NULL;
    s.t = calloc((size_t)spec->nthreads, sizeof *s.t);
    if (!order || !s.nodes || !s.t) {
        free(order); free(s.nodes); free(s.t);
        snprintf(err, errlen, "pointer_chase: cannot allocate %lld nodes of 64 bytes",
                 (long long)n);
        return OB_ENOMEM;
    }
    /* Visiting order: a uniformly random permutation (Fisher-Yates, fixed seed); the cycle
     * links each node to the next one in that order and the last back to the first. */
    uint64_t seed = 0x243f6a8885a308d3ULL;
    for (int64_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix(&seed) % (uint64_t)(i + 1));
        uint32_t tmp = order[i]; order[i] = order[j]; order[j] = tmp;
    }
    for (int64_t i = 0; i < n; i++)
        s.nodes[order[i]].next = order[(i + 1) % n];
    for (int t = 0; t < spec->nthreads; t++) {
        ob_ctx c = {.tid = t, .nthreads = spec->nthreads};
        int64_t lo, hi;
        ob_split(&c, n, &lo, &hi);
        s.t[t].start = order[lo % n];
        s.t[t].want_end = order[hi % n];
        s.t[t].end = s.t[t].start;
    }
    free(order);

    ob_kernel_ops ops = {.setup = NULL, .work = chase_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* Each stretch must end where the next one starts, and together they must visit
         * every node once: the indices seen sum to n(n-1)/2. */
        uint64_t sum = 0, want = (uint64_t)n * (uint64_t)(n - 1) / 2;
        int bad = -1;
        for (int t = 0; t < spec->nthreads; t++) {
            sum += s.t[t].sum;
            if (s.t[t].end != s.t[t].want_end && bad < 0)
                bad = t;
        }
        *check_value = (double)sum;
        if (bad >= 0 || sum != want) {
            snprintf(err, errlen,
                     "pointer_chase check failed: %s; visited index sum %llu (expected %llu)",
                     bad >= 0 ? "a thread's walk did not end where the next one starts"
                              : "walks end where expected",
                     (unsigned long long)sum, (unsigned long long)want);
            rc = OB_ECHECK;
        }
    }
    free(s.nodes);
    free(s.t);
    return rc;
}
