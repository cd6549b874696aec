/*
 * vmspace.h - this process's address space: how much of it is mapped and the limit
 * on it (RLIMIT_AS, ulimit -v, which Slurm and PBS copy from the submitting shell).
 *
 * Read by the start-up checks that must know before training whether what is still to
 * be mapped fits: the shared-memory window (comm/shm.c) and the BLAS library's work
 * buffer (run/preflight.c). It is not an allocator and holds no state.
 */
#ifndef DDPT_VMSPACE_H
#define DDPT_VMSPACE_H

/* Bytes mapped now (VmSize, from /proc/self/statm); 0 where /proc does not say. */
double vmspace_used(void);
/* The address-space limit in bytes; 0 when there is none. */
double vmspace_limit(void);

#endif
