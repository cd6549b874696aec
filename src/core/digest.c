/* digest.c - SHA-256 over a list of buffers through OpenSSL's EVP interface. */
#include <openssl/evp.h>
#include <stdio.h>

#include "core/digest.h"

int digest_sha256_hex(const void *const *buf, const size_t *len, int n, char out[DIGEST_HEX])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;

	for (int i = 0; i < n && ok; i++)
		ok = EVP_DigestUpdate(ctx, buf[i], len[i]) == 1;
	ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1;
	EVP_MD_CTX_free(ctx);
	for (unsigned int i = 0; ok && i < mdlen; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
	return ok;
}
