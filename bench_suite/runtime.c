/* Instrumented task runtime: see runtime.h. */
#define _GNU_SOURCE
#include "runtime.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ob_pool {
    int nthreads;
    const ob_kernel_ops *ops;
    void *arg;
    ob_thread_stats *stats;
    ob_ctx *ctxs;
    double *t_start;
    double *t_end;

    /* Start gate: the caller opens it once every thread has pinned itself and set up, so the
     * timed region starts together; it opens with `abort` set if anything failed before. */
    pthread_mutex_t gate_m;
    pthread_cond_t gate_cv;
    int ready;
    int go;
    int abort;

    pthread_barrier_t team;

    pthread_mutex_t err_m;
    int failed;
    char err[OB_ERRLEN];
};

double ob_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ob_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pool_fail(ob_pool *p, const char *msg) {
    pthread_mutex_lock(&p->err_m);
    if (!__atomic_load_n(&p->failed, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&p->failed, 1, __ATOMIC_RELEASE);
        snprintf(p->err, sizeof p->err, "%s", msg);
    }
    pthread_mutex_unlock(&p->err_m);
}

int ob_fail(ob_ctx *ctx, const char *fmt, ...) {
    char msg[OB_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pool_fail(ctx->pool, msg);
    return -1;
}

int ob_check_cpus(const int *cpus, int ncpus, char *err, size_t errlen) {
    cpu_set_t allowed;
    if (ncpus < 1) {
        snprintf(err, errlen, "cpu list is empty");
        return -1;
    }
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        snprintf(err, errlen, "sched_getaffinity failed: %s", strerror(errno));
        return -1;
    }
    for (int i = 0; i < ncpus; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE || !CPU_ISSET(cpus[i], &allowed)) {
            char avail[128] = "";
            size_t used = 0;
            for (int c = 0; c < CPU_SETSIZE && used + 8 < sizeof avail; c++)
                if (CPU_ISSET(c, &allowed))
                    used += (size_t)snprintf(avail + used, sizeof avail - used, "%s%d",
                                             used ? "," : "", c);
            snprintf(err, errlen, "cpu %d is not available to this process (allowed: %s)",
                     cpus[i], avail);
            return -1;
        }
    }
    return 0;
}

void ob_split(const ob_ctx *ctx, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t t = ctx->tid, k = ctx->nthreads;
    int64_t base = n / k, rem = n % k;
    *lo = t * base + (t < rem ? t : rem);
    *hi = *lo + base + (t < rem ? 1 : 0);
}

int ob_next_chunk(ob_ctx *ctx, int64_t *counter, int64_t n, int64_t chunk, int64_t *lo,
                  int64_t *hi) {
    (void)ctx;
    int64_t start = __atomic_fetch_add(counter, chunk, __ATOMIC_RELAXED);
    if (start >= n)
        return 0;
    *lo = start;
    *hi = start + chunk < n ? start + chunk : n;
    return 1;
}

void ob_barrier(ob_ctx *ctx) {
    if (ctx->nthreads == 1)
        return;
    double t0 = ob_now();
    pthread_barrier_wait(&ctx->pool->team);
    ctx->st->barrier_wait_s += ob_now() - t0;
}

