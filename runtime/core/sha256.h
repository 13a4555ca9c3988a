/* runtime/core/sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104):
 * the rendezvous's challenge and response (tcp.c) prove that a peer holds the
 * run's token without sending it. Valid C11 and C++ (tcp.c runs under the
 * CUDA transport too). */
#ifndef PG_SHA256_H
#define PG_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PG_SHA256_BYTES 32

typedef struct pg_sha256 {
    uint32_t h[8];          /* the chaining state */
    uint64_t bytes;         /* message bytes taken so far */
    unsigned char blk[64];  /* a partial block */
    size_t used;            /* its bytes */
} pg_sha256;

void pg_sha256_init(pg_sha256 *s);
void pg_sha256_add(pg_sha256 *s, const void *data, size_t n);
void pg_sha256_done(pg_sha256 *s, unsigned char out[PG_SHA256_BYTES]);
/* HMAC-SHA-256 of the n parts (concatenated) under key[klen]. */
void pg_hmac_sha256(const void *key, size_t klen, const void *const *parts, const size_t *lens, int n,
                    unsigned char out[PG_SHA256_BYTES]);
/* 1 when a and b (n bytes) are equal, in time independent of where they differ. */
int pg_equal_ct(const unsigned char *a, const unsigned char *b, size_t n);

#ifdef __cplusplus
}
#endif

#endif
