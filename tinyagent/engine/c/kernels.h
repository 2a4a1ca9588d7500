/* The C kernels' functions, as matmul.c, kvcache.c, gelu.c, adam.c and softmax.c define them and
   bindings.c calls them: one declaration, which the compiler checks against both sides. */
#ifndef TINYAGENT_KERNELS_H
#define TINYAGENT_KERNELS_H
#include <stddef.h>
#include <stdint.h>

/* matmul.c */
int tiny_matmul_path(int path);
int tiny_threads(double work, double threshold);
int tiny_bmm(int nb1, int nb2, int M, int N, int K,
             const float *A, ptrdiff_t sa1, ptrdiff_t sa2, ptrdiff_t sam, ptrdiff_t sak,
             const float *B, ptrdiff_t sb1, ptrdiff_t sb2, ptrdiff_t sbk, ptrdiff_t sbn, float *C,
             float scale, int causal, const float *bias);
void tiny_scores_grad(int n, int M, int N, const float *grad, float *out, float scale,
                      int causal);

/* kvcache.c */
void kv_store(int B, int T, int nh, int hs, int L, int pos, const float *qkv, ptrdiff_t row_b,
              ptrdiff_t row_t, float *keys, float *values);
void kv_compact(int n, const int64_t *keep, int nh, int hs, int L, int length, float *keys,
                float *values);

/* adam.c */
void adam_step(size_t n, float *p, const float *g, float *m, float *v, float one_minus_beta1,
               float beta2, float one_minus_beta2, float bias2, float eps, float step);

/* softmax.c: 0, or -1 where it is not built (no AVX2: torch computes the softmax) */
int tiny_causal_softmax(int64_t rows, int64_t n, const float *x, float *y);

/* gelu.c */
void gelu_erf_argument(size_t n, const float *x, float c, float *u);
void gelu_forward(size_t n, const float *x, const float *e, float *y);
void gelu_exp_argument(size_t n, const float *x, float c, float *m);
void gelu_backward(size_t n, const float *x, const float *e, const float *expm, const float *g,
                   float c, float k, float *gx);
#endif
