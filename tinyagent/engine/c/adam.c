/* One Adam step of one float32 parameter, every element in one pass.

   adam.py's step is six torch operators a parameter (lerp_, mul_, addcmul_, the square root, a
   division and add_, addcdiv_), each a pass over the tensor and a call through torch's
   dispatcher; a run's update takes two steps of 30 parameters a training step. Here each element
   goes through the same operations in the same order and precision, as ATen's CPU kernels compute
   them on float32 (each scalar rounded to float32 first, as ATen rounds a Python number):
     m = fma(1 - beta1, g - m, m)            lerp_ with a weight below 0.5: its fused form
     v = v * beta2                           mul_
     v = fma((1 - beta2) * g, g, v)          addcmul_: value * g * g added in one rounding
     d = sqrt(v) / sqrt(1 - beta2^t) + eps   the correctly rounded square root (IEEE 754's)
     p = p + (-lr / (1 - beta1^t)) * m / d   addcdiv_
   ATen fuses the two multiply-adds marked fma (its compiler contracts them); the file is built
   with -ffp-contract=off, so that no other multiply and add fuse. tests/test_adam.py compares the
   bits with the torch operators, on the parameters' shapes. Built by `pip install -e .` (setup.py)
   into tinyagent.engine._kernels, which tinyagent/engine/adam.py calls through bindings.c. */
#include <math.h>
#include <stddef.h>

#include "kernels.h"

void adam_step(size_t n, float *p, const float *g, float *m, float *v, float one_minus_beta1,
               float beta2, float one_minus_beta2, float bias2, float eps, float step)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = fmaf(one_minus_beta1, g[i] - m[i], m[i]);
        v[i] = fmaf(one_minus_beta2 * g[i], g[i], v[i] * beta2);
        p[i] = p[i] + step * m[i] / (sqrtf(v[i]) / bias2 + eps);
    }
}