int ob_lock_init(ob_lock_t *l) {
    /* Adaptive: spins briefly before sleeping, as runtimes tuned for short critical
     * sections do; a plain mutex turns every contended handoff into a futex wake-up. */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    int rc = pthread_mutex_init(&l->m, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

void ob_lock_destroy(ob_lock_t *l) { pthread_mutex_destroy(&l->m); }

void ob_lock(ob_ctx *ctx, ob_lock_t *l) {
    ctx->st->lock_acquires++;
    /* The uncontended path reads no clock, so instrumentation does not dilute the
     * critical section it measures. */
    if (pthread_mutex_trylock(&l->m) == 0)
        return;
    double t0 = ob_now();
    pthread_mutex_lock(&l->m);
    ctx->st->lock_wait_s += ob_now() - t0;
    ctx->st->lock_contended++;
}

void ob_unlock(ob_ctx *ctx, ob_lock_t *l) {
    (void)ctx;
    pthread_mutex_unlock(&l->m);
}

static void *worker(void *vp) {
    ob_ctx *ctx = vp;
    ob_pool *p = ctx->pool;
    ob_thread_stats *st = ctx->st;

    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(ctx->cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0)
        ob_fail(ctx, "pinning thread %d to cpu %d failed: %s", ctx->tid, ctx->cpu,
                strerror(rc));
    else if (p->ops->setup)
        p->ops->setup(ctx);

    pthread_mutex_lock(&p->gate_m);
    p->ready++;
    pthread_cond_broadcast(&p->gate_cv);
    while (!p->go)
        pthread_cond_wait(&p->gate_cv, &p->gate_m);
    int run = !p->abort && !__atomic_load_n(&p->failed, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&p->gate_m);
    if (!run)
        return NULL;

    double c0 = ob_thread_cpu();
    double t0 = ob_now();
    p->ops->work(ctx);
    double t1 = ob_now();
    double c1 = ob_thread_cpu();
    p->t_start[ctx->tid] = t0;
    p->t_end[ctx->tid] = t1;
    st->wall_s = t1 - t0;
    st->cpu_s = c1 - c0;
    st->busy_s = st->wall_s - st->lock_wait_s - st->barrier_wait_s;
    if (st->busy_s < 0)
        st->busy_s = 0;
    return NULL;
}

int ob_run(int nthreads, const int *cpus, int ncpus, const ob_kernel_ops *ops, void *arg,
           ob_result *out, char *err, size_t errlen) {
    if (nthreads < 1 || nthreads > OB_MAX_THREADS) {
        snprintf(err, errlen, "threads must be in 1..%d, got %d", OB_MAX_THREADS, nthreads);
        return -1;
    }
    if (ob_check_cpus(cpus, ncpus, err, errlen) != 0)
        return -1;

    ob_pool p;
    memset(&p, 0, sizeof p);
    p.nthreads = nthreads;
    p.ops = ops;
    p.arg = arg;
    p.stats = out->stats;
    memset(out->stats, 0, sizeof(ob_thread_stats) * (size_t)nthreads);
    p.ctxs = calloc((size_t)nthreads, sizeof(ob_ctx));
    p.t_start = calloc((size_t)nthreads, sizeof(double));
    p.t_end = calloc((size_t)nthreads, sizeof(double));
    pthread_t *tids = calloc((size_t)nthreads, sizeof(pthread_t));
    if (!p.ctxs || !p.t_start || !p.t_end || !tids) {
        free(p.ctxs); free(p.t_start); free(p.t_end); free(tids);
        snprintf(err, errlen, "out of memory starting %d threads", nthreads);
        return -1;
    }
    pthread_mutex_init(&p.gate_m, NULL);
    pthread_cond_init(&p.gate_cv, NULL);
    pthread_mutex_init(&p.err_m, NULL);
    pthread_barrier_init(&p.team, NULL, (unsigned)nthreads);

    int created = 0;
    for (int i = 0; i < nthreads; i++) {
        ob_ctx *c = &p.ctxs[i];
        c->pool = &p;
        c->tid = i;
        c->nthreads = nthreads;
        c->cpu = cpus[i % ncpus];
        c->st = &out->stats[i];
        c->st->cpu = c->cpu;
        c->arg = arg;
        int rc = pthread_create(&tids[i], NULL, worker, c);
        if (rc != 0) {
            char msg[OB_ERRLEN];
            snprintf(msg, sizeof msg, "creating thread %d of %d failed: %s", i + 1, nthreads,
                     strerror(rc));
            pool_fail(&p, msg);
            break;
        }
        created++;
    }

    pthread_mutex_lock(&p.gate_m);
    while (p.ready < created)
        pthread_cond_wait(&p.gate_cv, &p.gate_m);
    /* A partial team would hang at the first ob_barrier(): run nobody. */
    p.abort = created < nthreads || p.failed;
    p.go = 1;
    pthread_cond_broadcast(&p.gate_cv);
    pthread_mutex_unlock(&p.gate_m);

    for (int i = 0; i < created; i++)
        pthread_join(tids[i], NULL);

    int ret = 0;
    if (p.failed || p.abort) {
        snprintf(err, errlen, "%s", p.failed ? p.err : "run aborted");
        ret = -1;
    } else {
        double t0 = p.t_start[0], t1 = p.t_end[0];
        for (int i = 1; i < nthreads; i++) {
            if (p.t_start[i] < t0) t0 = p.t_start[i];
            if (p.t_end[i] > t1) t1 = p.t_end[i];
        }
        out->wall_s = t1 - t0;
    }

    pthread_barrier_destroy(&p.team);
    pthread_mutex_destroy(&p.err_m);
    pthread_cond_destroy(&p.gate_cv);
    pthread_mutex_destroy(&p.gate_m);
    free(p.ctxs); free(p.t_start); free(p.t_end); free(tids);
    return ret;
}
