/* Entry points of the native kernels; _kernels.c maps names to them. */
#ifndef OPPTUNE_KERNELS_H
#define OPPTUNE_KERNELS_H
#include "../runtime.h"

/* Closed forms for the kernels' checks, exact mod 2^64 without 128-bit integers (32-bit ARM has
 * none): the divisor is taken out of the factors before they are multiplied. */
static inline uint64_t ob_prod_div2(uint64_t a, uint64_t b) {
    return (a % 2 == 0) ? (a / 2) * b : a * (b / 2);  /* a b even */
}

static inline uint64_t ob_prod_div6(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t f[3] = {a, b, c};  /* a b c divisible by 6: one factor even, one a multiple of 3 */
    int i;
    for (i = 0; i < 3 && f[i] % 2 != 0; i++) {}
    if (i < 3) f[i] /= 2;
    for (i = 0; i < 3 && f[i] % 3 != 0; i++) {}
    if (i < 3) f[i] /= 3;
    return f[0] * f[1] * f[2];
}

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
