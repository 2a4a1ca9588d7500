/* The policy's matrix products, with an order of summation this file fixes.

   C[b] = A[b] @ B[b] for row-major float32 (M, K) @ (K, N). Every element is summed over k in
   order, c = fmaf(a[i][k], b[k][j], c) for k = 0 .. K-1 from c = 0, whatever the shapes, the
   blocking or the CPU: the AVX2 path and the scalar remainder round alike (a fused multiply-add
   is rounded once, exactly as IEEE 754 says), so the bits depend on the operands alone. BLAS
   libraries choose their blocking and kernels by the CPU they find; this code chooses nothing.
   Built by `pip install -e .` (setup.py) and called through ctypes by tinyagent/matmul.py. */
#include <math.h>
#include <stddef.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#define ROWS 6

static void gemm1(int M, int N, int K, const float *A, const float *B, float *C)
{
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; i + ROWS <= M; i += ROWS) {
        int j = 0;
        for (; j + 16 <= N; j += 16) {
            __m256 c[ROWS][2];
            for (int r = 0; r < ROWS; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
            for (int k = 0; k < K; k++) {
                __m256 b0 = _mm256_loadu_ps(B + (size_t)k * N + j);
                __m256 b1 = _mm256_loadu_ps(B + (size_t)k * N + j + 8);
                for (int r = 0; r < ROWS; r++) {
                    __m256 a = _mm256_broadcast_ss(A + (size_t)(i + r) * K + k);
                    c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
                    c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
                }
            }
            for (int r = 0; r < ROWS; r++) {
                _mm256_storeu_ps(C + (size_t)(i + r) * N + j, c[r][0]);
                _mm256_storeu_ps(C + (size_t)(i + r) * N + j + 8, c[r][1]);
            }
        }
        for (; j + 8 <= N; j += 8) {
            __m256 c[ROWS];
            for (int r = 0; r < ROWS; r++) c[r] = _mm256_setzero_ps();
            for (int k = 0; k < K; k++) {
                __m256 b0 = _mm256_loadu_ps(B + (size_t)k * N + j);
                for (int r = 0; r < ROWS; r++)
                    c[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(A + (size_t)(i + r) * K + k), b0, c[r]);
            }
            for (int r = 0; r < ROWS; r++) _mm256_storeu_ps(C + (size_t)(i + r) * N + j, c[r]);
        }
        for (; j < N; j++)
            for (int r = 0; r < ROWS; r++) {
                float c = 0.0f;
                for (int k = 0; k < K; k++) c = fmaf(A[(size_t)(i + r) * K + k], B[(size_t)k * N + j], c);
                C[(size_t)(i + r) * N + j] = c;
            }
    }
    for (; i < M; i++) {
        int j = 0;
        for (; j + 8 <= N; j += 8) {
            __m256 c = _mm256_setzero_ps();
            for (int k = 0; k < K; k++)
                c = _mm256_fmadd_ps(_mm256_broadcast_ss(A + (size_t)i * K + k),
                                    _mm256_loadu_ps(B + (size_t)k * N + j), c);
            _mm256_storeu_ps(C + (size_t)i * N + j, c);
        }
        for (; j < N; j++) {
            float c = 0.0f;
            for (int k = 0; k < K; k++) c = fmaf(A[(size_t)i * K + k], B[(size_t)k * N + j], c);
            C[(size_t)i * N + j] = c;
        }
    }
#else
    for (; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int k = 0; k < K; k++) c = fmaf(A[(size_t)i * K + k], B[(size_t)k * N + j], c);
            C[(size_t)i * N + j] = c;
        }
#endif
}

void tiny_bmm(int batch, int M, int N, int K, const float *A, const float *B, float *C)
{
    for (int b = 0; b < batch; b++)
        gemm1(M, N, K, A + (size_t)b * M * K, B + (size_t)b * K * N, C + (size_t)b * M * N);
}
