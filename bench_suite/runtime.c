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

/* A queued task; freed by the thread that runs it. */
typedef struct ob_task {
    ob_task_fn fn;
    void *arg;
    ob_taskgroup *g;
} ob_task;

/* One thread's deque: the owner works at the back, thieves take from the front. Aligned so
 * neighbouring deques' locks do not share a cache line. */
typedef struct ob_deque {
    pthread_mutex_t m;
    ob_task **buf;
    int64_t head, tail, cap;
} __attribute__((aligned(64))) ob_deque;

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
    /* Barrier arrivals so far and when the last thread of the current episode arrived: the
     * wait before it is idle (imbalance), after it the barrier's own join cost. */
    int64_t arrived;
    double last_arrival;

    /* Task pool. `queued` counts tasks in all deques; threads with nothing to run sleep on
     * tq_cv, and `sleepers` tells spawners and finishers whether anyone needs waking. */
    ob_deque *dq;
    int64_t queued;
    int sleepers;
    int done;
    pthread_mutex_t tq_m;
    pthread_cond_t tq_cv;

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
    int prev = ob_acct(ctx, OB_CAT_DIST);
    int64_t start = __atomic_fetch_add(counter, chunk, __ATOMIC_RELAXED);
    ob_acct(ctx, prev);
    if (start >= n)
        return 0;
    *lo = start;
    *hi = start + chunk < n ? start + chunk : n;
    return 1;
}

int ob_acct(ob_ctx *ctx, int cat) {
    double now = ob_now();
    ctx->acct[ctx->acct_cat] += now - ctx->acct_mark;
    ctx->acct_mark = now;
    int prev = ctx->acct_cat;
    ctx->acct_cat = cat;
    return prev;
}

void ob_barrier(ob_ctx *ctx) {
    if (ctx->nthreads == 1)
        return;
    ob_pool *p = ctx->pool;
    int prev = ob_acct(ctx, OB_CAT_IDLE);
    double t0 = ctx->acct_mark;
    int64_t k = __atomic_add_fetch(&p->arrived, 1, __ATOMIC_ACQ_REL);
    /* Read by the others only after the barrier, which orders the write before the read;
     * the next episode's last arrival cannot overwrite it before everyone has read it. */
    if (k % ctx->nthreads == 0)
        p->last_arrival = t0;
    pthread_barrier_wait(&p->team);
    double t1 = ob_now();
    double last = p->last_arrival;
    double idle = (last < t1 ? last : t1) - t0;
    if (idle < 0)
        idle = 0;
    ctx->acct[OB_CAT_IDLE] += idle;
    ctx->acct[OB_CAT_JOIN] += (t1 - t0) - idle;
    ctx->acct_mark = t1;
    ctx->acct_cat = prev;
    ctx->st->barrier_wait_s += t1 - t0;
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
    int prev = ob_acct(ctx, OB_CAT_LOCK);
    pthread_mutex_lock(&l->m);
    ob_acct(ctx, prev);
    ctx->st->lock_contended++;
}

void ob_unlock(ob_ctx *ctx, ob_lock_t *l) {
    (void)ctx;
    pthread_mutex_unlock(&l->m);
}

/* Next task for this thread: the back of its own deque, else the front of another's.
 * The caller charges the time (distribution). */
static ob_task *take(ob_ctx *ctx) {
    ob_pool *p = ctx->pool;
    if (__atomic_load_n(&p->queued, __ATOMIC_SEQ_CST) == 0)
        return NULL;
    ob_task *t = NULL;
    for (int i = 0; i < p->nthreads && !t; i++) {
        ob_deque *d = &p->dq[(ctx->tid + i) % p->nthreads];
        pthread_mutex_lock(&d->m);
        if (d->tail > d->head) {
            t = i == 0 ? d->buf[--d->tail] : d->buf[d->head++];
            if (d->tail == d->head)
                d->head = d->tail = 0;
        }
        pthread_mutex_unlock(&d->m);
        if (t && i > 0)
            ctx->st->stolen++;
    }
    if (t)
        __atomic_sub_fetch(&p->queued, 1, __ATOMIC_SEQ_CST);
    return t;
}

