/* Lock-contended producer/consumer: every thread produces its static share of `size` items
 * (private hashing work per item), pushes them in batches onto one bounded FIFO ring under
 * one ob_lock, and pops batches of whatever is oldest to consume (more private work), so
 * items cross between threads. Producers keep QUEUE_LAG batches ahead of their pops; at the
 * end every thread drains the ring until all items are consumed. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define QUEUE_BATCH 4
#define QUEUE_LAG 4
#define PRODUCE_ROUNDS 48
#define CONSUME_ROUNDS 48

typedef struct {
    uint64_t id, payload;
} item;

typedef struct {
    ob_lock_t lock;
    int64_t n;
    item *ring;
    int64_t cap, head, count;  /* under lock */
    int64_t consumed;          /* atomic */
    /* What each thread consumed: count, sum, sum of squares and xor of the ids. */
    struct { uint64_t count, sum, sumsq, xr, sink; char pad[24]; } *got;
} queue_state;

static inline uint64_t mix(uint64_t x, int rounds) {
    for (int r = 0; r < rounds; r++) {
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ULL;
    }
    return x;
}

/* Consuming re-derives the payload from the id, so a torn or duplicated item is caught. A bad
 * item is reported but still counted: the others are waiting for the count to reach n. */
static void consume(ob_ctx *ctx, queue_state *s, const item *it, int k) {
    for (int i = 0; i < k; i++) {
        uint64_t id = it[i].id;
        if (mix(id, PRODUCE_ROUNDS) != it[i].payload)
            ob_fail(ctx, "shared_queue check failed: item %llu has a wrong payload",
                    (unsigned long long)id);
        s->got[ctx->tid].sink ^= mix(it[i].payload, CONSUME_ROUNDS);
        s->got[ctx->tid].count++;
        s->got[ctx->tid].sum += id;
        s->got[ctx->tid].sumsq += id * id;
        s->got[ctx->tid].xr ^= id;
    }
    __atomic_fetch_add(&s->consumed, k, __ATOMIC_RELAXED);
    ob_task_done(ctx, k);
}

static int pop_batch(ob_ctx *ctx, queue_state *s, item *out) {
    ob_lock(ctx, &s->lock);
    int k = 0;
    while (k < QUEUE_BATCH && s->count > 0) {
        out[k++] = s->ring[s->head];
        s->head = (s->head + 1) % s->cap;
        s->count--;
    }
    ob_unlock(ctx, &s->lock);
    return k;
}

static int queue_work(ob_ctx *ctx) {
    queue_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    item pending[QUEUE_BATCH], popped[QUEUE_BATCH];
    int npend = 0;
    int64_t next = lo, rounds = 0;
    while (next < hi || npend > 0) {
        while (npend < QUEUE_BATCH && next < hi) {
            pending[npend].id = (uint64_t)next;
            pending[npend].payload = mix((uint64_t)next, PRODUCE_ROUNDS);
            npend++;
            next++;
            ob_task_done(ctx, 1);
        }
        ob_lock(ctx, &s->lock);
        int pushed = 0;
        while (pushed < npend && s->count < s->cap) {
            s->ring[(s->head + s->count) % s->cap] = pending[pushed++];
            s->count++;
        }
        ob_unlock(ctx, &s->lock);
        /* Items that did not fit stay pending for the next round. */
        for (int i = pushed; i < npend; i++)
            pending[i - pushed] = pending[i];
        npend -= pushed;
        if (++rounds > QUEUE_LAG) {
            int k = pop_batch(ctx, s, popped);
            consume(ctx, s, popped, k);
        }
    }
    while (__atomic_load_n(&s->consumed, __ATOMIC_RELAXED) < s->n) {
        int k = pop_batch(ctx, s, popped);
        if (k == 0) {
            sched_yield();  /* the rest is pending in other threads */
            continue;
        }
        consume(ctx, s, popped, k);
    }
    return 0;
}

int ob_kernel_shared_queue(const ob_spec *spec, ob_result *out, double *check_value,
                           char *err, size_t errlen) {
    if (spec->size < 1) {
        snprintf(err, errlen, "shared_queue size must be >= 1 item, got %lld",
                 (long long)spec->size);
        return OB_EINVAL;
    }
    queue_state *s = calloc(1, sizeof *s);
    if (s) {
        s->n = spec->size;
        s->cap = (int64_t)spec->nthreads * QUEUE_BATCH * (QUEUE_LAG + 2);
        s->ring = calloc((size_t)s->cap, sizeof *s->ring);
        s->got = calloc((size_t)spec->nthreads, sizeof *s->got);
    }
    if (!s || !s->ring || !s->got) {
        if (s) { free(s->ring); free(s->got); }
        free(s);
        snprintf(err, errlen, "out of memory");
        return OB_ENOMEM;
    }
    ob_lock_init(&s->lock);
    ob_kernel_ops ops = {.setup = NULL, .work = queue_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* Each id in [0, n) consumed exactly once: count, sum, sum of squares (mod 2^64)
         * and xor all match their closed forms. */
        uint64_t count = 0, sum = 0, sumsq = 0, xr = 0;
        for (int t = 0; t < spec->nthreads; t++) {
            count += s->got[t].count;
            sum += s->got[t].sum;
            sumsq += s->got[t].sumsq;
            xr ^= s->got[t].xr;
        }
        uint64_t n = (uint64_t)s->n;
        uint64_t want_sum = ob_prod_div2(n, n - 1);
        uint64_t want_sumsq = ob_prod_div6(n - 1, n, 2 * n - 1);
        uint64_t last = (uint64_t)s->n - 1;  /* xor of 0..m by m mod 4 */
        uint64_t want_xr = (last % 4 == 0) ? last : (last % 4 == 1) ? 1 : (last % 4 == 2) ? last + 1 : 0;
        *check_value = (double)count;
        if (count != (uint64_t)s->n || sum != want_sum || sumsq != want_sumsq || xr != want_xr) {
            snprintf(err, errlen,
                     "shared_queue check failed: %llu items consumed (expected %lld); id sum, "
                     "sum of squares, xor %s", (unsigned long long)count, (long long)s->n,
                     sum == want_sum && sumsq == want_sumsq && xr == want_xr
                         ? "match" : "do not match: items lost or consumed twice");
            rc = OB_ECHECK;
        }
    }
    ob_lock_destroy(&s->lock);
    free(s->ring);
    free(s->got);
    free(s);
    return rc;
}
