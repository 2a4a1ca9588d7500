/* GELU's additions and multiplications, forward and backward, each in one pass over the tensor.

   The policy's GELU is 0.5 * x * (1 + erf(x * 0.7071067811865476)), and torch evaluates it as five
   operators, each a pass over the tensor and a new tensor; autograd adds nine more for the
   gradient. Here the passes between the two transcendental functions are one loop each, and erf
   and exp stay torch's (gelu.py calls them). Every operation is written in the order and the
   precision torch computes it (a float32 tensor times a Python number is a float32 product with
   that number rounded to float32), and the file is compiled with -ffp-contract=off, so that no
   multiply and add fuse into one rounding: the bits are torch's, which tests/test_gelu.py checks.
   A long tensor is shared between the threads torch is set to use (OpenMP, the runtime torch
   loaded); each element is computed alone, so the bits do not depend on the number of threads.
   Built by `pip install -e .` (setup.py) into tinyagent.engine._kernels, which tinyagent/engine/gelu.py calls
   through bindings.c. */
#include <stddef.h>

#include "kernels.h"

/* Below this many elements, waking other threads costs more than it saves (matmul.c's
   tiny_threads decides). On one thread a pass runs as a plain loop, without entering a
   parallel region: libgomp builds a team for each region, even one its `if` keeps to one
   thread, and a rollout's one-token passes make ~75 small passes a step. */
#define THREADED_ELEMENTS 32768.0

/* `for i in 0 .. n-1: body`, on tiny_threads' count (the body is the variadic part, so
   that its commas need no parentheses). */
#define EACH(n, ...)                                                                      \
    do {                                                                                  \
        if (tiny_threads((double)(n), THREADED_ELEMENTS) > 1) {                           \
            _Pragma("omp parallel for schedule(static)")                                  \
            for (size_t i = 0; i < (n); i++) __VA_ARGS__                                  \
        } else                                                                            \
            for (size_t i = 0; i < (n); i++) __VA_ARGS__                                  \
    } while (0)

/* u = x * c, the argument of erf. */
void gelu_erf_argument(size_t n, const float *x, float c, float *u)
{
    EACH(n, { u[i] = x[i] * c; });
}

/* y = (x * 0.5) * (1 + e), with e = erf(x * c). */
void gelu_forward(size_t n, const float *x, const float *e, float *y)
{
    EACH(n, { y[i] = (x[i] * 0.5f) * (e[i] + 1.0f); });
}

/* m = -(u * u) with u = x * c: erf's derivative is k * exp(m). */
void gelu_exp_argument(size_t n, const float *x, float c, float *m)
{
    EACH(n, {
        float u = x[i] * c;
        m[i] = -(u * u);
    });
}

/* The gradient autograd computes, node by node: through (x * 0.5) * (1 + e), the sum of the
   two paths to x, (g * (1 + e)) * 0.5 and ((k * exp(m)) * (g * (x * 0.5))) * c. */
void gelu_backward(size_t n, const float *x, const float *e, const float *expm, const float *g,
                   float c, float k, float *gx)
{
    EACH(n, {
        float half = x[i] * 0.5f, one_plus = e[i] + 1.0f;
        float through_half = (g[i] * one_plus) * 0.5f;
        float through_erf = ((k * expm[i]) * (g[i] * half)) * c;
        gx[i] = through_half + through_erf;
    });
}
