/* Irregular graph traversal: level-synchronous breadth-first search from vertex 0 of a
 * connected random graph with `size` vertices (a random spanning tree plus BFS_EXTRA random
 * edges per vertex, both directions stored, average degree about 10). Each level's frontier
 * is claimed in dynamic chunks; vertices are claimed for the next level by compare-and-swap
 * on their level and appended through a shared atomic cursor; two barriers per level. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define BFS_EXTRA 4
#define BFS_CHUNK 64
#define BFS_LOCAL 256
#define BFS_MAX ((int64_t)1 << 28)

typedef struct {
    int64_t n;
    int64_t *off;     /* CSR offsets, n + 1 */
    uint32_t *adj;    /* neighbours */
    int32_t *level;   /* -1 until reached */
    uint32_t *front, *next;
    int64_t front_len, next_len, cursor;
    int32_t depth;
} bfs_state;

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void flush(bfs_state *s, const uint32_t *buf, int k) {
    int64_t at = __atomic_fetch_add(&s->next_len, k, __ATOMIC_RELAXED);
    for (int i = 0; i < k; i++)
        s->next[at + i] = buf[i];
}

static int bfs_work(ob_ctx *ctx) {
    bfs_state *s = ctx->arg;
    uint32_t buf[BFS_LOCAL];
    for (int32_t lev = 0;; lev++) {
        int64_t lo, hi;
        int k = 0;
        while (ob_next_chunk(ctx, &s->cursor, s->front_len, BFS_CHUNK, &lo, &hi)) {
            for (int64_t f = lo; f < hi; f++) {
                uint32_t u = s->front[f];
                for (int64_t e = s->off[u]; e < s->off[u + 1]; e++) {
                    uint32_t v = s->adj[e];
                    int32_t unseen = -1;
                    if (__atomic_load_n(&s->level[v], __ATOMIC_RELAXED) == -1 &&
                        __atomic_compare_exchange_n(&s->level[v], &unseen, lev + 1, 0,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                        buf[k++] = v;
                        if (k == BFS_LOCAL) {
                            flush(s, buf, k);
                            k = 0;
                        }
                    }
                }
            }
            ob_task_done(ctx, 1);
        }
        flush(s, buf, k);
        ob_barrier(ctx);
        if (ctx->tid == 0) {
            uint32_t *t = s->front; s->front = s->next; s->next = t;
            s->front_len = s->next_len;
            s->next_len = 0;
            s->cursor = 0;
            s->depth = lev;
        }
        ob_barrier(ctx);
        if (s->front_len == 0)
            break;
    }
    return 0;
}

int ob_kernel_bfs(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                  size_t errlen) {
    if (spec->size < 2 || spec->size > BFS_MAX) {
        snprintf(err, errlen, "bfs size must be 2..%lld vertices, got %lld",
                 (long long)BFS_MAX, (long long)spec->size);
        return OB_EINVAL;
    }
    int64_t n = spec->size, m = (n - 1) + n * BFS_EXTRA;  /* undirected edges */
    bfs_state s = {.n = n};
    uint32_t *eu = malloc((size_t)m * 2 * sizeof *eu);
    s.off = calloc((size_t)n + 1, sizeof *s.off);
    s.adj = malloc((size_t)m * 2 * sizeof *s.adj);
    s.level = malloc((size_t)n * sizeof *s.level);
    s.front = malloc((size_t)n * sizeof *s.front);
    s.next = malloc((size_t)n * sizeof *s.next);
    if (!eu || !s.off || !s.adj || !s.level || !s.front || !s.next) {
        free(eu); free(s.off); free(s.adj); free(s.level); free(s.front); free(s.next);
        snprintf(err, errlen, "bfs: cannot allocate a graph of %lld vertices and %lld edges",
                 (long long)n, (long long)m);
        return OB_ENOMEM;
    }
    /* Edge list: vertex v > 0 hangs off a random earlier vertex (so the graph is connected),
     * then BFS_EXTRA uniformly random edges per vertex. CSR by counting. */
    uint64_t seed = 0x13198a2e03707344ULL;
    int64_t e = 0;
    for (int64_t v = 1; v < n; v++) {
        eu[2 * e] = (uint32_t)v;
        eu[2 * e + 1] = (uint32_t)(splitmix(&seed) % (uint64_t)v);
        e++;
    }
    for (int64_t v = 0; v < n; v++)
        for (int r = 0; r < BFS_EXTRA; r++) {
            eu[2 * e] = (uint32_t)v;
            eu[2 * e + 1] = (uint32_t)(splitmix(&seed) % (uint64_t)n);
            e++;
        }
    for (int64_t i = 0; i < 2 * m; i++)
        s.off[eu[i] + 1]++;
    for (int64_t v = 0; v < n; v++)
        s.off[v + 1] += s.off[v];
    for (int64_t i = 0; i < m; i++) {
        uint32_t a = eu[2 * i], b = eu[2 * i + 1];
        s.adj[s.off[a]++] = b;
        s.adj[s.off[b]++] = a;
    }
    for (int64_t v = n; v > 0; v--)  /* the fill advanced every offset to the next one's */
        s.off[v] = s.off[v - 1];
    s.off[0] = 0;
    free(eu);
    for (int64_t v = 0; v < n; v++)
        s.level[v] = -1;
    s.level[0] = 0;
    s.front[0] = 0;
    s.front_len = 1;

    ob_kernel_ops ops = {.setup = NULL, .work = bfs_work};
    int rc = OB_OK;
    if (ob_run(spec->nthreads, spec->cpus, spec->ncpus, &ops, &s, out, err, errlen) != 0) {
        rc = OB_ERUN;
    } else {
        /* A BFS labelling: root 0, every vertex reached, neighbours at most one level apart,
         * and every other vertex has a neighbour one level closer. Together these make
         * level[v] = 1 + min over neighbours, the distance from the root. */
        int64_t bad = -1;
        for (int64_t v = 0; v < n && bad < 0; v++) {
            int32_t lv = s.level[v];
            int parent = v == 0;
            if (lv < 0 || (v == 0) != (lv == 0))
                bad = v;
            for (int64_t k = s.off[v]; k < s.off[v + 1] && bad < 0; k++) {
                int32_t lw = s.level[s.adj[k]];
                if (lw < lv - 1 || lw > lv + 1)
                    bad = v;
                parent |= lw == lv - 1;
            }
            if (!parent && bad < 0)
                bad = v;
        }
        *check_value = (double)(s.depth);
        if (bad >= 0) {
            snprintf(err, errlen, "bfs check failed: vertex %lld has level %d, inconsistent "
                     "with its neighbours' (unreached or not 1 + their minimum)",
                     (long long)bad, (int)s.level[bad]);
            rc = OB_ECHECK;
        }
    }
    free(s.off); free(s.adj); free(s.level); free(s.front); free(s.next);
    return rc;
}
