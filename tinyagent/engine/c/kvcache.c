/* Storing a layer's new keys and values in the policy's key/value cache (policy.py's new_cache).

   The linear layer qkv gives each token one row [q | k | v] of 3 C floats. The cache holds, per
   episode and head, the values (L, hs) and the keys transposed, (hs, L), so that attention's
   products read both by rows. Written as torch slice assignments, the keys' store is a copy
   through strides that torch's generic copy walks slowly, and with the views that select q, k
   and v it is a dozen operators a layer for every token a rollout samples. Here it is one loop;
   a copy rounds nothing, so the bits are those of the assignments. Built by `pip install -e .`
   (setup.py) into tinyagent.engine._kernels, which tinyagent/engine/kvcache.py calls through bindings.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* Tokens t = 0 .. T-1 of episodes b = 0 .. B-1, whose rows [q | k | v] start at
   qkv + b * row_b + t * row_t, stored at positions pos + t of a cache of L positions for nh heads
   of size hs: keys[b][h][d][pos + t] and values[b][h][pos + t][d] (both contiguous). */
void kv_store(int B, int T, int nh, int hs, int L, int pos, const float *qkv, ptrdiff_t row_b,
              ptrdiff_t row_t, float *keys, float *values)
{
    int C = nh * hs;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            float *key = keys + ((size_t)b * nh + h) * hs * L + pos;
            float *value = values + ((size_t)b * nh + h) * L * hs + (size_t)pos * hs;
            for (int t = 0; t < T; t++) {
                const float *k = qkv + b * row_b + t * row_t + C + h * hs, *v = k + C;
                for (int d = 0; d < hs; d++) {
                    key[(size_t)d * L + t] = k[d];
                    value[(size_t)t * hs + d] = v[d];
                }
            }
        }
}

/* Episodes keep[0] < keep[1] < ... < keep[n-1] of a cache moved up to rows 0 .. n-1, in place,
   their first `length` positions only (attention reads no other): what indexing the cache with
   `keep` gives in its first n rows, without allocating a new cache and copying all L positions
   of every row. keep[j] >= j, so no row is overwritten before it has moved. */
void kv_compact(int n, const int64_t *keep, int nh, int hs, int L, int length, float *keys,
                float *values)
{
    size_t episode = (size_t)nh * hs * L;               /* floats per episode, in either */
    for (int j = 0; j < n; j++) {
        if (keep[j] == j) continue;
        const float *key = keys + keep[j] * episode, *value = values + keep[j] * episode;
        for (int r = 0; r < nh * hs; r++)               /* (nh, hs) rows of L positions */
            memcpy(keys + j * episode + (size_t)r * L, key + (size_t)r * L,
                   sizeof(float) * length);
        for (int h = 0; h < nh; h++)                    /* nh blocks of (L, hs) */
            memcpy(values + j * episode + (size_t)h * L * hs, value + (size_t)h * L * hs,
                   sizeof(float) * length * hs);
    }
}
