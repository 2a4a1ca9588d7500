/* The policy's matrix products, with an order of summation this file fixes.

   C = A @ B for float32 (M, K) @ (K, N), batched over two leading dimensions. Every element is
   summed over k in order, c = fmaf(a[i][k], b[k][j], c) for k = 0 .. K-1 from c = 0, whatever the
   shapes, the blocking, the vector width or the CPU: the AVX-512, AVX2 and scalar paths round
   alike (a fused multiply-add is rounded once, exactly as IEEE 754 says), so the bits depend on
   the operands alone. BLAS libraries choose their blocking and kernels by the CPU they find; this
   code chooses only how fast it goes. It walks k in chunks of KCHUNK, storing each element's
   partial sum in C between chunks and loading it back (a float32 stored and loaded is the same
   float32), so that a long reduction, such as a weight gradient summed over every token of an
   SFT batch, finds its chunk of B in the cache.
   A is read through any strides (its elements are broadcast one at a time, except where a weight
   gradient's last columns load 16 adjacent rows of A as a vector), B through any strides
   (a B whose columns are not adjacent, such as a transposed weight, is first copied into rows
   here, which moves numbers and rounds nothing), C is contiguous. Causal scores skip the blocks
   that lie wholly in the future, which the mask then sets to -inf.
   A large product is split between threads by rows, or by batch entries (OpenMP, the runtime
   torch itself loaded, so its idle threads are the ones that help); each element is still one
   thread's chain in the same order, so the bits do not depend on the number of threads either.
   Built by `pip install -e .` (setup.py) into tinyagent.engine._kernels, which tinyagent/engine/matmul.py calls
   through bindings.c. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "kernels.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* 128 rows of a B 66 columns wide are 33 KB, which a 48 KB L1 cache holds while every block of
   rows reads them: the weight gradients ran 13-16% faster than with chunks of 256 on an Intel
   Xeon (AVX-512), and 100 SFT steps 3-4% faster. */
#define KCHUNK 128

typedef struct {
    int M, N, K;
    const float *A; ptrdiff_t sam, sak;    /* A[i][k] = A[i * sam + k * sak] */
    const float *B; ptrdiff_t sbk;         /* B[k][j] = B[k * sbk + j] */
    float *C;                              /* C[i][j] = C[i * N + j] */
    int k0, k1;                            /* this pass adds k0 .. k1-1 to what C holds */
    int causal, row0;                      /* with causal, row i is row row0 + i of the scores,
                                              and its columns past row0 + i are masked after */
} product;

#define A_(p, i, k) ((p)->A[(ptrdiff_t)(i) * (p)->sam + (ptrdiff_t)(k) * (p)->sak])
#define B_(p, k, j) ((p)->B + (ptrdiff_t)(k) * (p)->sbk + (j))
#define C_(p, i, j) ((p)->C + (size_t)(i) * (p)->N + (j))

/* The columns that rows i .. i+rows-1 need: all N, or with a causal mask those up to the last
   row's own position, since every later one is set to -inf after the product (causal scores,
   half of whose elements are future). Which elements are computed changes none of their bits. */
static int needed_columns(const product *p, int i, int rows)
{
    int last = p->row0 + i + rows;
    return p->causal && last < p->N ? last : p->N;
}

/* The definition itself, element by element. */
static void scalar_product(const product *p)
{
    for (int i = 0; i < p->M; i++)
        for (int j = 0, n = needed_columns(p, i, 1); j < n; j++) {
            float c = p->k0 ? *C_(p, i, j) : 0.0f;
            for (int k = p->k0; k < p->k1; k++) c = fmaf(A_(p, i, k), *B_(p, k, j), c);
            *C_(p, i, j) = c;
        }
}

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ROWS 6
#define ROWS16 8        /* the AVX-512 blocks' height (below) */

