/* Parallel merge sort: each half above the cut-off is sorted by a spawned task (left) and in
 * place (right), then the two are merged serially by the parent. The merges near the root
 * run on one thread while the others idle, so imbalance grows with the thread count, and
 * every level streams the whole array through memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define CUTOFF 8192   /* elements: below, a serial sort (~0.5 ms) per task */
#define INSERTION 32
#define MAX_N (INT64_C(1) << 31)

typedef struct {
    uint64_t *a, *tmp;
    int64_t n;
    uint64_t sum_in, hash_in;  /* of the input, to check the output is a permutation */
} sort_state;

typedef struct {
    sort_state *s;
    int64_t lo, hi;
} sort_arg;

static inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Merges a[lo, mid) and a[mid, hi) through tmp back into a. */
static void merge(uint64_t *a, uint64_t *tmp, int64_t lo, int64_t mid, int64_t hi) {
    int64_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi)
        tmp[k++] = a[j] < a[i] ? a[j++] : a[i++];
    while (i < mid)
        tmp[k++] = a[i++];
    while (j < hi)
        tmp[k++] = a[j++];
    memcpy(a + lo, tmp + lo, sizeof(uint64_t) * (size_t)(hi - lo));
}

static void sort_serial(uint64_t *a, uint64_t *tmp, int64_t lo, int64_t hi) {
    if (hi - lo <= INSERTION) {
        for (int64_t i = lo + 1; i < hi; i++) {
            uint64_t v = a[i];
            int64_t j = i;
            for (; j > lo && a[j - 1] > v; j--)
                a[j] = a[j - 1];
            a[j] = v;
        }
        return;
    }
    int64_t mid = lo + (hi - lo) / 2;
    sort_serial(a, tmp, lo, mid);
    sort_serial(a, tmp, mid, hi);
    merge(a, tmp, lo, mid, hi);
}

static void sort_task(ob_ctx *ctx, void *vp) {
    sort_arg *r = vp;
    sort_state *s = r->s;
    if (r->hi - r->lo <= CUTOFF) {
        sort_serial(s->a, s->tmp, r->lo, r->hi);
        return;
    }
    int64_t mid = r->lo + (r->hi - r->lo) / 2;
    sort_arg left = {s, r->lo, mid}, right = {s, mid, r->hi};
    ob_taskgroup g = {0};
    if (ob_spawn(ctx, &g, sort_task, &left) != 0)
        sort_task(ctx, &left);
    sort_task(ctx, &right);
    ob_wait(ctx, &g);
    merge(s->a, s->tmp, r->lo, mid, r->hi);
}

/* Untimed: each thread fills (first-touches) its static share of both arrays. */
static int sort_setup(ob_ctx *ctx) {
    sort_state *s = ctx->arg;
    int64_t lo, hi;
    ob_split(ctx, s->n, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        s->a[i] = mix64((uint64_t)i);
        s->tmp[i] = 0;
    }
    return 0;
}

static int sort_work(ob_ctx *ctx) {
    sort_state *s = ctx->arg;
    sort_arg root = {s, 0, s->n};
    ob_tasks_main(ctx, sort_task, &root);
    return 0;
}

int ob_kernel_merge_sort(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                         size_t errlen) {
    if (spec->size < 1 || spec->size > MAX_N) {
        snprintf(err, errlen, "merge_sort size must be in 1..%lld elements, got %lld",
                 (long long)MAX_N, (long long)spec->size);
        return OB_EINVAL;
    }
    sort_state s = {.n = spec->size};
    s.a = malloc(sizeof(uint64_t) * (size_t)s.n);
    s.tmp = malloc(sizeof(uint64_t) * (size_t)s.n);
    if (!s.a || !s.tmp) {
        free(s.a);
        free(s.tmp);
        snprintf(err, errlen, "out of memory for 2 x %lld elements", (long long)s.n);
        return OB_ENOMEM;
    }
    for (int64_t i = 0; i < s.n; i++) {  /* the input's sum and multiset hash, untimed */
        uint64_t v = mix64((uint64_t)i);
        s.sum_in += v;
        s.hash_in += mix64(v ^ 0x5bd1e995ULL);
    }
    ob_kernel_ops ops = {.setup = sort_setup, .work = sort_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        uint64_t sum = 0, hash = 0;
        int64_t unsorted = 0;
        for (int64_t i = 0; i < s.n; i++) {
            sum += s.a[i];
            hash += mix64(s.a[i] ^ 0x5bd1e995ULL);
            if (i > 0 && s.a[i - 1] > s.a[i])
                unsorted++;
        }
        /* The smallest element: a value tests can compute independently. */
        *check_value = (double)s.a[0];
        if (unsorted || sum != s.sum_in || hash != s.hash_in) {
            snprintf(err, errlen,
                     "merge_sort check failed: %lld out-of-order pairs, output %s a permutation "
                     "of the input", (long long)unsorted,
                     sum == s.sum_in && hash == s.hash_in ? "is" : "is not");
            rc = OB_ECHECK;
        }
    }
    free(s.a);
    free(s.tmp);
    return rc;
}
