/*
 * filemap.h - a whole input file mapped read-only: the one way the .npy and
 * safetensors readers open their files, so both refuse the same things with
 * the same words (a missing file, a directory or device, a file too short
 * for its format). A FIFO is refused at once, not waited on; a mapped file is
 * named to the SIGBUS handler (signals.h), so a file truncated while mapped
 * ends the run with its name.
 */
#ifndef DDPT_FILEMAP_H
#define DDPT_FILEMAP_H

#include <stddef.h>

#include "core/status.h"

/* Map the regular file path (named `what` in messages: "--init: w.st"), which must hold
 * at least min_len bytes (else "too short to be a KIND file (N bytes)"). On success
 * *map and *len describe the mapping (release with filemap_close); on failure *map is
 * NULL and d says why (ST_RUNTIME). */
enum status filemap_open(const char *path, const char *what, size_t min_len, const char *kind,
			 void **map, size_t *len, struct diag *d);
/* Unmap; NULL is allowed. */
void filemap_close(void *map, size_t len);

#endif
