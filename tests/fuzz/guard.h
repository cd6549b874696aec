/*
 * guard.h - for the fuzz targets: a copy of the input that ends exactly where
 * an inaccessible page begins.
 *
 * ASan sees reads past libFuzzer's buffer only in instrumented code and in
 * the libc functions it intercepts; strtoull is not one of them, nor is
 * anything in jansson. A read past this copy faults wherever it happens
 * (this is how the old .npy shape scanner's overread was found).
 */
#ifndef DDPT_FUZZ_GUARD_H
#define DDPT_FUZZ_GUARD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The input copied to end at a PROT_NONE page; valid until the next call. */
static const uint8_t *fuzz_at_guard(const uint8_t *data, size_t size)
{
	static uint8_t *region;
	static size_t cap; /* accessible bytes before the guard page */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (region == NULL || size > cap) {
		if (region != NULL)
			munmap(region, cap + page);
		cap = (size / page + 1) * page;
		region = mmap(NULL, cap + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (region == MAP_FAILED || mprotect(region + cap, page, PROT_NONE) != 0)
			abort();
	}
	memcpy(region + cap - size, data, size);
	return region + cap - size;
}

#endif
