/*
 * cuda_stub_grid.c - the stub runtime's grid runner: a launch of one of the module's
 * kernels (compiled for the host by kernels_host.cc) run on the CPU, block after
 * block, as the GPU would run it with one thread at a time.
 *
 * A thread runs until it ends or reaches __syncthreads; then the block's next thread
 * runs, and when every thread that has not ended waits at the barrier, they all go on
 * in order. For that each thread of a block that uses the barrier has a small stack of
 * its own (a fiber); switching between them is a few instructions on x86-64 (the
 * callee-saved registers and the stack pointer), ucontext
 * elsewhere. A kernel without barriers (found on its first launch) runs its threads as
 * plain calls, one after another. One launch runs at a time in the process (host
 * threads that launch at once take turns: a valid order of two streams' kernels), so
 * the indices and a kernel's __shared__ arrays (statics, cuda_host.h) are plain
 * globals, the running block's.
 *
 * Bounds: every block of the stub's memory ends where an inaccessible guard page
 * begins (cuda_stub.c), so a kernel's access past the end of an allocation faults;
 * the fault is turned into a rule naming the kernel, its block and thread and the
 * element index, and the page is opened so the kernel finishes (a real GPU would
 * mostly read or write the neighbouring memory without a word).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#ifndef __x86_64__
#include <ucontext.h>
#endif

#include "cuda_stub.h"

#define FIBERS 1024               /* CUDA's most threads per block */
#define FIBER_STACK (64u << 10)

struct stub_kthread stub_kt;

struct fiber {
	void *sp;                     /* saved stack pointer (x86-64) */
	int state;                    /* READY, AT_BARRIER or ENDED */
#ifndef __x86_64__
	ucontext_t uc;
#endif
};

enum { READY, AT_BARRIER, ENDED };

/* The running launch (one at a time: mu). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	const struct stub_host_kernel *hk;
	void **args;
	struct fiber *f;              /* (FIBERS) */
	unsigned char *stacks;        /* (FIBERS * FIBER_STACK) */
	void *sched_sp;
	int cur;                      /* the running thread's index in the block */
	int nthreads;                 /* the block's */
	int fibered;                  /* the threads run on fibers (else plain calls) */
	int met_barrier;
} G;

#ifdef __x86_64__
/* Save the callee-saved registers on this stack, store the stack pointer in *from, and
 * continue on the stack `to` (saved the same way). The floating-point control words
 * (MXCSR, x87) are not switched: no kernel changes them, every fiber has the host
 * thread's. */
void stub_fiber_switch(void **from, void *to) __attribute__((visibility("hidden")));
__asm__(".text\n"
	".globl stub_fiber_switch\n"
	".hidden stub_fiber_switch\n"
	".type stub_fiber_switch,@function\n"
	"stub_fiber_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size stub_fiber_switch, .-stub_fiber_switch\n");
#else
static ucontext_t sched_uc;
#endif

static void set_thread(int t)
{
	unsigned bx = stub_kt.bdim.x, by = stub_kt.bdim.y;

	stub_kt.thread.x = (unsigned)t % bx;
	stub_kt.thread.y = (unsigned)t / bx % by;
	stub_kt.thread.z = (unsigned)t / (bx * by);
}

/* On from the running fiber (it waits or has ended) to the block's next one that has
 * not ended, or back to the scheduler after the last: one switch per thread and round. */
static void pass_on(void)
{
	int from = G.cur, t = from + 1;

	while (t < G.nthreads && G.f[t].state == ENDED)
		t++;
	if (t == G.nthreads) {
#ifdef __x86_64__
		stub_fiber_switch(&G.f[from].sp, G.sched_sp);
#else
		swapcontext(&G.f[from].uc, &sched_uc);
#endif
		return;
	}
	G.cur = t;
	set_thread(t);
#ifdef __x86_64__
	stub_fiber_switch(&G.f[from].sp, G.f[t].sp);
#else
	swapcontext(&G.f[from].uc, &G.f[t].uc);
#endif
}

static void fiber_main(void)
{
	for (;;) { /* never returns: an ended fiber is only switched away from */
		G.hk->call(G.args);
		G.f[G.cur].state = ENDED;
		pass_on();
	}
}

/* Run fiber t until it waits or ends. */
static void resume(int t)
{
	G.cur = t;
	set_thread(t);
#ifdef __x86_64__
	stub_fiber_switch(&G.sched_sp, G.f[t].sp);
#else
	swapcontext(&sched_uc, &G.f[t].uc);
#endif
}