/* Rows i .. i+ROWS-1, columns j .. j+15: the full block, its 12 accumulators in registers. */
static void avx2_full_block(const product *p, int i, int j)
{
    __m256 c0[ROWS], c1[ROWS];
    for (int r = 0; r < ROWS; r++) {
        c0[r] = p->k0 ? _mm256_loadu_ps(C_(p, i + r, j)) : _mm256_setzero_ps();
        c1[r] = p->k0 ? _mm256_loadu_ps(C_(p, i + r, j + 8)) : _mm256_setzero_ps();
    }
    const float *a = &A_(p, i, p->k0);
    for (int k = p->k0; k < p->k1; k++, a += p->sak) {
        __m256 b0 = _mm256_loadu_ps(B_(p, k, j)), b1 = _mm256_loadu_ps(B_(p, k, j + 8));
#pragma GCC unroll 6
        for (int r = 0; r < ROWS; r++) {
            __m256 x = _mm256_set1_ps(a[r * p->sam]);
            c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
        }
    }
    for (int r = 0; r < ROWS; r++) {
        _mm256_storeu_ps(C_(p, i + r, j), c0[r]);
        _mm256_storeu_ps(C_(p, i + r, j + 8), c1[r]);
    }
}

/* Rows i .. i+rows-1 (rows <= ROWS), columns j .. j+7: the edges. Inlined, like the function
   below, so that a constant number of rows keeps its accumulators in registers. */
static inline __attribute__((always_inline)) void avx2_edge_block(const product *p, int i,
                                                                  int rows, int j)
{
    __m256 c[ROWS];
    for (int r = 0; r < rows; r++)
        c[r] = p->k0 ? _mm256_loadu_ps(C_(p, i + r, j)) : _mm256_setzero_ps();
    for (int k = p->k0; k < p->k1; k++) {
        __m256 b0 = _mm256_loadu_ps(B_(p, k, j));
        for (int r = 0; r < rows; r++)
            c[r] = _mm256_fmadd_ps(_mm256_set1_ps(A_(p, i + r, k)), b0, c[r]);
    }
    for (int r = 0; r < rows; r++) _mm256_storeu_ps(C_(p, i + r, j), c[r]);
}

/* Rows i .. i+rows-1, the last n - j <= 8 columns: lanes past the last column load zeros and are
   not stored. (The policy's widths, 66 and head size 11, end in such columns; computed one at a
   time they cost as much as the rest of the product.) Up to ROWS16 rows: the AVX-512 path's last
   8 columns or fewer come here too (avx512_edge_block). */
static inline __attribute__((always_inline)) void avx2_last_columns(const product *p, int i,
                                                                    int rows, int j, int n)
{
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j),
                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 c[ROWS16];
    for (int r = 0; r < rows; r++)
        c[r] = p->k0 ? _mm256_maskload_ps(C_(p, i + r, j), mask) : _mm256_setzero_ps();
    for (int k = p->k0; k < p->k1; k++) {
        __m256 b0 = _mm256_maskload_ps(B_(p, k, j), mask);
        for (int r = 0; r < rows; r++)
            c[r] = _mm256_fmadd_ps(_mm256_set1_ps(A_(p, i + r, k)), b0, c[r]);
    }
    for (int r = 0; r < rows; r++) _mm256_maskstore_ps(C_(p, i + r, j), mask, c[r]);
}

/* Rows i .. i+rows-1, the columns j .. n-1, 8 at a time. */
static inline __attribute__((always_inline)) void avx2_edges(const product *p, int i, int rows,
                                                             int j, int n)
{
    for (; j + 8 <= n; j += 8) avx2_edge_block(p, i, rows, j);
    if (j < n) avx2_last_columns(p, i, rows, j, n);
}

static void avx2_product(const product *p)
{
    for (int i = 0; i < p->M; i += ROWS) {
        int rows = p->M - i < ROWS ? p->M - i : ROWS, j = 0, n = needed_columns(p, i, rows);
        if (rows == ROWS)
            for (; j + 16 <= n; j += 16) avx2_full_block(p, i, j);
        switch (rows) {         /* a constant height each, so the accumulators stay in registers */
        case ROWS: avx2_edges(p, i, ROWS, j, n); break;
        case 1: avx2_edges(p, i, 1, j, n); break;                 /* one-token decoding */
        case 2: avx2_edges(p, i, 2, j, n); break;
        case 3: avx2_edges(p, i, 3, j, n); break;
        case 4: avx2_edges(p, i, 4, j, n); break;
        default: avx2_edges(p, i, 5, j, n);
        }
    }
}

/* One-token decoding's products have one row each, and a batch of them (one per episode and
   head) is as many chains of fused multiply-adds, each waiting on the one before. So `n` <= ROWS
   products are computed together, product t's row a[t] against its own b[t] into c[t]: their
   chains interleave, and each element is still one chain over k in order. Columns j .. j+7.
   (Up to ROWS16 products: the AVX-512 path's last 8 columns or fewer come here too.) */
