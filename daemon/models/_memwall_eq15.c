/* Eq. 15 of seed 003 (with eq. 10 and 16) and its gradient, compiled: the inner loop of the
 * variable-delay fit (memwall.py). One call replaces ~40 numpy calls on arrays of a few dozen
 * points, where the per-call overhead, not the arithmetic, was a quarter of a fit's time.
 *
 * The numpy code in memwall.py is the reference: every expression here is written in the same
 * order of operations, and the build disables floating-point contraction (no FMA), so both
 * give the same doubles wherever numpy's log is the C library's (x86 without AVX-512, aarch64;
 * numpy's AVX-512 log may differ by an ulp). tests/test_models_analytic.py checks it.
 *
 * All arrays are C-contiguous float64 buffers: theta (K, 4) = (f, k, m1, m2) per row; p, invp
 * (= 1/p), invp1 (= 1/p - 1), phi (n,); outputs (K, n) and (K, n, 4), allocated by the caller.
 * A buffer of the wrong type or size (or None where an array is needed) raises, naming it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* np.maximum / np.minimum: NaN if either argument is NaN */
static inline double np_max(double a, double b) { return (a >= b || isnan(a)) ? a : b; }
static inline double np_min(double a, double b) { return (a <= b || isnan(a)) ? a : b; }

