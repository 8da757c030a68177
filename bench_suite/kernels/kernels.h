/* Entry points of the native kernels; _kernels.c maps names to them. */
#ifndef OPPTUNE_KERNELS_H
#define OPPTUNE_KERNELS_H
#include "../runtime.h"

int ob_kernel_pi_integrate(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                           size_t errlen);
int ob_kernel_triad(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                    size_t errlen);
int ob_kernel_locked_update(const ob_spec *spec, ob_result *out, double *check_value,
                            char *err, size_t errlen);

/* Loop and data-parallel kernels (issue 19). */
int ob_kernel_pointer_chase(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                            size_t errlen);
int ob_kernel_matmul(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                     size_t errlen);
int ob_kernel_stencil(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                      size_t errlen);
int ob_kernel_histogram(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                        size_t errlen);
int ob_kernel_shared_queue(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                           size_t errlen);
int ob_kernel_triangle(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                       size_t errlen);
int ob_kernel_wavefront(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                        size_t errlen);
int ob_kernel_bfs(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                  size_t errlen);
/* Task-parallel kernels on the runtime's task pool (issue 19, runtime). */
int ob_kernel_fib_tasks(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                        size_t errlen);
int ob_kernel_merge_sort(const ob_spec *spec, ob_result *out, double *check_value, char *err,
                         size_t errlen);
#endif
