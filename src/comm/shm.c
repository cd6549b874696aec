/*
 * shm.c - the node-local all-reduce through a shared-memory window (see shm.h
 * for the why, the ordering and the numerics).
 */
#include <dirent.h>       /* opendir: the backing files left behind */
#include <limits.h>       /* PATH_MAX */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>     /* madvise: MADV_POPULATE_WRITE */
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>       /* sysconf, access, unlink */

#include "core/half.h"  /* half_narrow, half_widen, half_sum: the 16-bit wire */
#include "core/signals.h" /* signals_map_note: a SIGBUS in the window names it */
#include "core/vmspace.h" /* vmspace_used, vmspace_limit: ulimit -v */
#include "comm/shm.h"
#include "comm/world.h" /* world_mpi_error */

#define LINE 64               /* bytes: one counter per cache line */
#define TILE 2048             /* floats summed at a time (8 KiB, stays in L1) */
/* Open MPI's osc/sm segment beyond the ranks' parts: a page and its own state, a few
 * hundred bytes per rank (64 KiB covers SHM_RANKS ranks). */
#define OSC_SM_EXTRA (64 * 1024)
#define MIB (1024.0 * 1024.0)

static size_t tail_offset(size_t n)
{
	return (n * sizeof(float) + LINE - 1) / LINE * LINE;
}

/* Bytes of one rank's part of the window: its floats and its two counters. */
static size_t part_bytes(size_t n)
{
	return tail_offset(n) + 2 * LINE;
}

/* Bytes of the ranks' parts in Open MPI's segment (each on its own pages: noncontig). */
static size_t parts_bytes(int ranks, size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (size_t)ranks * ((part_bytes(n) + page - 1) / page * page);
}

/* The value of `key` in an Open MPI MCA parameter file ("key = value" lines, '#'
 * comments), copied to out; 0 if the file does not set it. */
static int param_file_value(const char *file, const char *key, char *out, size_t len)
{
	char line[PATH_MAX + 128];
	size_t klen = strlen(key);
	int found = 0;
	FILE *f = fopen(file, "r");

	while (f != NULL && fgets(line, sizeof line, f) != NULL) {
		char *p = line + strspn(line, " \t"), *end;

		if (strncmp(p, key, klen) != 0 || strchr(" \t=", p[klen]) == NULL)
			continue;
		p += klen + strspn(p + klen, " \t");
		if (*p++ != '=')
			continue;
		p += strspn(p, " \t");
		end = p + strcspn(p, "\r\n");
		while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		snprintf(out, len, "%.*s", (int)(end - p), p); /* a later line wins, as in Open MPI */
		found = 1;
	}
	if (f != NULL)
		fclose(f);
	return found;
}

/* The directory Open MPI's osc/sm puts the window's backing file in: its
 * osc_sm_backing_directory as Open MPI reads it (the environment, which mpirun --mca also
 * sets, over the parameter files), else /dev/shm if it may write there, else Open MPI's
 * session directory, as osc/sm chooses (Open MPI 4.1: the node's first rank's own
 * directory under the job family's, which mpirun names in the environment; the family's
 * is on the same file system and is what is checked). "" when none says (another MPI or
 * launcher, no /dev/shm). Not read through MPI_T: its
 * MPI_T_init_thread registers every MCA component, 0.21 s per call, which was the whole of
 * the shared-memory all-reduce's extra start-up (issue 30). The check it serves is a
 * forecast; shm_init's taking of the pages is the authority. */
