/* The policy's matrix products, with an order of summation this file fixes.

   C = A @ B for float32 (M, K) @ (K, N), batched over two leading dimensions. Every element is
   summed over k in order, c = fmaf(a[i][k], b[k][j], c) for k = 0 .. K-1 from c = 0, whatever the
   shapes, the blocking, the vector width or the CPU: the AVX2 and the scalar path round
   alike (a fused multiply-add is rounded once, exactly as IEEE 754 says), so the bits depend on
   the operands alone. BLAS libraries choose their blocking and kernels by the CPU they find; this
   code chooses only how fast it goes. A is read through any strides (its elements are broadcast
   one at a time), B through a row stride (its rows are loaded as vectors), C is contiguous.
   Built by `pip install -e .` (setup.py) and called through ctypes by tinyagent/matmul.py. */
#include <math.h>
#include <stddef.h>

typedef struct {
    int M, N, K;
    const float *A; ptrdiff_t sam, sak;    /* A[i][k] = A[i * sam + k * sak] */
    const float *B; ptrdiff_t sbk;         /* B[k][j] = B[k * sbk + j] */
    float *C;                              /* C[i][j] = C[i * N + j] */
} product;

#define A_(p, i, k) ((p)->A[(ptrdiff_t)(i) * (p)->sam + (ptrdiff_t)(k) * (p)->sak])
#define B_(p, k, j) ((p)->B + (ptrdiff_t)(k) * (p)->sbk + (j))

/* One element from column j on, the definition itself. */
static void scalar_columns(const product *p, int i, int j)
{
    for (; j < p->N; j++) {
        float c = 0.0f;
        for (int k = 0; k < p->K; k++) c = fmaf(A_(p, i, k), *B_(p, k, j), c);
        p->C[(size_t)i * p->N + j] = c;
    }
}

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ROWS 6

/* Rows i .. i+rows-1 (rows <= ROWS), columns j .. j+8*vecs-1, with 8-wide vectors. */
static inline void avx2_block(const product *p, int i, int rows, int j, int vecs)
{
    __m256 c[ROWS][2];
    for (int r = 0; r < rows; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
    for (int k = 0; k < p->K; k++) {
        __m256 b0 = _mm256_loadu_ps(B_(p, k, j));
        __m256 b1 = vecs > 1 ? _mm256_loadu_ps(B_(p, k, j + 8)) : b0;
        for (int r = 0; r < rows; r++) {
            __m256 a = _mm256_set1_ps(A_(p, i + r, k));
            c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
            if (vecs > 1) c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < vecs; v++)
            _mm256_storeu_ps(p->C + (size_t)(i + r) * p->N + j + 8 * v, c[r][v]);
}

static void avx2_product(const product *p)
{
    for (int i = 0; i < p->M; i += ROWS) {
        int rows = p->M - i < ROWS ? p->M - i : ROWS, j = 0;
        for (; j + 16 <= p->N; j += 16) avx2_block(p, i, rows, j, 2);
        for (; j + 8 <= p->N; j += 8) avx2_block(p, i, rows, j, 1);
        for (int r = 0; r < rows; r++) scalar_columns(p, i + r, j);
    }
}

#endif

static void scalar_product(const product *p)
{
    for (int i = 0; i < p->M; i++) scalar_columns(p, i, 0);
}

/* Which path computes: 0 the fastest built, 1 scalar, 2 AVX2 (for the tests, which show that
   both give the same bits). Returns the path in force. */
static int forced = 0;

int tiny_matmul_path(int path)
{
    forced = path;
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
    return forced == 1 ? 1 : 2;
#else
    return 1;
#endif
}

void tiny_bmm(int nb1, int nb2, int M, int N, int K,
              const float *A, ptrdiff_t sa1, ptrdiff_t sa2, ptrdiff_t sam, ptrdiff_t sak,
              const float *B, ptrdiff_t sb1, ptrdiff_t sb2, ptrdiff_t sbk, float *C)
{
    int path = tiny_matmul_path(forced);
    for (int b1 = 0; b1 < nb1; b1++)
        for (int b2 = 0; b2 < nb2; b2++) {
            product p = {M, N, K, A + b1 * sa1 + b2 * sa2, sam, sak, B + b1 * sb1 + b2 * sb2, sbk,
                         C + ((size_t)b1 * nb2 + b2) * M * N};
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
            if (path == 2) { avx2_product(&p); continue; }
#endif
            scalar_product(&p);
        }
}
