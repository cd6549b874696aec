/*
 * vmspace.h - this process's address space: how much of it is mapped and the limit
 * on it (RLIMIT_AS, ulimit -v, which Slurm and PBS copy from the submitting shell).
 *
 * Read by the start-up checks that must know before training whether what is still to
 * be mapped fits: the shared-memory window (comm/shm.c) and the BLAS library's work
 * buffer, the loader's threads and buffers (run/preflight.c). It is not an allocator
 * and holds no state.
 */
#ifndef DDPT_VMSPACE_H
#define DDPT_VMSPACE_H

#include <stddef.h>

/* Under an address-space limit, every thread allocates from malloc's one main arena.
 * Otherwise a thread's first malloc reserves a 64 MiB arena where the limit leaves room
 * and silently shares another where it does not, so what a rank has mapped, and the limit
 * the checks advise, would depend on the limit itself. Call before any thread mallocs
 * (before MPI starts its threads). No effect without a limit. */
void vmspace_init(void);
/* Bytes mapped now (VmSize, from /proc/self/statm); 0 where /proc does not say. */
double vmspace_used(void);
/* The most bytes mapped at any time so far (VmPeak, from /proc/self/status); 0 where /proc
 * does not say. */
double vmspace_peak(void);
/* The address-space limit in bytes; 0 when there is none. */
double vmspace_limit(void);
/* Bytes a thread started with default attributes maps: its stack (ulimit -s, or glibc's
 * default) and guard page. */
size_t vmspace_thread_bytes(void);

#endif
