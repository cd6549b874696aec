/*
 * digest.h - SHA-256 (OpenSSL's libcrypto) over a list of buffers, as hex: the
 * checkpoint checksum and the data fingerprint.
 */
#ifndef DDPT_DIGEST_H
#define DDPT_DIGEST_H

#include <stddef.h>

#define DIGEST_HEX 65 /* 64 hex digits and a NUL */

/* SHA-256 of the concatenation of buf[0..n) (len[i] bytes each) into out as lowercase
 * hex; returns 0 if libcrypto failed. */
int digest_sha256_hex(const void *const *buf, const size_t *len, int n, char out[DIGEST_HEX]);

#endif
