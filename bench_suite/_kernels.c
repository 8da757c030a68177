/* CPython wrapper of the native kernels: opptune.bench_suite._kernels. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernels/kernels.h"
#include "runtime.h"

static PyObject *CheckError;

typedef struct {
    const char *name;
    ob_kernel_main main;
} kernel_entry;

static const kernel_entry KERNELS[] = {
    {"pi_integrate", ob_kernel_pi_integrate},
    {"triad", ob_kernel_triad},
    {"locked_update", ob_kernel_locked_update},
    /* Loop and data-parallel kernels (issue 19). */
    {"pointer_chase", ob_kernel_pointer_chase},
    {"matmul", ob_kernel_matmul},
    {"stencil", ob_kernel_stencil},
    {"histogram", ob_kernel_histogram},
    {"shared_queue", ob_kernel_shared_queue},
    {"triangle", ob_kernel_triangle},
    {"wavefront", ob_kernel_wavefront},
    {"bfs", ob_kernel_bfs},
    /* task-parallel kernels (issue 19, runtime) */
    {"fib_tasks", ob_kernel_fib_tasks},
    {"merge_sort", ob_kernel_merge_sort},
};
#define NKERNELS ((int)(sizeof KERNELS / sizeof KERNELS[0]))

static PyObject *stats_dict(const ob_thread_stats *st) {
    PyObject *d = Py_BuildValue("{s:i,s:d,s:d,s:d,s:d,s:d,s:L,s:L,s:L}", "cpu", st->cpu,
                                "busy_s", st->busy_s, "cpu_s", st->cpu_s, "wall_s", st->wall_s,
                                "lock_wait_s", st->lock_wait_s,
                                "barrier_wait_s", st->barrier_wait_s, "tasks",
                                (long long)st->tasks, "lock_acquires",
                                (long long)st->lock_acquires, "lock_contended",
                                (long long)st->lock_contended);
    /* MPET accounting (runtime.h), added in a second step to keep the format readable. */
    PyObject *m = d ? Py_BuildValue("{s:d,s:d,s:d,s:d,s:d,s:d,s:L,s:L}", "exec_s", st->exec_s,
                                    "idle_s", st->idle_s, "create_s", st->create_s, "dist_s",
                                    st->dist_s, "switch_s", st->switch_s, "join_s",
                                    st->join_s, "spawned", (long long)st->spawned, "stolen",
                                    (long long)st->stolen)
                    : NULL;
    if (!m || PyDict_Update(d, m) < 0) {
        Py_XDECREF(m);
        Py_XDECREF(d);
        return NULL;
    }
    Py_DECREF(m);
    return d;
}

PyDoc_STRVAR(run_doc,
             "run(name, threads, cpus, size) -> dict(time_s, check_value, thread_stats)\n\n"
             "Runs one kernel with the GIL released. ValueError for bad arguments,\n"
             "MemoryError if its data does not fit, RuntimeError if the run or its\n"
             "self-check fails.");

static PyObject *py_run(PyObject *self, PyObject *args) {
    (void)self;
    const char *name;
    int nthreads;
    PyObject *cpu_seq;
    long long size;
    if (!PyArg_ParseTuple(args, "siOL", &name, &nthreads, &cpu_seq, &size))
        return NULL;

    const kernel_entry *k = NULL;
    for (int i = 0; i < NKERNELS; i++)
        if (strcmp(KERNELS[i].name, name) == 0)
            k = &KERNELS[i];
    if (!k)
        return PyErr_Format(PyExc_ValueError, "unknown kernel %R", PyTuple_GET_ITEM(args, 0));
    if (nthreads < 1 || nthreads > OB_MAX_THREADS)
        return PyErr_Format(PyExc_ValueError, "threads must be in 1..%d, got %d",
                            OB_MAX_THREADS, nthreads);

    PyObject *fast = PySequence_Fast(cpu_seq, "cpus must be a sequence of ints");
    if (!fast)
        return NULL;
    Py_ssize_t ncpus = PySequence_Fast_GET_SIZE(fast);
    if (ncpus < 1 || ncpus > 65536) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "cpus must list 1..65536 cpus, got %zd", ncpus);
    }
    int *cpus = PyMem_Malloc(sizeof(int) * (size_t)ncpus);
    ob_thread_stats *stats = PyMem_Malloc(sizeof(ob_thread_stats) * (size_t)nthreads);
    if (!cpus || !stats) {
        PyMem_Free(cpus); PyMem_Free(stats); Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < ncpus; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(cpus); PyMem_Free(stats); Py_DECREF(fast);
            return NULL;
        }
        cpus[i] = (v < INT32_MIN || v > INT32_MAX) ? -1 : (int)v;
    }
    Py_DECREF(fast);

    char err[OB_ERRLEN] = "";
    if (ob_check_cpus(cpus, (int)ncpus, err, sizeof err) != 0) {
        PyMem_Free(cpus); PyMem_Free(stats);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }

    ob_spec spec = {.nthreads = nthreads, .cpus = cpus, .ncpus = (int)ncpus, .size = size};
    ob_result res = {.wall_s = 0.0, .stats = stats};
    double check_value = 0.0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = k->main(&spec, &res, &check_value, err, sizeof err);
    Py_END_ALLOW_THREADS
    PyMem_Free(cpus);

    if (rc != OB_OK) {
        PyMem_Free(stats);
        PyObject *exc = rc == OB_EINVAL   ? PyExc_ValueError
                        : rc == OB_ENOMEM ? PyExc_MemoryError
                        : rc == OB_ECHECK ? CheckError
                                          : PyExc_RuntimeError;
        PyErr_SetString(exc, err[0] ? err : "kernel failed");
        return NULL;
    }

    PyObject *list = PyList_New(nthreads);
    if (!list) {
        PyMem_Free(stats);
        return NULL;
    }
    for (int i = 0; i < nthreads; i++) {
        PyObject *d = stats_dict(&stats[i]);
        if (!d) {
            Py_DECREF(list); PyMem_Free(stats);
            return NULL;
        }
        PyList_SET_ITEM(list, i, d);
    }
    PyMem_Free(stats);
    return Py_BuildValue("{s:d,s:d,s:N}", "time_s", res.wall_s, "check_value", check_value,
                         "thread_stats", list);
}

static PyObject *py_names(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    PyObject *t = PyTuple_New(NKERNELS);
    if (!t)
        return NULL;
    for (int i = 0; i < NKERNELS; i++) {
        PyObject *s = PyUnicode_FromString(KERNELS[i].name);
        if (!s) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static PyMethodDef methods[] = {
    {"run", py_run, METH_VARARGS, run_doc},
    {"names", py_names, METH_NOARGS, "names() -> tuple of the compiled kernel names"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Native pthread kernels with an instrumented runtime (see runtime.h).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    CheckError = PyErr_NewExceptionWithDoc("opptune.bench_suite._kernels.CheckError",
                                           "A kernel's self-check of its result failed.",
                                           PyExc_RuntimeError, NULL);
    if (!CheckError || PyModule_AddObjectRef(m, "CheckError", CheckError) < 0) {
        Py_XDECREF(CheckError);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