static void backing_dir(char *dir, size_t len)
{
	static const char key[] = "osc_sm_backing_directory";
	const char *env = getenv("OMPI_MCA_osc_sm_backing_directory");
	const char *files = getenv("OMPI_MCA_mca_base_param_files");
	char list[2 * PATH_MAX], *save = NULL;

	const char *session = getenv("OMPI_MCA_orte_jobfam_session_dir");

	if (access("/dev/shm", W_OK) == 0)
		snprintf(dir, len, "/dev/shm");
	else
		snprintf(dir, len, "%s", session != NULL ? session : "");
	if (env != NULL && env[0] != '\0') {
		snprintf(dir, len, "%s", env);
		return;
	}
	/* Open MPI's default list: the user's file before the system's (the first that sets
	 * the key wins). */
	if (files != NULL && files[0] != '\0')
		snprintf(list, sizeof list, "%s", files);
	else
		snprintf(list, sizeof list, "%s/.openmpi/mca-params.conf:/etc/openmpi/openmpi-mca-params.conf",
			 getenv("HOME") != NULL ? getenv("HOME") : "/nonexistent");
	for (char *f = strtok_r(list, ":", &save); f != NULL; f = strtok_r(NULL, ":", &save)) {
		char v[PATH_MAX];

		if (param_file_value(f, key, v, sizeof v) && v[0] != '\0') {
			snprintf(dir, len, "%s", v);
			return;
		}
	}
}

/* Whether osc/sm can make the window's backing file in dir: a directory this process may
 * write, with an inode free. Open MPI 4.1 makes the file on the node's first rank alone,
 * and where that fails it leaves the others inside MPI_Win_allocate_shared (issue 34), so
 * this is asked before, on every rank. ST_RUNTIME with one line naming dir if not. */
static enum status dir_takes_file(const char *dir, struct diag *d)
{
	struct stat st;
	struct statvfs vfs;
	char why[128] = "";

	if (stat(dir, &st) != 0)
		snprintf(why, sizeof why, "%s", errno == ENOENT ? "it does not exist" : strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		snprintf(why, sizeof why, "it is not a directory");
	else if (access(dir, W_OK | X_OK) != 0) /* what osc/sm's open(O_CREAT) needs */
		snprintf(why, sizeof why, "%s", errno == EROFS ? "it is read-only" : strerror(errno));
	/* f_files 0: a file system without an inode count (nothing to run out of). Root may
	 * take the inodes reserved from others (f_ffree), a user only f_favail. */
	else if (statvfs(dir, &vfs) == 0 && vfs.f_files > 0 &&
		 (geteuid() == 0 ? vfs.f_ffree : vfs.f_favail) == 0)
		snprintf(why, sizeof why, "it has no free inodes (df -i)");
	if (why[0] == '\0')
		return ST_OK;
	return diag_set(d, ST_RUNTIME, "the shared-memory window's backing file cannot be made in %s: %s",
			dir, why);
}

enum status shm_fits(int local_size, size_t n, size_t later_bytes, struct diag *d)
{
	double window = (double)parts_bytes(local_size, n) + OSC_SM_EXTRA;
	char dir[PATH_MAX];
	struct statvfs vfs;
	double limit = vmspace_limit();
	enum status st;

