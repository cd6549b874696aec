/*
 * faultshim.c - an LD_PRELOAD library that makes one process misbehave the way a
 * sick cluster node does, for the reliability tests (tests/failures/hangs.sh,
 * tests/failures/signals.sh, tests/failures/bounds.sh).
 * Nothing in ddptrain knows about it. Set in the environment of the process:
 *
 *   DDPT_SHIM_STALL=first-collective  the first MPI_Allreduce (the ranks' agreement
 *                                     on the options) never returns
 *   DDPT_SHIM_STALL=finalize          MPI_Finalize never returns
 *   DDPT_SHIM_STALL=first-sgemm       the first cblas_sgemm never returns (as OpenBLAS's
 *                                     allocator retries forever under a tight ulimit -v):
 *                                     a rank stuck in computation, in no collective
 *   DDPT_SHIM_STALL=worker-sgemm      the first cblas_sgemm on a thread other than the
 *                                     process's first never returns (--mode=dp: a replica
 *                                     stuck in a product on its worker thread)
 *   DDPT_SHIM_STOP=first-collective   a second into its first MPI_Allreduce (waiting, as for
 *                                     a slow rank), the process stops itself (SIGSTOP, as
 *                                     kill -STOP or a suspended job would); SIGCONT continues it
 *   DDPT_SHIM_SIGNAL=N[@R]            the N-th cblas_sgemm (the CPU backend's products, in
 *                                     forward and backward; on world rank R, default every rank)
 *                                     raises SIGUSR1 first: a stop signal that lands at a known
 *                                     point of a step (tests/failures/stops.sh)
 *   DDPT_SHIM_SLOW_FSYNC=SECONDS      every fsync takes that long (a slow file system)
 *   DDPT_SHIM_SLOW_FSYNC_FIRST=N      ... only the first N fsyncs of the process do (the
 *                                     first file written is slow, the rest are not)
 *   DDPT_SHIM_SLOW_WRITE=SECONDS      every fwrite to a regular file takes that much longer
 *                                     (a slow file system that keeps up: a big file whose
 *                                     write goes on)
 *   DDPT_SHIM_SLOW_SGEMM=SECONDS      every cblas_sgemm takes that much longer (a slow
 *                                     machine: an evaluation of many batches)
 *   DDPT_SHIM_SLOW_INIT=SECONDS       MPI_Init_thread takes that much longer (a slow start)
 *   DDPT_SHIM_NO_SHARED_WINDOW=1      MPI_Win_allocate_shared fails with MPI_ERR_NO_MEM, as
 *                                     it does where /dev/shm is small (a container); set it
 *                                     on every rank of a node (the call is collective)
 *   DDPT_SHIM_FILL_SHM=KIB            once MPI_Win_allocate_shared has made its window (whose
 *                                     pages tmpfs gives only when touched), the node's rank 0
 *                                     fills /dev/shm up to KIB KiB free, as another job would
 *                                     (set it on every rank of the node: a barrier follows)
 *   DDPT_SHIM_FAIL_SHARED_MAP=BYTES   mmap of a file, shared, of BYTES or more fails with
 *                                     ENOMEM, as under ulimit -v: set on one rank, Open MPI's
 *                                     osc/sm fails there only, after creating its backing file
 *                                     (on the node's rank 0) or while mapping it (the others)
 *   DDPT_SHIM_FLIP_WEIGHT=K[:BIT]     the K-th layer forward of this process (counted from 1:
 *                                     the K-th cblas_sgemm of the form y = x w^T, whose w is a
 *                                     layer's weight in place, as the CPU backend, the fake GPU
 *                                     and the CUDA stub's cuBLAS call it; a bf16 product's
 *                                     rounded copy is not) first flips bit BIT (default 0, the
 *                                     lowest of the mantissa) of that weight's first element:
 *                                     a rank whose memory or arithmetic went wrong once (the
 *                                     replica check, tests/failures/replicas.sh)
 */
#define _GNU_SOURCE
#include <cblas.h>       /* cblas_sgemm */
#include <dlfcn.h>       /* dlsym, RTLD_NEXT */
#include <errno.h>       /* ENOMEM */
#include <fcntl.h>       /* open, posix_fallocate */
#include <stdio.h>       /* snprintf */
#include <sys/statvfs.h> /* statvfs */
#include <mpi.h>         /* PMPI_Allreduce, PMPI_Finalize */
#include <signal.h>      /* raise, SIGSTOP, SIGUSR1 */
#include <stdatomic.h>   /* atomic_long: dp's replicas multiply on threads of their own */
#include <stdint.h>      /* uint32_t */
#include <stdlib.h>      /* getenv, atof, strtol */
#include <string.h>      /* strcmp */
#include <sys/mman.h>    /* MAP_SHARED, MAP_FAILED */
#include <sys/stat.h>    /* fstat, S_ISREG */
#include <sys/syscall.h> /* SYS_mmap, SYS_gettid */
#include <time.h>        /* nanosleep */
#include <unistd.h>      /* pause, syscall */

static int stall_at(const char *what)
{
	const char *v = getenv("DDPT_SHIM_STALL");

	return v != NULL && strcmp(v, what) == 0;
}

/* Sleep the seconds an environment variable says, signals or not. */
static void sleep_for(const char *name)
{
	const char *v = getenv(name);
	double s = v != NULL ? atof(v) : 0.0;
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	if (s > 0)
		while (nanosleep(&ts, &ts) != 0)
			;
}

