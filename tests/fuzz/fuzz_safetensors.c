/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader (built by
 * scripts/fuzz.sh).
 *
 * Feeds the bytes to st_parse as a whole file, twice: in libFuzzer's buffer
 * (ASan's redzones around it) and in a copy that ends at an inaccessible page
 * (guard.h; jansson is not instrumented). Whatever it accepts, every tensor
 * must be findable by name and, if float, readable inside the buffer;
 * whatever it refuses must come with a one-line message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"       /* fuzz_at_guard */
#include "store/safetensors.h" /* st_parse, st_find, st_read_f32 */

static void check(const uint8_t *data, size_t size)
{
	struct st_file f;
	struct diag d = {0};

	memset(&f, 0, sizeof f);
	if (st_parse(&f, data, size, "fuzz", &d) != ST_OK) {
		if (d.st == ST_OK || d.msg[0] == '\0' || strchr(d.msg, '\n') != NULL)
			abort(); /* a refusal without a one-line message */
		return;
	}
	for (size_t i = 0; i < f.n; i++) {
		const struct st_tensor *t = &f.t[i];
		size_t esize = strcmp(t->dtype, "F64") == 0 ? 8 : 4, count = (t->end - t->begin) / esize;
		float *out;

		if (st_find(&f, t->name) != t || t->end > f.data_len)
			abort(); /* names are unique and tensors lie inside the data region */
		if (strcmp(t->dtype, "F32") != 0 && strcmp(t->dtype, "F64") != 0)
			continue;
		out = malloc(count * sizeof *out + 1);
		if (out != NULL && st_read_f32(&f, t, out, count, "fuzz", &d) != ST_OK)
			abort(); /* a float tensor that was accepted must be readable */
		free(out);
	}
	free(f.t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(data, size);
	check(fuzz_at_guard(data, size), size);
	return 0;
}