	backing_dir(dir, sizeof dir);
	if (dir[0] != '\0' && (st = dir_takes_file(dir, d)) != ST_OK)
		return st;
	/* osc/sm refuses (on the rank that creates the file only) below the file's size + 5%. */
	if (dir[0] != '\0' && statvfs(dir, &vfs) == 0 &&
	    (double)vfs.f_bavail * (double)vfs.f_frsize < window * 1.05)
		return diag_set(d, ST_RUNTIME,
				"the shared-memory window needs %.1f MiB in %s, which has %.1f MiB free of %.1f MiB",
				window * 1.05 / MIB, dir, (double)vfs.f_bavail * (double)vfs.f_frsize / MIB,
				(double)vfs.f_blocks * (double)vfs.f_frsize / MIB);
	/* RLIMIT_AS counts the shared mapping; RLIMIT_DATA counts only private writable ones
	 * (since Linux 4.7; the window even shrinks it, the gradients leave the heap). */
	if (limit > 0) {
		double used = vmspace_used();

		if (used + window + (double)later_bytes > limit)
			return diag_set(d, ST_RUNTIME,
					"the %.1f MiB shared-memory window%s%s and the %.1f MiB training still maps do not fit in the address-space limit (ulimit -v %.0f, %.1f MiB of %.1f MiB in use)",
					window / MIB, dir[0] != '\0' ? " in " : "", dir,
					(double)later_bytes / MIB, limit / 1024.0, used / MIB, limit / MIB);
	}
	return ST_OK;
}

/* The rank in MPI_COMM_WORLD of local's rank r (MPI_UNDEFINED if MPI does not say). */
static int world_rank_of(MPI_Comm local, int r)
{
	MPI_Group lg, wg;
	int out = MPI_UNDEFINED;

	if (MPI_Comm_group(local, &lg) != MPI_SUCCESS)
		return MPI_UNDEFINED;
	if (MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS) {
		(void)MPI_Group_translate_ranks(lg, 1, &r, wg, &out);
		(void)MPI_Group_free(&wg);
	}
	(void)MPI_Group_free(&lg);
	return out;
}

/* After a failed MPI_Win_allocate_shared: remove the backing file Open MPI 4.1's osc/sm
 * may have left, "osc_sm.HOST.JOBID.VPID.CID" in its directory, VPID the world rank of the
 * node's rank 0 (which creates it). osc/sm leaves it where mmap fails after ftruncate
 * (RLIMIT_AS) on that rank, and until the end of the job where another rank fails to map
 * it; a mapping outlives the name, so any rank may remove it. Only a file of ours, of this
 * window's size (or empty: ftruncate failed), is removed. */
static void remove_leftover(MPI_Comm local, int ranks, size_t n)
{
	size_t lo = parts_bytes(ranks, n), hi = lo + OSC_SM_EXTRA;
	int vpid = world_rank_of(local, 0);
	char dir[PATH_MAX], path[PATH_MAX + 256], mark[32];
	struct dirent *e;
	DIR *dp;

	backing_dir(dir, sizeof dir);
	if (dir[0] == '\0' || vpid == MPI_UNDEFINED || (dp = opendir(dir)) == NULL)
		return;
	snprintf(mark, sizeof mark, ".%d.", vpid);
	while ((e = readdir(dp)) != NULL) {
		const char *cid = strrchr(e->d_name, '.');
		size_t end = cid != NULL ? (size_t)(cid - e->d_name) + 1 : 0; /* after ".VPID." */
		struct stat st;

		if (strncmp(e->d_name, "osc_sm.", 7) != 0 || cid[1] == '\0' ||
		    strspn(cid + 1, "0123456789") != strlen(cid + 1) || end < 7 + strlen(mark) ||
		    strncmp(e->d_name + end - strlen(mark), mark, strlen(mark)) != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    (st.st_size == 0 || ((size_t)st.st_size >= lo && (size_t)st.st_size <= hi)))
			(void)unlink(path);
	}
	closedir(dp);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Take this rank's part of the window (its pages in the backing file) now, and name the
 * whole window for the SIGBUS handler. 1 on success; 0 with *why saying what failed. A
 * kernel without MADV_POPULATE_WRITE (before 5.14) takes the pages as they are touched,
 * as before; the SIGBUS handler then names the window. */
static int populate(struct shm *s, char *why, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), part = part_bytes(s->n);
	char *lo = (char *)s->seg[0], *hi = (char *)s->seg[0] + part, dir[PATH_MAX];
	char *start = (char *)((uintptr_t)s->mine / page * page);
	char *end = (char *)(((uintptr_t)s->mine + part + page - 1) / page * page);
	struct statvfs vfs;
	int e;

	backing_dir(dir, sizeof dir);
	for (int q = 1; q < s->size; q++) {
		if ((char *)s->seg[q] < lo)
			lo = (char *)s->seg[q];
		if ((char *)s->seg[q] + part > hi)
			hi = (char *)s->seg[q] + part;
	}
	signals_map_note(lo, (size_t)(hi - lo), "the shared-memory all-reduce's window",
			 "a page of it could not be had: /dev/shm (or osc_sm_backing_directory) filled up after the start (df /dev/shm); DDPTRAIN_ALLREDUCE=mpi needs no window");
	s->mapped = lo;
	if (madvise(start, (size_t)(end - start), MADV_POPULATE_WRITE) == 0)
		return 1;
	e = errno;
	if (e == EINVAL) /* an older kernel: nothing taken, nothing lost */
		return 1;
	if (dir[0] != '\0' && statvfs(dir, &vfs) == 0)
		snprintf(why, len, "the shared-memory window's %.1f MiB in %s could not be had (%s): it has %.1f MiB free of %.1f MiB",
			 (double)(end - start) / MIB, dir, e == EFAULT ? "no space left" : strerror(e),
			 (double)vfs.f_bavail * (double)vfs.f_frsize / MIB,
			 (double)vfs.f_blocks * (double)vfs.f_frsize / MIB);
	else
		snprintf(why, len, "the shared-memory window's %.1f MiB could not be had (%s)",
			 (double)(end - start) / MIB, e == EFAULT ? "no space left" : strerror(e));
	return 0;
}

enum status shm_init(struct shm *s, MPI_Comm local, size_t n, struct diag *d)
{
	MPI_Info info;
	void *base = NULL;
	size_t tail = tail_offset(n);
	int rc;