static inline __attribute__((always_inline)) void avx2_single_rows(int n, const float **a,
    ptrdiff_t sak, const float **b, ptrdiff_t sbk, float **c, int K, int j, __m256i mask)
{
    __m256 acc[ROWS16];
    for (int t = 0; t < n; t++) acc[t] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++)
        for (int t = 0; t < n; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][k * sak]),
                                     _mm256_maskload_ps(b[t] + k * sbk + j, mask), acc[t]);
    for (int t = 0; t < n; t++) _mm256_maskstore_ps(c[t] + j, mask, acc[t]);
}

static void avx2_single_row_products(int n, const float **a, ptrdiff_t sak, const float **b,
                                     ptrdiff_t sbk, float **c, int K, int N)
{
    for (int j = 0; j < N; j += 8) {
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(N - j),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        if (n == ROWS) avx2_single_rows(ROWS, a, sak, b, sbk, c, K, j, mask);
        else avx2_single_rows(n, a, sak, b, sbk, c, K, j, mask);
    }
}

/* The same blocks 16 lanes wide, for CPUs with AVX-512 (chosen when the program runs, so one
   build serves both). */
#define AVX512 __attribute__((target("avx512f,fma")))

/* Rows i .. i+ROWS16-1, columns j .. j+31: 16 accumulators in registers. */
AVX512 static void avx512_full_block(const product *p, int i, int j)
{
    __m512 c0[ROWS16], c1[ROWS16];
    for (int r = 0; r < ROWS16; r++) {
        c0[r] = p->k0 ? _mm512_loadu_ps(C_(p, i + r, j)) : _mm512_setzero_ps();
        c1[r] = p->k0 ? _mm512_loadu_ps(C_(p, i + r, j + 16)) : _mm512_setzero_ps();
    }
    const float *a = &A_(p, i, p->k0);
    for (int k = p->k0; k < p->k1; k++, a += p->sak) {
        __m512 b0 = _mm512_loadu_ps(B_(p, k, j)), b1 = _mm512_loadu_ps(B_(p, k, j + 16));
#pragma GCC unroll 8
        for (int r = 0; r < ROWS16; r++) {
            __m512 x = _mm512_set1_ps(a[r * p->sam]);
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
        }
    }
    for (int r = 0; r < ROWS16; r++) {
        _mm512_storeu_ps(C_(p, i + r, j), c0[r]);
        _mm512_storeu_ps(C_(p, i + r, j + 16), c1[r]);
    }
}

/* Rows i .. i+rows-1 (rows <= ROWS16), the columns j .. min(j+16, n)-1. Inlined, so that a
   full height of rows (a constant) keeps its accumulators in registers. The last 8 or fewer
   columns go on 8-lane vectors: where a 16-lane multiply-add takes the time of two 8-lane ones
   (AMD Zen 4) that halves the edge's cost, and elsewhere it costs the same. Each lane is the same
   chain of fused multiply-adds either way. */
AVX512 static inline __attribute__((always_inline)) void avx512_edge_block(
    const product *p, int i, int rows, int j, int n)
{
    if (n - j <= 8) {
        avx2_last_columns(p, i, rows, j, n);
        return;
    }
    __mmask16 mask = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
    __m512 c[ROWS16];
    for (int r = 0; r < rows; r++)
        c[r] = p->k0 ? _mm512_maskz_loadu_ps(mask, C_(p, i + r, j)) : _mm512_setzero_ps();
    for (int k = p->k0; k < p->k1; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(mask, B_(p, k, j));
        for (int r = 0; r < rows; r++)
            c[r] = _mm512_fmadd_ps(_mm512_set1_ps(A_(p, i + r, k)), b0, c[r]);
    }
    for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(C_(p, i + r, j), mask, c[r]);
}

/* Rows i .. i+15 (those `rows` keeps) of the last columns j .. N-1, fewer than 16, as vectors
   down a column: where A's rows are adjacent (sam == 1: a weight gradient, A = gradᵀ), rows
   i .. i+15 of A's column k are one load, and each column costs one fused multiply-add per k for
   16 rows. Across the row, as the edge blocks go, 66 columns take 80 lanes. Each element is the
   same chain, fma(a, b, c) for k in order, so the bits are the same. */