static void wake_all(ob_pool *p) {
    if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&p->tq_m);
        pthread_cond_broadcast(&p->tq_cv);
        pthread_mutex_unlock(&p->tq_m);
    }
}

static void run_task(ob_ctx *ctx, ob_task *t) {
    int prev = ob_acct(ctx, OB_CAT_SWITCH);
    ob_task_fn fn = t->fn;
    void *arg = t->arg;
    ob_taskgroup *g = t->g;
    free(t);
    ob_acct(ctx, OB_CAT_EXEC);
    fn(ctx, arg);
    ob_acct(ctx, OB_CAT_SWITCH);
    ctx->st->tasks++;
    if (__atomic_sub_fetch(&g->pending, 1, __ATOMIC_SEQ_CST) == 0)
        wake_all(ctx->pool);
    ob_acct(ctx, prev);
}

int ob_spawn(ob_ctx *ctx, ob_taskgroup *g, ob_task_fn fn, void *arg) {
    ob_pool *p = ctx->pool;
    int prev = ob_acct(ctx, OB_CAT_CREATE);
    ob_task *t = malloc(sizeof *t);
    if (!t) {
        ob_acct(ctx, prev);
        return ob_fail(ctx, "out of memory spawning a task");
    }
    t->fn = fn;
    t->arg = arg;
    t->g = g;
    ob_acct(ctx, OB_CAT_DIST);
    ob_deque *d = &p->dq[ctx->tid];
    pthread_mutex_lock(&d->m);
    if (d->tail == d->cap) {
        if (d->head > 0) {
            memmove(d->buf, d->buf + d->head, sizeof(ob_task *) * (size_t)(d->tail - d->head));
            d->tail -= d->head;
            d->head = 0;
        } else {
            ob_task **nb = realloc(d->buf, sizeof(ob_task *) * (size_t)(2 * d->cap));
            if (!nb) {
                pthread_mutex_unlock(&d->m);
                free(t);
                ob_acct(ctx, prev);
                return ob_fail(ctx, "out of memory queueing a task");
            }
            d->buf = nb;
            d->cap *= 2;
        }
    }
    /* Counted before it becomes visible, so a fast thief cannot finish it first and see
     * the group drop to zero while the spawner still has this task in flight. */
    __atomic_add_fetch(&g->pending, 1, __ATOMIC_SEQ_CST);
    d->buf[d->tail++] = t;
    pthread_mutex_unlock(&d->m);
    ctx->st->spawned++;
    __atomic_add_fetch(&p->queued, 1, __ATOMIC_SEQ_CST);
    wake_all(p);
    ob_acct(ctx, prev);
    return 0;
}

void ob_wait(ob_ctx *ctx, ob_taskgroup *g) {
    ob_pool *p = ctx->pool;
    int prev = ob_acct(ctx, OB_CAT_JOIN);
    while (__atomic_load_n(&g->pending, __ATOMIC_SEQ_CST) > 0) {
        ob_acct(ctx, OB_CAT_DIST);
        ob_task *t = take(ctx);
        if (t) {
            run_task(ctx, t);
            ob_acct(ctx, OB_CAT_JOIN);
            continue;
        }
        ob_acct(ctx, OB_CAT_JOIN);
        pthread_mutex_lock(&p->tq_m);
        __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&g->pending, __ATOMIC_SEQ_CST) > 0 &&
               __atomic_load_n(&p->queued, __ATOMIC_SEQ_CST) == 0)
            pthread_cond_wait(&p->tq_cv, &p->tq_m);
        __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&p->tq_m);
    }
    ob_acct(ctx, prev);
}

/* A helper thread's loop: run queued tasks, sleep (idle) while there are none, stop when
 * thread 0 says the root is done. */
