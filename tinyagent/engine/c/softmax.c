/* Attention's softmax over a prefix's causal scores, with the bits of ATen's CPU kernel (its
   AVX2 build, the one ATEN_CPU_CAPABILITY=avx2 pins), each row computed only where it is not
   masked.

   A full pass's scores are T x T with the future at -inf, so that torch's softmax spends half its
   exponentials on exp(-inf) = 0. This file computes each row as ATen's _vec_softmax_lastdim
   does: the maximum and the sum by its reduce_all (8 lanes, a tail merged into the first lanes,
   then a fixed tree across the lanes; rows shorter than 8 summed in order), the exponential as
   SLEEF's expf_u10 in its AVX2 form, which ATen's Vectorized<float>::exp calls, and each value
   times 1 / sum. A masked entry adds an exact 0 to its lane's sum and cannot raise a maximum, so
   the vectors that hold only masked entries are skipped and their outputs written as 0, the value
   torch computes for them. tests/test_softmax.py compares the bits with torch's. Built by
   `pip install -e .` (setup.py) into tinyagent.engine._kernels, which tinyagent/engine/softmax.py calls through
   bindings.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* SLEEF's xexpf (sleefsimdsp.c) with FMA: exp(d) = 2^q (1 + s + s^2 P(s)), d = q ln 2 + s. */
static inline __m256 exp_u10(__m256 d)
{
    const float log2_e = 1.442695040888963407359924681001892137426645954152985934135449406931f;
    __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(d, _mm256_set1_ps(log2_e)));
    __m256 qf = _mm256_cvtepi32_ps(q);
    __m256 s = _mm256_fmadd_ps(qf, _mm256_set1_ps(-0.693145751953125f), d);
    s = _mm256_fmadd_ps(qf, _mm256_set1_ps(-1.428606765330187045e-06f), s);
    __m256 u = _mm256_set1_ps(0.000198527617612853646278381f);
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.00139304355252534151077271f));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.00833336077630519866943359f));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.0416664853692054748535156f));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.166666671633720397949219f));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.5f));
    u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
    __m256i h = _mm256_srai_epi32(q, 1), bias = _mm256_set1_epi32(0x7f);   /* u * 2^h * 2^(q-h) */
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23)));
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(q, h), bias), 23)));
    u = _mm256_andnot_ps(_mm256_cmp_ps(d, _mm256_set1_ps(-104.0f), _CMP_LT_OQ), u);  /* to 0 */
    return _mm256_blendv_ps(u, _mm256_set1_ps(__builtin_inff()),
                            _mm256_cmp_ps(_mm256_set1_ps(100.0f), d, _CMP_LT_OQ));
}

/* The first n of 8 lanes (0 < n < 8), as a mask. */
static inline __m256i first_lanes(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 combine(__m256 a, __m256 b, int is_max)
{
    return is_max ? _mm256_max_ps(a, b) : _mm256_add_ps(a, b);
}

/* vec::reduce_all over x[0 .. n-1], reading only x[0 .. v-1]: entries from v on are the
   identity's equal for this reduction (-inf for the maximum, 0 for the sum), so skipping them
   changes no lane. */
static float reduce_all(const float *x, int64_t n, int64_t v, int is_max)
{
    if (n < 8) {             /* in order, in the first lane: vmaxps's a > b ? a : b, or + */
        float acc = x[0];
        for (int64_t i = 1; i < v; i++) acc = is_max ? (acc > x[i] ? acc : x[i]) : acc + x[i];
        return acc;
    }
    __m256 acc = _mm256_loadu_ps(x);
    int64_t d = 8, full = n - n % 8;
    for (; d < full && d < v; d += 8) acc = combine(acc, _mm256_loadu_ps(x + d), is_max);
    if (d == full && n > full && v > full) {             /* the tail, into the first lanes */
        __m256i tail = first_lanes(n - d);                 /* (the rest of its lanes load 0) */
        acc = _mm256_blendv_ps(acc, combine(acc, _mm256_maskload_ps(x + d, tail), is_max),
                               _mm256_castsi256_ps(tail));
    }
    __m256 t = _mm256_permute2f128_ps(acc, acc, 0x1);    /* across the lanes, as ATen */
    acc = combine(acc, t, is_max);
    acc = combine(acc, _mm256_shuffle_ps(acc, acc, 0x4E), is_max);
    acc = combine(acc, _mm256_shuffle_ps(acc, acc, 0xB1), is_max);
    return _mm256_cvtss_f32(acc);
}

/* One row of n entries, the first v of them unmasked. (x rows of T x T scores: row i of each
   has v = i + 1.) */
static void softmax_row(const float *x, float *y, int64_t n, int64_t v)
{
    __m256 max = _mm256_set1_ps(reduce_all(x, n, v, 1));
    int64_t d = 0, full = n - n % 8;
    for (; d < full && d < v; d += 8)
        _mm256_storeu_ps(y + d, exp_u10(_mm256_sub_ps(_mm256_loadu_ps(x + d), max)));
    __m256i tail = first_lanes(n - full);
    if (d == full && n > full && v > full)
        _mm256_maskstore_ps(y + d, tail,
                            exp_u10(_mm256_sub_ps(_mm256_maskload_ps(x + d, tail), max)));
    int64_t written = d == full && n > full && v > full ? n : d;
    __m256 scale = _mm256_set1_ps(1.0f / reduce_all(y, n, v, 0));
    for (d = 0; d + 8 <= written; d += 8)
        _mm256_storeu_ps(y + d, _mm256_mul_ps(_mm256_loadu_ps(y + d), scale));
    if (d < written)
        _mm256_maskstore_ps(y + d, tail, _mm256_mul_ps(_mm256_maskload_ps(y + d, tail), scale));
    memset(y + written, 0, sizeof(float) * (n - written));
}

int tiny_causal_softmax(int64_t rows, int64_t n, const float *x, float *y)
{
    for (int64_t r = 0; r < rows; r++) softmax_row(x + r * n, y + r * n, n, r % n + 1);
    return 0;
}
#else
int tiny_causal_softmax(int64_t rows, int64_t n, const float *x, float *y)
{
    (void)rows, (void)n, (void)x, (void)y;
    return -1;                                           /* not built: torch computes it */
}
#endif