#define LAST 15
AVX512 static void avx512_last_columns_down(const product *p, int i, __mmask16 rows, int j)
{
    __m512i to_row = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                          12, 13, 14, 15), _mm512_set1_epi32(p->N));
    __m512 c[LAST];
    int n = p->N - j;
    for (int t = 0; t < n; t++)
        c[t] = p->k0 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rows, to_row,
                                                C_(p, i, j + t), 4)
                     : _mm512_setzero_ps();
    for (int k = p->k0; k < p->k1; k++) {
        __m512 a = _mm512_maskz_loadu_ps(rows, &A_(p, i, k));
        const float *b = B_(p, k, j);
        for (int t = 0; t < n; t++) c[t] = _mm512_fmadd_ps(a, _mm512_set1_ps(b[t]), c[t]);
    }
    for (int t = 0; t < n; t++) _mm512_mask_i32scatter_ps(C_(p, i, j + t), rows, to_row, c[t], 4);
}

AVX512 static void avx512_product(const product *p)
{
    /* With A's rows adjacent, the last N % 16 columns of a wide product go down the columns
       (above). Not for attention's products 11 columns wide (its gradients for k and v, gᵀ q
       and pᵀ g): there the scatter of every column costs more than the lanes save. */
    int across = p->sam == 1 && p->sak != 1 && !p->causal && p->N >= 16 && p->N % 16 <= 4
                 ? p->N - p->N % 16 : p->N;
    for (int i = 0; across < p->N && i < p->M; i += 16) {
        __mmask16 rows = p->M - i >= 16 ? 0xFFFF : (__mmask16)((1u << (p->M - i)) - 1);
        avx512_last_columns_down(p, i, rows, across);
    }
    for (int i = 0; i < p->M; i += ROWS16) {
        int rows = p->M - i < ROWS16 ? p->M - i : ROWS16, j = 0, n = needed_columns(p, i, rows);
        if (n > across) n = across;
        if (rows == ROWS16)
            for (; j + 32 <= n; j += 32) avx512_full_block(p, i, j);
        for (; j < n; j += 16)
            switch (rows) {     /* a constant height each, so the accumulators stay in registers */
            case ROWS16: avx512_edge_block(p, i, ROWS16, j, n); break;
            case 1: avx512_edge_block(p, i, 1, j, n); break;           /* one-token decoding */
            case 2: avx512_edge_block(p, i, 2, j, n); break;
            case 3: avx512_edge_block(p, i, 3, j, n); break;
            case 4: avx512_edge_block(p, i, 4, j, n); break;
            case 5: avx512_edge_block(p, i, 5, j, n); break;
            case 6: avx512_edge_block(p, i, 6, j, n); break;
            default: avx512_edge_block(p, i, 7, j, n);
            }
    }
}

/* avx2_single_rows, 16 lanes wide. */
AVX512 static inline __attribute__((always_inline)) void avx512_single_rows(int n,
    const float **a, ptrdiff_t sak, const float **b, ptrdiff_t sbk, float **c, int K, int j,
    __mmask16 mask)
{
    __m512 acc[ROWS16];
    for (int t = 0; t < n; t++) acc[t] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++)
        for (int t = 0; t < n; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(a[t][k * sak]),
                                     _mm512_maskz_loadu_ps(mask, b[t] + k * sbk + j), acc[t]);
    for (int t = 0; t < n; t++) _mm512_mask_storeu_ps(c[t] + j, mask, acc[t]);
}

AVX512 static void avx512_single_row_products(int n, const float **a, ptrdiff_t sak,
                                              const float **b, ptrdiff_t sbk, float **c, int K,
                                              int N)
{
    for (int j = 0; j < N; j += 16) {
        if (N - j <= 8) {       /* the last 8 columns or fewer on 8-lane vectors, as in
                                   avx512_edge_block */
            __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(N - j),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            if (n == ROWS16) avx2_single_rows(ROWS16, a, sak, b, sbk, c, K, j, mask);
            else avx2_single_rows(n, a, sak, b, sbk, c, K, j, mask);
            break;
        }
        __mmask16 mask = N - j >= 16 ? 0xFFFF : (__mmask16)((1u << (N - j)) - 1);
        if (n == ROWS16) avx512_single_rows(ROWS16, a, sak, b, sbk, c, K, j, mask);
        else avx512_single_rows(n, a, sak, b, sbk, c, K, j, mask);
    }
}
#endif

/* Which path computes: 0 the fastest this CPU runs, 1 scalar, 2 AVX2, 3 AVX-512 (for the tests,
   which show that all give the same bits). Returns the path in force: the one asked for, or the
   fastest this build and CPU have below it. */