static void serve(ob_ctx *ctx) {
    ob_pool *p = ctx->pool;
    int prev = ctx->acct_cat;
    for (;;) {
        ob_acct(ctx, OB_CAT_DIST);
        ob_task *t = take(ctx);
        if (t) {
            run_task(ctx, t);
            continue;
        }
        ob_acct(ctx, OB_CAT_IDLE);
        pthread_mutex_lock(&p->tq_m);
        __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        while (!p->done && __atomic_load_n(&p->queued, __ATOMIC_SEQ_CST) == 0)
            pthread_cond_wait(&p->tq_cv, &p->tq_m);
        __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        int stop = p->done && __atomic_load_n(&p->queued, __ATOMIC_SEQ_CST) == 0;
        pthread_mutex_unlock(&p->tq_m);
        if (stop)
            break;
    }
    ob_acct(ctx, prev);
}

void ob_tasks_main(ob_ctx *ctx, ob_task_fn root, void *arg) {
    ob_pool *p = ctx->pool;
    if (ctx->tid != 0) {
        serve(ctx);
        return;
    }
    root(ctx, arg);
    pthread_mutex_lock(&p->tq_m);
    p->done = 1;
    pthread_cond_broadcast(&p->tq_cv);
    pthread_mutex_unlock(&p->tq_m);
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
    ctx->acct_cat = OB_CAT_EXEC;
    ctx->acct_mark = t0;
    p->ops->work(ctx);
    ob_acct(ctx, OB_CAT_EXEC);
    double t1 = ctx->acct_mark;
    double c1 = ob_thread_cpu();
    p->t_start[ctx->tid] = t0;
    p->t_end[ctx->tid] = t1;
    st->wall_s = t1 - t0;
    st->cpu_s = c1 - c0;
    st->exec_s = ctx->acct[OB_CAT_EXEC];
    st->lock_wait_s = ctx->acct[OB_CAT_LOCK];
    st->idle_s = ctx->acct[OB_CAT_IDLE];  /* ob_run adds the head and tail */
    st->create_s = ctx->acct[OB_CAT_CREATE];
    st->dist_s = ctx->acct[OB_CAT_DIST];
    st->switch_s = ctx->acct[OB_CAT_SWITCH];
    st->join_s = ctx->acct[OB_CAT_JOIN];
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
    p.dq = aligned_alloc(64, sizeof(ob_deque) * (size_t)nthreads);
    int dq_ok = p.dq != NULL;
    for (int i = 0; dq_ok && i < nthreads; i++) {
        p.dq[i].head = p.dq[i].tail = 0;
        p.dq[i].cap = 64;
        p.dq[i].buf = malloc(sizeof(ob_task *) * 64);
        pthread_mutex_init(&p.dq[i].m, NULL);
        if (!p.dq[i].buf)
            dq_ok = 0;
    }
    if (!p.ctxs || !p.t_start || !p.t_end || !tids || !dq_ok) {
        if (p.dq)
            for (int i = 0; i < nthreads; i++)
                free(p.dq[i].buf);
        free(p.dq);
        free(p.ctxs); free(p.t_start); free(p.t_end); free(tids);
        snprintf(err, errlen, "out of memory starting %d threads", nthreads);
        return -1;
    }
    pthread_mutex_init(&p.gate_m, NULL);
    pthread_cond_init(&p.gate_cv, NULL);
    pthread_mutex_init(&p.err_m, NULL);
    pthread_mutex_init(&p.tq_m, NULL);
    pthread_cond_init(&p.tq_cv, NULL);
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
        /* Before a thread enters and after it leaves, its cpu waits for the others. */
        for (int i = 0; i < nthreads; i++)
            out->stats[i].idle_s += (p.t_start[i] - t0) + (t1 - p.t_end[i]);
    }

    for (int i = 0; i < nthreads; i++) {
        /* Tasks left only after a failed run. */
        for (int64_t k = p.dq[i].head; k < p.dq[i].tail; k++)
            free(p.dq[i].buf[k]);
        free(p.dq[i].buf);
        pthread_mutex_destroy(&p.dq[i].m);
    }
    free(p.dq);
    pthread_cond_destroy(&p.tq_cv);
    pthread_mutex_destroy(&p.tq_m);
    pthread_barrier_destroy(&p.team);
    pthread_mutex_destroy(&p.err_m);
    pthread_cond_destroy(&p.gate_cv);
    pthread_mutex_destroy(&p.gate_m);
    free(p.ctxs); free(p.t_start); free(p.t_end); free(tids);
    return ret;
}
