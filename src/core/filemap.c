/* filemap.c - mapping an input file read-only. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/filemap.h"
#include "core/signals.h"

enum status filemap_open(const char *path, const char *what, size_t min_len, const char *kind,
			 void **map, size_t *len, struct diag *d)
{
	struct stat sb;
	int fd;

	*map = NULL;
	*len = 0;
	/* O_NONBLOCK: opening a FIFO for reading would wait for a writer; it is refused below. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return diag_errno(d, errno, "%s", what);
	if (fstat(fd, &sb) != 0) {
		int e = errno;

		close(fd);
		return diag_errno(d, e, "%s", what);
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return diag_set(d, ST_RUNTIME, "%s: not a regular file", what);
	}
	/* Checked before mmap, which refuses a length of 0. */
	if ((size_t)sb.st_size < min_len) {
		close(fd);
		return diag_set(d, ST_RUNTIME, "%s: too short to be a %s file (%zu bytes)", what, kind,
				(size_t)sb.st_size);
	}
	*map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (*map == MAP_FAILED) {
		*map = NULL;
		return diag_errno(d, errno, "%s: mmap", what);
	}
	*len = (size_t)sb.st_size;
	signals_map_add(*map, *len, what); /* names the file if it is truncated under us (SIGBUS) */
	return ST_OK;
}

void filemap_close(void *map, size_t len)
{
	if (map != NULL) {
		signals_map_remove(map);
		munmap(map, len);
	}
}