/* A fresh fiber t that starts in fiber_main. */
static void fiber_init(int t)
{
	/* Stacks 64 KiB apart would put every fiber's top in the same cache set: each
	 * starts a different number of cache lines below its slot's end. */
	unsigned char *top = G.stacks + (size_t)(t + 1) * FIBER_STACK - (size_t)(t % 512) * 64;

#ifdef __x86_64__
	/* top is 16-aligned. fiber_main is entered by stub_fiber_switch's ret, and must find
	 * the stack as a call leaves it: a return address (0: it never returns) at rsp, rsp
	 * 8 below a multiple of 16 (the SysV ABI; the compiler's aligned spills of SSE
	 * registers fault otherwise, as the synthetic generator's kernels did). */
	uint64_t *sp = (uint64_t *)(void *)top - 3;

	sp[0] = 0;                          /* fiber_main's return address: it never returns */
	*--sp = (uint64_t)(uintptr_t)fiber_main; /* stub_fiber_switch's ret goes there */
	for (int i = 0; i < 6; i++)
		*--sp = 0;                  /* rbp rbx r12 r13 r14 r15 */
	G.f[t].sp = sp;
#else
	getcontext(&G.f[t].uc);
	G.f[t].uc.uc_stack.ss_sp = G.stacks + (size_t)t * FIBER_STACK;
	G.f[t].uc.uc_stack.ss_size = (size_t)(top - G.stacks) - (size_t)t * FIBER_STACK;
	G.f[t].uc.uc_link = NULL;
	makecontext(&G.f[t].uc, fiber_main, 0);
#endif
	G.f[t].state = READY;
}

void stub_syncthreads(void)
{
	if (!G.fibered) {
		fprintf(stderr, "cuda-stub: %s reached __syncthreads on a launch run without fibers (it did not on its first launch)\n",
			G.hk->name);
		abort();
	}
	G.met_barrier = 1;
	G.f[G.cur].state = AT_BARRIER;
	pass_on();
}

/* One block's threads, on fibers: rounds (each from the first thread not ended, handed
 * on from thread to thread) until every thread has ended. */
static void run_block_fibered(int nthreads)
{
	int first = 0;

	G.nthreads = nthreads;
	for (int t = 0; t < nthreads; t++)
		fiber_init(t);
	while (first < nthreads) {
		resume(first);
		while (first < nthreads && G.f[first].state == ENDED)
			first++;
		for (int t = first; t < nthreads; t++)
			if (G.f[t].state == AT_BARRIER)
				G.f[t].state = READY;
	}
}

/* ---- bounds: a fault on a guard page --------------------------------------------- */

static struct sigaction old_segv;
static pthread_t in_kernel;           /* the host thread running a launch */
static int running;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr, lo, hi, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	int device;

	if (!running || !pthread_equal(in_kernel, pthread_self()) ||
	    !stub_guard_hit(a, &lo, &hi, &device)) {
		sigaction(SIGSEGV, &old_segv, NULL); /* not ours: the fault happens again there */
		return;
	}
	stub_rule("%s, block (%u,%u,%u) thread (%u,%u,%u): an access %s its %zu-byte %s block: byte %td from its start (float index %td, valid 0 to %zu): out of bounds",
		  G.hk->name, stub_kt.block.x, stub_kt.block.y, stub_kt.block.z, stub_kt.thread.x,
		  stub_kt.thread.y, stub_kt.thread.z, a >= hi ? "past the end of" : "before the start of",
		  (size_t)(hi - lo), device < 0 ? "pinned host" : "device", (ptrdiff_t)(a - lo),
		  (ptrdiff_t)(a - lo) / 4 - (a < lo), (size_t)(hi - lo) / 4 - 1);
	/* Open the guard page so that the kernel goes on (the rule fails the run at exit). */
	mprotect((void *)(a & ~(page - 1)), page, PROT_READ | PROT_WRITE);
}

static void install_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &old_segv);
}

/* ---- a launch ------------------------------------------------------------------- */

void stub_grid_run(const struct stub_host_kernel *hk, dim3 grid, dim3 block, void **args,
		   int *barriers)
{
	int nthreads = (int)(block.x * block.y * block.z);
	struct sigaction now;

	pthread_mutex_lock(&mu);
	if (G.f == NULL) {
		G.f = calloc(FIBERS, sizeof *G.f);
		G.stacks = mmap(NULL, (size_t)FIBERS * FIBER_STACK, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (G.f == NULL || G.stacks == MAP_FAILED) {
			fprintf(stderr, "cuda-stub: no memory for the grid runner's stacks\n");
			abort();
		}
	}
	/* Another library (MPI) may have put its own handler in since: ours first. */
	if (sigaction(SIGSEGV, NULL, &now) == 0 && now.sa_sigaction != on_segv)
		install_handler();
	G.hk = hk;
	G.args = args;
	G.fibered = *barriers != 0;
	G.met_barrier = 0;
	stub_kt.bdim = block;
	stub_kt.gdim = grid;
	in_kernel = pthread_self();
	running = 1;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				stub_kt.block = (uint3){x, y, z};
				if (G.fibered) {
					run_block_fibered(nthreads);
				} else {
					for (int t = 0; t < nthreads; t++) {
						set_thread(t);
						hk->call(args);
					}
				}
			}
	running = 0;
	if (*barriers < 0)
		*barriers = G.met_barrier;
	pthread_mutex_unlock(&mu);
}
