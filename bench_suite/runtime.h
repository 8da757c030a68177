/* Instrumented task runtime for the opptune native kernels.
 *
 * A run starts `nthreads` pthreads pinned round-robin over a cpu list, lets each one prepare
 * its data (untimed, on its own cpu so first touch places pages locally), releases them
 * together into the timed region and joins them. Each thread accounts its own busy time,
 * CPU time, time waiting for locks and at barriers, and the tasks it completed: the
 * parameters MPET-style scaling models are fitted from.
 */
#ifndef OPPTUNE_RUNTIME_H
#define OPPTUNE_RUNTIME_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OB_MAX_THREADS 1024
#define OB_ERRLEN 256

typedef struct ob_thread_stats {
    int cpu;
    double busy_s;          /* timed-region wall time minus lock and barrier waits */
    double cpu_s;           /* CLOCK_THREAD_CPUTIME_ID over the timed region */
    double lock_wait_s;     /* time blocked acquiring ob_lock_t */
    double barrier_wait_s;  /* time blocked in ob_barrier() */
    double wall_s;          /* this thread's own timed-region wall time */
    int64_t tasks;          /* work units completed (kernel-defined granularity) */
    int64_t lock_acquires;
    int64_t lock_contended; /* acquisitions that found the lock held */
    /* MPET accounting (seed 000, Table 1): every instant of the run's timed region, from the
     * first thread entering to the last leaving, is charged to exactly one of these, so per
     * thread they sum to the run's wall time. lock_wait_s above is the lock category. */
    double exec_s;    /* task execution: kernel code, including uncontended lock handoffs */
    double idle_s;    /* no work: barrier waits until the last arrival, an empty task pool,
                       * and the head/tail of the region outside this thread's own span */
    double create_s;  /* ob_spawn: making a task descriptor */
    double dist_s;    /* queue operations: push, pop, steal, ob_next_chunk claims */
    double switch_s;  /* entering and leaving a task taken from the pool */
    double join_s;    /* barrier release after the last arrival; waiting in ob_wait */
    int64_t spawned;  /* tasks this thread created */
    int64_t stolen;   /* tasks this thread took from another thread's deque */
} ob_thread_stats;

/* Accounting categories; OB_CAT_EXEC is where a thread's time goes by default. */
enum { OB_CAT_EXEC = 0, OB_CAT_LOCK, OB_CAT_IDLE, OB_CAT_CREATE, OB_CAT_DIST, OB_CAT_SWITCH,
       OB_CAT_JOIN, OB_NCAT };

typedef struct ob_pool ob_pool;

/* What a kernel function sees: its index, the team size and its own counters. */
typedef struct ob_ctx {
    ob_pool *pool;
    int tid;
    int nthreads;
    int cpu;
    ob_thread_stats *st;
    void *arg;
    /* Accounting state, owned by the runtime: the category now charged and since when. */
    int acct_cat;
    double acct_mark;
    double acct[OB_NCAT];
} ob_ctx;

/* Returns 0 on success; non-zero aborts the run with ob_fail()'s message. */
typedef int (*ob_fn)(ob_ctx *ctx);

typedef struct ob_kernel_ops {
    ob_fn setup;  /* untimed, per thread, pinned; may be NULL */
    ob_fn work;   /* timed, per thread */
} ob_kernel_ops;

typedef struct ob_result {
    double wall_s;  /* first thread entering to last thread leaving the timed region */
    ob_thread_stats *stats;  /* nthreads entries, owned by the caller */
} ob_result;

/* Checks the cpu list against this process's affinity mask. */
int ob_check_cpus(const int *cpus, int ncpus, char *err, size_t errlen);

/* Runs one kernel. stats must hold nthreads entries. Returns 0, or -1 with err filled in. */
int ob_run(int nthreads, const int *cpus, int ncpus, const ob_kernel_ops *ops, void *arg,
           ob_result *out, char *err, size_t errlen);

/* Records a failure message from inside a kernel (first one wins); returns -1. */
int ob_fail(ob_ctx *ctx, const char *fmt, ...);

double ob_now(void);         /* CLOCK_MONOTONIC seconds */
double ob_thread_cpu(void);  /* CLOCK_THREAD_CPUTIME_ID seconds */

/* Static block split of [0, n) for this thread: contiguous, sizes differ by at most one. */
void ob_split(const ob_ctx *ctx, int64_t n, int64_t *lo, int64_t *hi);

/* Dynamic scheduling: claims the next chunk of [0, n) from a shared counter. */
int ob_next_chunk(ob_ctx *ctx, int64_t *counter, int64_t n, int64_t chunk, int64_t *lo,
                  int64_t *hi);

static inline void ob_task_done(ob_ctx *ctx, int64_t k) { ctx->st->tasks += k; }

/* Barrier across the whole team, waiting time accounted. */
void ob_barrier(ob_ctx *ctx);

/* A mutex whose acquisition waits are charged to the acquiring thread. */
typedef struct ob_lock {
    pthread_mutex_t m;
} ob_lock_t;

int ob_lock_init(ob_lock_t *l);
void ob_lock_destroy(ob_lock_t *l);
void ob_lock(ob_ctx *ctx, ob_lock_t *l);
void ob_unlock(ob_ctx *ctx, ob_lock_t *l);

/* Charges the time since the last switch to the current category and makes `cat` current;
 * returns the category that was current, so callers can restore it (operations nest). */
int ob_acct(ob_ctx *ctx, int cat);

/* Task pool for recursive spawning. Each thread owns a deque: it pushes and pops its own
 * tasks at the back (depth first) and steals from the front of others' (oldest, largest).
 * A task group counts the tasks spawned into it that have not finished yet. */
typedef void (*ob_task_fn)(ob_ctx *ctx, void *arg);

typedef struct ob_taskgroup {
    int64_t pending;
} ob_taskgroup;

/* Queues fn(ctx', arg) in group g; some thread runs it. arg must outlive the task (keep it in
 * the spawner's frame and ob_wait before returning). Returns 0, or -1 out of memory (the run
 * is then failed and the caller should run fn itself). */
int ob_spawn(ob_ctx *ctx, ob_taskgroup *g, ob_task_fn fn, void *arg);

/* Waits until every task of g has finished, running queued tasks meanwhile. */
void ob_wait(ob_ctx *ctx, ob_taskgroup *g);

/* The usual shape of a task-parallel run: thread 0 calls root(ctx, arg) and waits for all it
 * spawned; the other threads serve the pool until thread 0 is done. Call from a work fn. */
void ob_tasks_main(ob_ctx *ctx, ob_task_fn root, void *arg);

/* One kernel's entry point: validates size, allocates, runs, checks, frees.
 * Fills out (stats sized by the caller) and *check_value; returns one of OB_*. */
enum { OB_OK = 0, OB_EINVAL = 1, OB_ENOMEM = 2, OB_ERUN = 3, OB_ECHECK = 4 };

typedef struct ob_spec {
    int nthreads;
    const int *cpus;
    int ncpus;
    int64_t size;
} ob_spec;

typedef int (*ob_kernel_main)(const ob_spec *spec, ob_result *out, double *check_value,
                              char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