/* A C-contiguous float64 buffer of ``n`` values (n < 0: any multiple of -n). */
static int get(PyObject *o, Py_buffer *b, int writable, Py_ssize_t n, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (!PyObject_CheckBuffer(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous float64 array, got %s",
                     name, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(o, b, flags) < 0)
        return -1;
    if (b->itemsize != 8 || b->format == NULL || strcmp(b->format, "d") != 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous float64 array", name);
        PyBuffer_Release(b);
        return -1;
    }
    Py_ssize_t len = b->len / 8;
    if (n >= 0 ? len != n : len % -n != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd values do not fit the shape", name, len);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

enum { THETA, P, INVP, INVP1, PHI, OUT, GRAD, NBUF };
#define NEED(i) (1u << (i))

static void release(Py_buffer *b)
{
    for (int i = 0; i < NBUF; i++)
        if (b[i].obj != NULL)
            PyBuffer_Release(&b[i]);
}

/* The buffers a call needs (bit mask ``need``): theta (K, 4), the n-point axes (n from p, or
 * from invp where p is not needed), out (K, n) and grad (K, n, 4). Returns K, or -1 with an
 * exception set (every buffer released). */
static Py_ssize_t get_all(PyObject **o, Py_buffer *b, unsigned need)
{
    static const char *names[NBUF] = {"theta", "p", "invp", "invp1", "phi", "out", "grad"};
    const int first = need & NEED(P) ? P : INVP;
    memset(b, 0, NBUF * sizeof *b);
    if (get(o[THETA], &b[THETA], 0, -4, names[THETA]) < 0
        || get(o[first], &b[first], 0, -1, names[first]) < 0)
        goto fail;
    Py_ssize_t kk = b[THETA].len / 32, n = b[first].len / 8;
    for (int i = P; i < NBUF; i++) {
        if (i == first || !(need & NEED(i)))
            continue;
        Py_ssize_t want = i == OUT ? kk * n : i == GRAD ? kk * n * 4 : n;
        if (get(o[i], &b[i], i >= OUT, want, names[i]) < 0)
            goto fail;
    }
    return kk;
fail:
    release(b);
    return -1;
}

/* log_rel_time(theta, invp, invp1, phi, out, grad, blend) -> None
 * out[j, i] = log g: the log of eq. 15's time ratio T_p / T1 of parameter row j at point i;
 * grad[j, i] = d log g / d(f, k, m1, m2) in the active branch of the max() and of eq. 16's
 * min(), blended linearly within ``blend`` (relative) of the max()'s switch (blend 0: the
 * active branch alone). Either of out and grad may be None (not both): what is not asked for
 * is not computed. memwall.MemWallModeler.log_rel_time_lazy. */
static PyObject *log_rel_time(PyObject *self, PyObject *args)
{
    PyObject *o[NBUF] = {NULL};
    Py_buffer b[NBUF];
    double blend;
    if (!PyArg_ParseTuple(args, "OOOOOOd", &o[THETA], &o[INVP], &o[INVP1], &o[PHI], &o[OUT],
                          &o[GRAD], &blend))
        return NULL;
    if (o[OUT] == Py_None && o[GRAD] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "out and grad: at least one must be an array");
        return NULL;
    }
    unsigned need = NEED(THETA) | NEED(INVP) | NEED(INVP1) | NEED(PHI);
    need |= (o[OUT] != Py_None ? NEED(OUT) : 0) | (o[GRAD] != Py_None ? NEED(GRAD) : 0);
    Py_ssize_t kk = get_all(o, b, need);
    if (kk < 0)
        return NULL;
    const Py_ssize_t n = b[INVP].len / 8;
    const double *th = b[THETA].buf, *invp = b[INVP].buf, *invp1 = b[INVP1].buf,
                 *phi = b[PHI].buf;
    double *out = b[OUT].obj != NULL ? b[OUT].buf : NULL;
    double *grad = b[GRAD].obj != NULL ? b[GRAD].buf : NULL;
    for (Py_ssize_t j = 0; j < kk; j++) {
        const double f = th[4 * j], k = th[4 * j + 1], m1 = th[4 * j + 2], m2 = th[4 * j + 3];
        const double s1 = m1 + m2, mu1 = np_min(s1, 1.0);
        for (Py_ssize_t i = 0; i < n; i++) {
            const double kphi = k * phi[i];               /* rho - 1 (eq. 10) */
            const double sp = m1 + m2 * invp[i];          /* eq. 16 before its min() */
            const double mup = np_min(sp, 1.0);
            const double num = 1.0 + kphi * mu1;
            const double aa = 1.0 + kphi * mup;
            const double bb = (1.0 - f) + f * invp[i];
            const double ab = aa * bb;
            const double c = (1.0 + kphi) * mup;
            if (out != NULL)
                out[j * n + i] = log(np_max(c, ab)) - log(num);
            if (grad == NULL)
                continue;
            const double w = blend > 0
                ? np_min(np_max(0.5 + (c - ab) / (2.0 * blend * (c + ab)), 0.0), 1.0)
                : (c > ab ? 1.0 : 0.0);
            const double w1 = 1.0 - w;
            double *g = grad + 4 * (j * n + i);
            g[0] = w1 * invp1[i] / bb;
            g[1] = (w * phi[i] / (1.0 + kphi) + w1 * phi[i] * mup / aa) - phi[i] * mu1 / num;
            const double dmp = sp < 1.0 ? w / (mup > 0 ? mup : 1.0) + w1 * kphi / aa : 0.0;
            const double dm1 = kphi * (s1 < 1.0 ? 1.0 : 0.0) / num;
            g[2] = dmp - dm1;
            g[3] = dmp * invp[i] - dm1;
        }
    }
    release(b);
    Py_RETURN_NONE;
}

/* rel_time(theta, p, phi, out) -> None
 * out[j, i] = T_p / T1 of eq. 15 (memwall.MemWallModeler.rel_time, same operations: f / p,
 * not f * invp, which would round differently). */
static PyObject *rel_time(PyObject *self, PyObject *args)
{
    PyObject *o[NBUF] = {NULL};
    Py_buffer b[NBUF];
    if (!PyArg_ParseTuple(args, "OOOO", &o[THETA], &o[P], &o[PHI], &o[OUT]))
        return NULL;
    Py_ssize_t kk = get_all(o, b, NEED(THETA) | NEED(P) | NEED(PHI) | NEED(OUT));
    if (kk < 0)
        return NULL;
    const Py_ssize_t n = b[P].len / 8;
    const double *th = b[THETA].buf, *p = b[P].buf, *phi = b[PHI].buf;
    double *out = b[OUT].buf;
    for (Py_ssize_t j = 0; j < kk; j++) {
        const double f = th[4 * j], k = th[4 * j + 1], m1 = th[4 * j + 2], m2 = th[4 * j + 3];
        const double mu1 = np_min(m1 + m2, 1.0);
        for (Py_ssize_t i = 0; i < n; i++) {
            const double kphi = k * phi[i];
            const double mup = np_min(m1 + m2 / p[i], 1.0);
            const double num = 1.0 + kphi * mu1;
            const double den = np_max((1.0 + kphi * mup) * ((1.0 - f) + f / p[i]),
                                      (1.0 + kphi) * mup);
            out[j * n + i] = den / num;
        }
    }
    release(b);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"log_rel_time", log_rel_time, METH_VARARGS,
     "log_rel_time(theta, invp, invp1, phi, out, grad, blend): log of eq. 15's T_p / T1 "
     "into out (K, n) and its gradient into grad (K, n, 4); either may be None."},
    {"rel_time", rel_time, METH_VARARGS,
     "rel_time(theta, p, phi, out): eq. 15's T_p / T1 into out (K, n)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_memwall_eq15",
    "Eq. 15 of seed 003 and its gradient, compiled (the variable-delay fit's inner loop).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__memwall_eq15(void) { return PyModule_Create(&module); }
