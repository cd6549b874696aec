/*
 * hash64.h - the replica check's 64-bit digest of a float buffer (--check-replicas):
 * the same bits give the same digest on every backend, the CPU's loop and a GPU's
 * parallel reduction alike.
 *
 * The digest of x[0..n) whose first element is element `first` of its tensor is
 *   sum over i of hash64_term(first + i, bits of x[i])   (mod 2^64),
 * each term splitmix64's finaliser of the element's index and its 32 bits. A sum mod
 * 2^64 is associative and commutative, so any split of the buffer over threads, blocks or
 * pieces, summed in any order, gives the same 64 bits: a reduction needs no fixed tree
 * and no atomics order, and the digests of consecutive pieces add up to the whole's.
 * The finaliser is a bijection, so one changed value (or a value moved to another index)
 * changes its term and so the digest; two changes cancel only by a 2^-64 chance. It is
 * not a cryptographic hash: it detects faults, not an adversary. Bits are compared, not
 * values: -0 differs from 0, and NaNs by their payloads.
 *
 * Header only: backend_cpu.c and the CUDA module's kernels (backend_cuda.cu, compiled by
 * nvcc for the device and by g++ for the CUDA stub) include the same lines.
 */
#ifndef DDPT_HASH64_H
#define DDPT_HASH64_H

#include <stdint.h>

#if defined(__CUDACC__)
#define HASH64_FN static __host__ __device__ __forceinline__
#else
#define HASH64_FN static inline
#endif

/* splitmix64: the golden-ratio increment, then its finaliser (Steele, Lea, Flood 2014). */
HASH64_FN uint64_t hash64_mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Element index i of a tensor holding the float whose bits are `bits`: index and bits
 * side by side (unique for the first 2^32 elements; past that the index wraps into the
 * bits, still mixed). */
HASH64_FN uint64_t hash64_term(uint64_t i, uint32_t bits)
{
	return hash64_mix((i << 32) ^ (i >> 32) ^ (uint64_t)bits);
}

#endif