static int forced = 0;

int tiny_matmul_path(int path)
{
    forced = path;
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
    int best = __builtin_cpu_supports("avx512f") ? 3 : 2;
    return forced == 0 || forced > best ? best : forced;
#else
    return 1;
#endif
}

/* One product, k in chunks, on one path. */
static void compute(product p, int path)
{
    for (p.k0 = 0; p.k0 == 0 || p.k0 < p.K; p.k0 += KCHUNK) {
        p.k1 = p.K - p.k0 < KCHUNK ? p.K : p.k0 + KCHUNK;
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
        if (path == 3) { avx512_product(&p); continue; }
        if (path == 2) { avx2_product(&p); continue; }
#endif
        scalar_product(&p);
    }
}


/* B[k][j] = B[k * sbk + j * sbn] copied into rows of N adjacent floats, so that they load as
   vectors. Copying changes no value, so the product's bits are the same as from adjacent rows.
   Row by row: the writes run along a row, and the K values of B's column j that a row reads one
   at a time stay in the cache for the next row (attention's kᵀ: 5-7 µs less of a 30-60 µs
   product of a group; a transposed 316 x 66 weight times 3072 rows: 1.28 ms against 1.58). */
static const float *as_rows(const float *B, ptrdiff_t sbk, ptrdiff_t sbn, int K, int N, float *rows)
{
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) rows[(size_t)k * N + j] = B[k * sbk + j * sbn];
    return rows;
}

/* out = in * scale for M rows of an (., N) slice, the first being row `row0` (one rounding, as
   torch multiplies a float32 tensor by a Python number: by that number rounded to float32), and
   with `causal` the future, column j > row i, set to `future`: attention's scores (-inf) and their
   gradient (0). `out` may be `in`. */
static void scale_past(const float *in, float *out, int row0, int M, int N, float scale,
                       int causal, float future)
{
    for (int i = 0; i < M; i++, in += N, out += N) {
        int past = causal && row0 + i + 1 < N ? row0 + i + 1 : N;    /* columns 0 .. past-1 */
        for (int j = 0; j < past; j++) out[j] = in[j] * scale;     /* (vectorized by -O3) */
        for (int j = past; j < N; j++) out[j] = future;
    }
}

/* How many threads share `work` (a product's multiply-adds, a GELU pass's elements): those torch
   is set to use (its set_num_threads sets OpenMP's count in this same runtime), unless the work is
   below `threshold`, too little to repay waking them, or we are already inside a parallel
   region. gelu.c asks the same. */
int tiny_threads(double work, double threshold)
{
#ifdef _OPENMP
    if (work >= threshold && !omp_in_parallel()) return omp_get_max_threads();
#else
    (void)work, (void)threshold;
#endif
    return 1;
}

#define THREADED_WORK 200000.0       /* multiply-adds */

/* A linear layer's epilogue: bias[j] added to column j (one rounding, as torch's addition). */
static void add_bias(float *C, int M, int N, const float *bias)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(size_t)i * N + j] += bias[j];
}

/* A batch of products, as tiny_bmm receives it, and how it is cut into work items. */
typedef struct {
    int nb2, M, N, K;
    const float *A; ptrdiff_t sa1, sa2, sam, sak;
    const float *B; ptrdiff_t sb1, sb2, sbk, sbn;
    float *C; float scale; int causal; const float *bias;
    float *rows;                    /* NULL, or scratch for every entry's B copied into rows */
    int path, pieces, piece;        /* each entry's M rows in `pieces` runs of `piece` rows */
} batch;

/* Batch entry b's B, copied into its rows of the scratch. */
static void copy_rows(const batch *w, int b)
{
    as_rows(w->B + b / w->nb2 * w->sb1 + b % w->nb2 * w->sb2, w->sbk, w->sbn, w->K, w->N,
            w->rows + (size_t)b * w->K * w->N);
}

/* Work item `item`: one run of rows of one entry's product, scaled, masked and biased. */
static void compute_item(const batch *w, int item)
{
    int b = item / w->pieces, i0 = item % w->pieces * w->piece;
    int m = w->M - i0 < w->piece ? w->M - i0 : w->piece, b1 = b / w->nb2, b2 = b % w->nb2;
    product p = {m, w->N, w->K, w->A + b1 * w->sa1 + b2 * w->sa2 + i0 * w->sam, w->sam, w->sak,
                 w->rows ? w->rows + (size_t)b * w->K * w->N : w->B + b1 * w->sb1 + b2 * w->sb2,
                 w->rows ? w->N : w->sbk, w->C + ((size_t)b * w->M + i0) * w->N, 0, 0,
                 w->causal, i0};
    compute(p, w->path);
    if (w->scale != 1.0f || w->causal)
        scale_past(p.C, p.C, i0, m, w->N, w->scale, w->causal, -INFINITY);
    if (w->bias) add_bias(p.C, m, w->N, w->bias);
}