static void stall(void)
{
	for (;;)
		pause(); /* until a signal ends the process */
}

int MPI_Allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
	static int calls;

	const char *stop = getenv("DDPT_SHIM_STOP");

	if (calls == 0 && stop != NULL && strcmp(stop, "first-collective") == 0) {
		struct timespec second = {1, 0};

		while (nanosleep(&second, &second) != 0)
			;
		raise(SIGSTOP);
	}
	if (calls++ == 0 && stall_at("first-collective"))
		stall();
	return PMPI_Allreduce(in, out, count, type, op, comm);
}

int MPI_Finalize(void)
{
	if (stall_at("finalize"))
		stall();
	return PMPI_Finalize();
}

int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *base,
			    MPI_Win *win)
{
	const char *v = getenv("DDPT_SHIM_NO_SHARED_WINDOW");

	const char *fill = getenv("DDPT_SHIM_FILL_SHM");
	int rc, rank = 0;

	if (v != NULL && strcmp(v, "1") == 0)
		return MPI_ERR_NO_MEM;
	rc = PMPI_Win_allocate_shared(size, disp_unit, info, comm, base, win);
	if (rc == MPI_SUCCESS && fill != NULL && PMPI_Comm_rank(comm, &rank) == MPI_SUCCESS && rank == 0) {
		struct statvfs vfs;
		char path[64];
		int fd;

		snprintf(path, sizeof path, "/dev/shm/faultshim-filler.%d", (int)getpid());
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0 && statvfs("/dev/shm", &vfs) == 0) {
			unsigned long long avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
			unsigned long long keep = strtoull(fill, NULL, 10) * 1024ULL;

			if (avail > keep)
				(void)posix_fallocate(fd, 0, (off_t)(avail - keep));
		}
		if (fd >= 0)
			close(fd);
	}
	if (rc == MPI_SUCCESS && fill != NULL)
		PMPI_Barrier(comm);
	return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
	sleep_for("DDPT_SHIM_SLOW_INIT");
	return PMPI_Init_thread(argc, argv, required, provided);
}

/* The system call itself, not libc's mmap: nothing to look up, nothing that allocates. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	const char *v = getenv("DDPT_SHIM_FAIL_SHARED_MAP");

	if (v != NULL && fd >= 0 && (flags & MAP_SHARED) && len >= strtoull(v, NULL, 10)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* DDPT_SHIM_FLIP_WEIGHT: a layer's forward is C (out, n) = w^T-form A (in, out)^T times
 * B (in, n) in column-major terms, A the weight; row-major calls are the same product with
 * the operands swapped (the CPU backend's y (n, out) = x w^T: B = w, transposed). */
static void flip_weight(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
			const float *a, const float *b)
{
	static long forwards;
	const char *v = getenv("DDPT_SHIM_FLIP_WEIGHT");
	const float *w;
	char *end;
	long k;
	uint32_t bits;

	if (v == NULL)
		return;
	if (order == CblasColMajor && ta == CblasTrans && tb == CblasNoTrans)
		w = a;
	else if (order == CblasRowMajor && ta == CblasNoTrans && tb == CblasTrans)
		w = b;
	else
		return;
	k = strtol(v, &end, 10);
	if (++forwards != k)
		return;
	memcpy(&bits, w, sizeof bits);
	bits ^= 1u << (*end == ':' ? atoi(end + 1) : 0);
	memcpy((float *)w, &bits, sizeof bits); /* the weight itself: the caller's memory */
}

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
		 const blasint m, const blasint n, const blasint k, const float alpha, const float *a,
		 const blasint lda, const float *b, const blasint ldb, const float beta, float *c,
		 const blasint ldc)
{
	static void (*real)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
			    const blasint, const blasint, const blasint, const float, const float *,
			    const blasint, const float *, const blasint, const float, float *, const blasint);

	static atomic_long calls;
	const char *sig = getenv("DDPT_SHIM_SIGNAL"), *at = sig != NULL ? strchr(sig, '@') : NULL;
	const char *rank = getenv("OMPI_COMM_WORLD_RANK"); /* as mpirun starts the process */

	if (stall_at("first-sgemm") || (stall_at("worker-sgemm") && syscall(SYS_gettid) != getpid()))
		stall();
	sleep_for("DDPT_SHIM_SLOW_SGEMM");
	/* raise: the handler has run when it returns, so the stop lands exactly here */
	if (atomic_fetch_add(&calls, 1) + 1 == (sig != NULL ? atol(sig) : 0) &&
	    (at == NULL || atoi(at + 1) == (rank != NULL ? atoi(rank) : 0)))
		raise(SIGUSR1);
	flip_weight(order, ta, tb, a, b);
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "cblas_sgemm");
	real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

size_t fwrite(const void *buf, size_t size, size_t n, FILE *f)
{
	static size_t (*real)(const void *, size_t, size_t, FILE *);
	struct stat sb;

	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "fwrite");
	if (getenv("DDPT_SHIM_SLOW_WRITE") != NULL && fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode))
		sleep_for("DDPT_SHIM_SLOW_WRITE");
	return real(buf, size, n, f);
}

int fsync(int fd)
{
	static int (*real)(int);
	static long calls;
	const char *first = getenv("DDPT_SHIM_SLOW_FSYNC_FIRST");

	if (real == NULL)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	if (first == NULL || calls++ < atol(first))
		sleep_for("DDPT_SHIM_SLOW_FSYNC");
	return real(fd);
}