	memset(s, 0, sizeof *s);
	s->win = MPI_WIN_NULL;
	if ((rc = MPI_Comm_rank(local, &s->rank)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_size(local, &s->size)) != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Comm_rank/MPI_Comm_size(node)");
	if (s->size > SHM_RANKS) /* the same answer on every rank of the node */
		return diag_set(d, ST_RUNTIME, "shared-memory all-reduce: %d ranks on one node, at most %d",
				s->size, SHM_RANKS);
	s->n = n;
	/* Each rank's buffer on its own pages (near its own core where memory is NUMA). Only a
	 * hint: where MPI refuses it, the window is had without. */
	if (MPI_Info_create(&info) != MPI_SUCCESS)
		info = MPI_INFO_NULL;
	else if (MPI_Info_set(info, "alloc_shared_noncontig", "true") != MPI_SUCCESS)
		(void)MPI_Info_free(&info); /* sets MPI_INFO_NULL */
	rc = MPI_Win_allocate_shared((MPI_Aint)part_bytes(n), 1, info, local, &base, &s->win);
	if (info != MPI_INFO_NULL)
		(void)MPI_Info_free(&info); /* failing, it leaks a hint: nothing to report */
	if (rc != MPI_SUCCESS) {
		s->win = MPI_WIN_NULL;
		remove_leftover(local, s->size, n);
		return world_mpi_error(d, rc, "MPI_Win_allocate_shared(gradients)");
	}
	for (int q = 0; q < s->size; q++) {
		MPI_Aint bytes;
		int unit;
		void *p;

		rc = MPI_Win_shared_query(s->win, q, &bytes, &unit, &p);
		if (rc != MPI_SUCCESS) {
			shm_free(s);
			return world_mpi_error(d, rc, "MPI_Win_shared_query(gradients)");
		}
		s->seg[q] = p;
		s->ready[q] = (_Atomic uint64_t *)((char *)p + tail);
		s->done[q] = (_Atomic uint64_t *)((char *)p + tail + LINE);
	}
	s->mine = s->seg[s->rank];
	s->yield = s->size > (int)sysconf(_SC_NPROCESSORS_ONLN);
	/* The window's file is made with ftruncate: its pages are taken when first touched,
	 * and where /dev/shm has filled since shm_fits looked, that touch is a SIGBUS. Take
	 * them all now, each rank its own part, so a shortage is an error here, agreed on the
	 * node (every rank leaves the window, a collective, together). */
	{
		char why[PATH_MAX + 256] = "";
		int ok = populate(s, why, sizeof why), all = 0;

		rc = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, local);
		if (rc != MPI_SUCCESS || !all) {
			shm_free(s);
			if (rc != MPI_SUCCESS)
				return world_mpi_error(d, rc, "MPI_Allreduce(shared-memory window's pages)");
			if (!ok)
				return diag_set(d, ST_RUNTIME, "%s", why);
			return diag_set(d, ST_RUNTIME, "the shared-memory window's pages: another rank of this node could not have its part");
		}
	}
	atomic_store(s->ready[s->rank], 0);
	atomic_store(s->done[s->rank], 0);
	/* Nobody reads a counter before its owner has set it. */
	rc = MPI_Barrier(local);
	if (rc != MPI_SUCCESS) {
		shm_free(s);
		return world_mpi_error(d, rc, "MPI_Barrier(shared-memory all-reduce)");
	}
	return ST_OK;
}

/* This rank's slice of range (off, n): [*lo, *hi). */
static void slice(const struct shm *s, size_t off, size_t n, size_t *lo, size_t *hi)
{
	*lo = off + (size_t)s->rank * n / (size_t)s->size;
	*hi = off + (size_t)(s->rank + 1) * n / (size_t)s->size;
}

/* Element i (counted in the buffer, off <= i) of the range from off in rank q's buffer:
 * floats, or 16 bits from the range's start. */
static char *at(const struct shm *s, int q, size_t off, size_t i, enum comm_wire t)
{
	if (t == COMM_WIRE_F32)
		return (char *)(s->seg[q] + i);
	return (char *)(s->seg[q] + off) + (i - off) * sizeof(uint16_t);
}

/* Write this rank's [lo, hi) of the range from off into every other rank's buffer. */
static void copy_out(struct shm *s, size_t off, size_t lo, size_t hi, enum comm_wire t)
{
	size_t e = t == COMM_WIRE_F32 ? sizeof(float) : sizeof(uint16_t);

	for (int q = 0; q < s->size; q++)
		if (q != s->rank)
			memcpy(at(s, q, off, lo, t), at(s, s->rank, off, lo, t), (hi - lo) * e);
}

/* Add [lo, hi) of the range from off over every rank, in rank order, and write the sum into
 * every rank's buffer (everywhere: 1, only into this rank's own: 0). */
static void add_slice(struct shm *s, size_t off, size_t lo, size_t hi, int everywhere,
		      enum comm_wire type)
{
	const int p = s->size;