/* Returns 0, or -1 when the scratch rows for a strided B cannot be allocated (C is then unset).
   With scale != 1 or causal, each product is then scaled, its future at -inf (attention's scores);
   with a `bias` (N floats), through `add_bias` (a linear layer's). */
int tiny_bmm(int nb1, int nb2, int M, int N, int K,
             const float *A, ptrdiff_t sa1, ptrdiff_t sa2, ptrdiff_t sam, ptrdiff_t sak,
             const float *B, ptrdiff_t sb1, ptrdiff_t sb2, ptrdiff_t sbk, ptrdiff_t sbn, float *C,
             float scale, int causal, const float *bias)
{
    int path = tiny_matmul_path(forced);
    float *rows = NULL;
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
    if (M == 1 && sbn == 1 && path >= 2 && K > 0) {          /* one-token decoding */
        int group = path == 3 ? ROWS16 : ROWS, n = 0;
        const float *a[ROWS16], *b[ROWS16];
        float *c[ROWS16];
        for (int b1 = 0; b1 < nb1; b1++)
            for (int b2 = 0; b2 < nb2; b2++) {
                a[n] = A + b1 * sa1 + b2 * sa2;
                b[n] = B + b1 * sb1 + b2 * sb2;
                c[n] = C + ((size_t)b1 * nb2 + b2) * N;
                if (++n < group && !(b1 == nb1 - 1 && b2 == nb2 - 1)) continue;
                if (path == 3) avx512_single_row_products(n, a, sak, b, sbk, c, K, N);
                else avx2_single_row_products(n, a, sak, b, sbk, c, K, N);
                for (int t = 0; t < n; t++) {
                    if (scale != 1.0f || causal)
                        scale_past(c[t], c[t], 0, 1, N, scale, causal, -INFINITY);
                    if (bias) add_bias(c[t], 1, N, bias);
                }
                n = 0;
            }
        return 0;
    }
#endif
    int nb = nb1 * nb2, threads = tiny_threads((double)nb * M * N * K, THREADED_WORK);
    size_t kn = (size_t)K * N;
    if (sbn != 1 && K > 0 && N > 0 && !(rows = malloc(sizeof(float) * kn * nb))) return -1;
    /* Work items: each batch entry, cut into `pieces` runs of rows when there are fewer entries
       than threads (a piece a multiple of 8 rows, the AVX-512 block height). */
    int pieces = nb >= threads ? 1 : (threads + nb - 1) / nb;
    int piece = ((M + pieces - 1) / pieces + 7) / 8 * 8;
    if (piece == 0) piece = 1;
    pieces = (M + piece - 1) / piece;
    batch job = {nb2, M, N, K, A, sa1, sa2, sam, sak, B, sb1, sb2, sbk, sbn, C, scale, causal,
                 bias, rows, path, pieces, piece};
    if (threads > 1) {                    /* on one thread no parallel region is entered at
                                             all: a run calls the kernel ~900 times a step */
#pragma omp parallel num_threads(threads)
        {
            if (rows) {
#pragma omp for schedule(static)
                for (int b = 0; b < nb; b++) copy_rows(&job, b);
            }
#pragma omp for schedule(static)
            for (int item = 0; item < nb * pieces; item++) compute_item(&job, item);
        }
    } else {
        for (int b = 0; rows && b < nb; b++) copy_rows(&job, b);
        for (int item = 0; item < nb * pieces; item++) compute_item(&job, item);
    }
    free(rows);
    return 0;
}

/* The gradient of the scores, for n contiguous (M, N) slices: grad * scale, and 0 at the future
   with `causal` (what autograd computes for the masked fill and the multiply). */
void tiny_scores_grad(int n, int M, int N, const float *grad, float *out, float scale, int causal)
{
    for (int s = 0; s < n; s++, grad += (size_t)M * N, out += (size_t)M * N)
        scale_past(grad, out, 0, M, N, scale, causal, 0.0f);
}
