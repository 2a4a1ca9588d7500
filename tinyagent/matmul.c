/* The policy's matrix products, with an order of summation this file fixes.

   C = A @ B for float32 (M, K) @ (K, N), batched over two leading dimensions. Every element is
   summed over k in order, c = fmaf(a[i][k], b[k][j], c) for k = 0 .. K-1 from c = 0, whatever the
   shapes, the blocking, the vector width or the CPU: the AVX2 and the scalar path round
   alike (a fused multiply-add is rounded once, exactly as IEEE 754 says), so the bits depend on
   the operands alone. BLAS libraries choose their blocking and kernels by the CPU they find; this
   code chooses only how fast it goes. A is read through any strides (its elements are broadcast
   one at a time), B through any strides (a B whose columns are not adjacent, such as a transposed
   weight, is first copied into rows here, which moves numbers and rounds nothing), C is
   contiguous.
   Built by `pip install -e .` (setup.py) and called through ctypes by tinyagent/matmul.py. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

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

/* Rows i .. i+ROWS-1, columns j .. j+15: the full block, its 12 accumulators in registers. */
static void avx2_full_block(const product *p, int i, int j)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const float *a = &A_(p, i, 0);
    for (int k = 0; k < p->K; k++, a += p->sak) {
        __m256 b0 = _mm256_loadu_ps(B_(p, k, j)), b1 = _mm256_loadu_ps(B_(p, k, j + 8)), x;
        x = _mm256_set1_ps(a[0]);          c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_set1_ps(a[p->sam]);     c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_set1_ps(a[2 * p->sam]); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_set1_ps(a[3 * p->sam]); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_set1_ps(a[4 * p->sam]); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_set1_ps(a[5 * p->sam]); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    float *c = p->C + (size_t)i * p->N + j;
    __m256 out[ROWS][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int r = 0; r < ROWS; r++) {
        _mm256_storeu_ps(c + (size_t)r * p->N, out[r][0]);
        _mm256_storeu_ps(c + (size_t)r * p->N + 8, out[r][1]);
    }
}

/* Rows i .. i+rows-1 (rows <= ROWS), columns j .. j+7: the edges. */
static void avx2_edge_block(const product *p, int i, int rows, int j)
{
    __m256 c[ROWS];
    for (int r = 0; r < rows; r++) c[r] = _mm256_setzero_ps();
    for (int k = 0; k < p->K; k++) {
        __m256 b0 = _mm256_loadu_ps(B_(p, k, j));
        for (int r = 0; r < rows; r++)
            c[r] = _mm256_fmadd_ps(_mm256_set1_ps(A_(p, i + r, k)), b0, c[r]);
    }
    for (int r = 0; r < rows; r++) _mm256_storeu_ps(p->C + (size_t)(i + r) * p->N + j, c[r]);
}

/* Rows i .. i+rows-1, the last N - j < 8 columns: lanes past the last column load zeros and are
   not stored, and each stored lane is summed as every other element is. (The policy's widths,
   66 and head size 11, end in such columns; computed one at a time they cost as much as the
   rest of the product.) */
static void avx2_last_columns(const product *p, int i, int rows, int j)
{
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(p->N - j),
                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 c[ROWS];
    for (int r = 0; r < rows; r++) c[r] = _mm256_setzero_ps();
    for (int k = 0; k < p->K; k++) {
        __m256 b0 = _mm256_maskload_ps(B_(p, k, j), mask);
        for (int r = 0; r < rows; r++)
            c[r] = _mm256_fmadd_ps(_mm256_set1_ps(A_(p, i + r, k)), b0, c[r]);
    }
    for (int r = 0; r < rows; r++) _mm256_maskstore_ps(p->C + (size_t)(i + r) * p->N + j, mask, c[r]);
}

static void avx2_product(const product *p)
{
    for (int i = 0; i < p->M; i += ROWS) {
        int rows = p->M - i < ROWS ? p->M - i : ROWS, j = 0;
        if (rows == ROWS)
            for (; j + 16 <= p->N; j += 16) avx2_full_block(p, i, j);
        for (; j + 8 <= p->N; j += 8) avx2_edge_block(p, i, rows, j);
        if (j < p->N) avx2_last_columns(p, i, rows, j);
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

/* B[k][j] = B[k * sbk + j * sbn] copied into rows of N adjacent floats, so that they load as
   vectors. Copying changes no value, so the product's bits are the same as from adjacent rows. */
static const float *as_rows(const float *B, ptrdiff_t sbk, ptrdiff_t sbn, int K, int N, float *rows)
{
    for (int j = 0; j < N; j++)
        for (int k = 0; k < K; k++) rows[(size_t)k * N + j] = B[k * sbk + j * sbn];
    return rows;
}

/* Returns 0, or -1 when the scratch rows for a strided B cannot be allocated (C is then unset). */
int tiny_bmm(int nb1, int nb2, int M, int N, int K,
             const float *A, ptrdiff_t sa1, ptrdiff_t sa2, ptrdiff_t sam, ptrdiff_t sak,
             const float *B, ptrdiff_t sb1, ptrdiff_t sb2, ptrdiff_t sbk, ptrdiff_t sbn, float *C)
{
    int path = tiny_matmul_path(forced);
    float *rows = NULL;
    if (sbn != 1 && K > 0 && N > 0 && !(rows = malloc(sizeof(float) * (size_t)K * N))) return -1;
    for (int b1 = 0; b1 < nb1; b1++)
        for (int b2 = 0; b2 < nb2; b2++) {
            const float *b = B + b1 * sb1 + b2 * sb2;
            product p = {M, N, K, A + b1 * sa1 + b2 * sa2, sam, sak,
                         rows ? as_rows(b, sbk, sbn, K, N, rows) : b, rows ? N : sbk,
                         C + ((size_t)b1 * nb2 + b2) * M * N};
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
            if (path == 2) { avx2_product(&p); continue; }
#endif
            scalar_product(&p);
        }
    free(rows);
    return 0;
}