	if (type != COMM_WIRE_F32) { /* 16 bits: each partial sum rounded */
		uint16_t t[TILE];

		for (size_t a = lo; a < hi; a += TILE) {
			size_t len = hi - a < TILE ? hi - a : TILE;

			memcpy(t, at(s, 0, off, a, type), len * sizeof *t);
			for (int q = 1; q < p; q++)
				half_sum(t, (const uint16_t *)at(s, q, off, a, type), len, comm_wire_half(type));
			for (int q = 0; q < p; q++)
				if (everywhere || q == s->rank)
					memcpy(at(s, q, off, a, type), t, len * sizeof *t);
		}
		return;
	}
	float t[TILE];

	for (size_t a = lo; a < hi; a += TILE) {
		size_t len = hi - a < TILE ? hi - a : TILE;
		const float *src = s->seg[0] + a;

		for (size_t j = 0; j < len; j++)
			t[j] = src[j];
		for (int q = 1; q < p; q++) {
			src = s->seg[q] + a;
			for (size_t j = 0; j < len; j++)
				t[j] += src[j];
		}
		for (int q = 0; q < p; q++)
			if (everywhere || q == s->rank)
				memcpy(s->seg[q] + a, t, len * sizeof *t);
	}
}

/* Round buf[0..n) to 16 bits in place, into its first 2n bytes: forward by tiles, each read
 * whole before it is written (the writes stay below the floats still to read). */
static void narrow_in_place(float *buf, size_t n, enum comm_wire t)
{
	uint16_t h[TILE];

	for (size_t a = 0; a < n; a += TILE) {
		size_t len = n - a < TILE ? n - a : TILE;

		half_narrow(h, buf + a, len, comm_wire_half(t));
		memcpy((uint16_t *)buf + a, h, len * sizeof *h);
	}
}

/* Widen elements [lo, hi) of 16-bit range buf back into its floats [lo, hi): backward by
 * tiles, each read whole before it is written (the writes reach only elements above it,
 * done already or not wanted). */
static void widen_in_place(float *buf, size_t lo, size_t hi, enum comm_wire t)
{
	uint16_t h[TILE];

	while (hi > lo) {
		size_t len = hi - lo < TILE ? hi - lo : TILE;

		hi -= len;
		memcpy(h, (uint16_t *)buf + hi, len * sizeof *h);
		half_widen(buf + hi, h, len, comm_wire_half(t));
	}
}

/* Add this rank's share of queued all-reduce k on its node (and start it on the ring). */
static void add_mine(struct shm *s, uint64_t k)
{
	const int slot = (int)(k % SHM_QUEUE);
	size_t off = s->q[slot].off, n = s->q[slot].n, lo, hi;
	enum comm_wire t = s->q[slot].type;
	struct diag ignore = {0};
	enum status st = ST_OK;

	if (s->q[slot].kind == RING_ALLREDUCE) {
		slice(s, off, n, &lo, &hi);
		add_slice(s, off, lo, hi, s->up == NULL, t);
		if (s->up != NULL) { /* every peer starts the same slices: same n, same size */
			struct ring_coll c = {at(s, s->rank, off, lo, t), hi - lo, RING_ALLREDUCE, t, NULL, NULL};

			st = ring_start_coll(s->up, &c, &ignore);
		}
	} else {
		size_t *plo = s->plo + (size_t)slot * (size_t)s->npeers;
		size_t *phi = s->phi + (size_t)slot * (size_t)s->npeers;

		for (int i = 0; i < s->npeers; i++) {
			plo[i] = s->q[slot].cuts[s->peer_world[i]];
			phi[i] = s->q[slot].cuts[s->peer_world[i] + 1];
			add_slice(s, off, off + plo[i], off + phi[i], 0, t);
		}
		if (s->up != NULL) {
			struct ring_coll c = {at(s, s->rank, off, off, t), n, RING_REDUCE_SCATTER, t, plo, phi};

			st = ring_start_coll(s->up, &c, &ignore);
		}
	}
	if (st != ST_OK)
		s->up_full = 1; /* more than RING_BUCKETS queued: shm_wait says so */
	if (s->up != NULL)
		s->q[slot].up_seq = s->up->started;
}

uint64_t shm_progress(struct shm *s)
{
	uint64_t all = UINT64_MAX, was = s->finished;

	while (s->added < s->started) {
		uint64_t k = s->added;
		int q;

		for (q = 0; q < s->size; q++)
			if (atomic_load_explicit(s->ready[q], memory_order_acquire) <= k)
				break;
		if (q < s->size)
			break;
		add_mine(s, k);
		s->added = k + 1;
	}
	if (s->up == NULL) {
		s->finished = s->added;
	} else {
		ring_progress(s->up);
		while (s->finished < s->added && s->up->finished >= s->q[s->finished % SHM_QUEUE].up_seq) {
			const int slot = (int)(s->finished % SHM_QUEUE);
			size_t lo, hi;

			if (s->q[slot].kind == RING_ALLREDUCE) {
				slice(s, s->q[slot].off, s->q[slot].n, &lo, &hi);
				copy_out(s, s->q[slot].off, lo, hi, s->q[slot].type);
			}
			s->finished++;
		}
	}
	if (s->finished != was)
		atomic_store_explicit(s->done[s->rank], s->finished, memory_order_release);
	for (int q = 0; q < s->size; q++) {
		uint64_t v = atomic_load_explicit(s->done[q], memory_order_acquire);

		all = v < all ? v : all;
	}
	/* Another rank cannot have added an all-reduce this one has not published. */
	s->complete = all;
	/* Complete everywhere: nobody reads or writes this rank's 16 bits any more. */
	for (; s->widened < all; s->widened++) {
		const int slot = (int)(s->widened % SHM_QUEUE);
		size_t lo = 0, hi = s->q[slot].n;

		if (s->q[slot].type == COMM_WIRE_F32)
			continue;
		if (s->q[slot].kind == RING_REDUCE_SCATTER) {
			lo = s->q[slot].cuts[s->peer_world[s->up != NULL ? s->up->rank : 0]];
			hi = s->q[slot].cuts[s->peer_world[s->up != NULL ? s->up->rank : 0] + 1];
		}
		widen_in_place(s->mine + s->q[slot].off, lo, hi, s->q[slot].type);
	}
	return all;
}

/* One turn of a wait. With more ranks on the node than cores, the rank waited for may
 * need this core: yield it after a while. Otherwise keep it (as Open MPI does): a rank
 * that yields to another process is off its core when its peer arrives, and with other
 * work on the node (measured: 2 busy loops beside 2 ranks) every step then waits for a
 * time slice -- 20000 ToyModel steps took 15-18 s yielding against 1 s for MPI's. */
static void spin(const struct shm *s, unsigned *i)
{
	if (s->yield && ++*i > 64) {
		sched_yield();
		return;
	}
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

enum status shm_peers(struct shm *s, MPI_Comm peers, int world_rank, struct diag *d)
{
	int rc, ok;

	s->npeers = 1;
	if (peers != MPI_COMM_NULL && (rc = MPI_Comm_size(peers, &s->npeers)) != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Comm_size(node peers)");
	s->peer_world = malloc((size_t)s->npeers * sizeof *s->peer_world);
	s->plo = malloc((size_t)SHM_QUEUE * (size_t)s->npeers * sizeof *s->plo);
	s->phi = malloc((size_t)SHM_QUEUE * (size_t)s->npeers * sizeof *s->phi);
	ok = s->peer_world != NULL && s->plo != NULL && s->phi != NULL;
	if (peers == MPI_COMM_NULL) {
		if (ok)
			s->peer_world[0] = world_rank;
		return ok ? ST_OK : diag_set(d, ST_RUNTIME, "comm: out of memory");
	}
	/* Every peer joins both calls, whatever its memory said. */
	rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, peers);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Allreduce(node peers)");
	if (!ok)
		return diag_set(d, ST_RUNTIME, "comm: out of memory (on this rank or a peer)");
	rc = MPI_Allgather(&world_rank, 1, MPI_INT, s->peer_world, 1, MPI_INT, peers);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Allgather(node peers)");
	return ST_OK;
}

enum status shm_start(struct shm *s, float *buf, size_t n, struct diag *d)
{
	return shm_start_coll(s, buf, n, RING_ALLREDUCE, NULL, COMM_WIRE_F32, d);
}

enum status shm_start_coll(struct shm *s, float *buf, size_t n, enum ring_kind kind,
			   const size_t *cuts, enum comm_wire type, struct diag *d)
{
	unsigned i = 0;

	if (buf < s->mine || buf + n > s->mine + s->n)
		return diag_set(d, ST_RUNTIME, "internal: shared-memory all-reduce outside the gradients");
	if (kind == RING_ALL_GATHER || (kind == RING_REDUCE_SCATTER && s->peer_world == NULL))
		return diag_set(d, ST_RUNTIME, "internal: no such shared-memory collective");
	while (s->started - s->complete >= SHM_QUEUE) { /* full: the others are behind */
		shm_progress(s);
		if (s->started - s->complete >= SHM_QUEUE)
			spin(s, &i);
	}
	s->q[s->started % SHM_QUEUE].off = (size_t)(buf - s->mine);
	s->q[s->started % SHM_QUEUE].n = n;
	s->q[s->started % SHM_QUEUE].kind = kind;
	s->q[s->started % SHM_QUEUE].type = type;
	s->q[s->started % SHM_QUEUE].cuts = cuts;
	if (type != COMM_WIRE_F32)
		narrow_in_place(buf, n, type);
	s->started++;
	/* The range is final: its writes happen before the others' reads. */
	atomic_store_explicit(s->ready[s->rank], s->started, memory_order_release);
	shm_progress(s);
	return ST_OK;
}

enum status shm_wait(struct shm *s, struct diag *d)
{
	return shm_wait_upto(s, s->started, d);
}

enum status shm_wait_upto(struct shm *s, uint64_t count, struct diag *d)
{
	unsigned i = 0;

	if (count > s->started)
		count = s->started;
	while (shm_progress(s) < count) {
		if (s->up_full)
			return diag_set(d, ST_RUNTIME, "internal: more than %d ring all-reduces queued",
					RING_BUCKETS);
		if (s->up != NULL && s->up->err != MPI_SUCCESS)
			return ring_wait(s->up, d); /* reports the MPI error */
		spin(s, &i);
	}
	return ST_OK;
}

void shm_free(struct shm *s)
{
	if (s->mapped != NULL) /* before the unmapping */
		signals_map_remove(s->mapped);
	s->mapped = NULL;
	if (s->win != MPI_WIN_NULL)
		(void)MPI_Win_free(&s->win); /* teardown: nobody to tell of a failure */
	s->win = MPI_WIN_NULL;
	s->mine = NULL;
	free(s->peer_world);
	free(s->plo);
	free(s->phi);
	s->peer_world = NULL;
	s->plo = s->phi = NULL;
}
