/*
 * kernels_host.cc - the CUDA module's kernels, from the same source (src/cuda's
 * backend_cuda.cu, wire.cu and synth.cu, with DDPT_CUDA_HOST_KERNELS: their host functions, which
 * launch with <<< >>>, left out),
 * compiled for the host through cuda_host.h, and the table the stub runtime finds them
 * in by name (stub_kernels.inc: every `__global__ void NAME(` line of those files, made
 * by make). Each entry calls the kernel with the arguments of a launch as nvcc's host
 * code passes them (args[i] points at parameter i) and knows each parameter's size, so
 * a captured launch keeps its arguments for every replay. Inside namespace stub_host, so
 * that the host kernels' names do not collide with nvcc's host stubs of the same
 * kernels in the module's objects.
 */
#include <stdio.h>
#include <string.h>
#include <nvtx3/nvToolsExt.h>

#include <tuple>
#include <utility>

#include "cuda_host.h"

/* The module's headers, here outside the namespace (their guards keep the .cu files'
 * own includes from repeating them inside it). */
#include "core/clock.h"
#include "core/hash64.h"
#include "core/tracebuf.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_module.h"
#include "cuda/hostwait.h"
#include "cuda/wire.h"
#include "cuda/synth.h"

#define DDPT_CUDA_HOST_KERNELS 1
namespace stub_host {
#include "cuda/backend_cuda.cu"
#include "cuda/wire.cu"
#include "cuda/synth.cu"
}

namespace {

template <typename... P, size_t... I>
void call_with(void (*f)(P...), void **args, std::index_sequence<I...>)
{
	f(*static_cast<typename std::remove_reference<P>::type *>(args[I])...);
}

/* One kernel's entry: its name, its parameters' sizes, and a call of it. */
template <typename... P> struct entry_of {
	template <void (*F)(P...)> static void call(void **args)
	{
		call_with(F, args, std::index_sequence_for<P...>{});
	}
	static constexpr struct stub_host_kernel make(const char *name, void (*call)(void **))
	{
		return {name, (int)sizeof...(P), {sizeof(P)...}, call};
	}
};

template <typename... P> entry_of<P...> entry_for(void (*)(P...));

} /* namespace */

#define STUB_KERNEL(name) \
	decltype(entry_for(&stub_host::name))::make( \
		#name, &decltype(entry_for(&stub_host::name))::call<&stub_host::name>),

/* constexpr: filled when the library is loaded, before nvcc's registration code runs
 * (static constructors of different objects run in no promised order). */
static constexpr struct stub_host_kernel kernels[] = {
#include "tests/lib/stub_kernels.inc"
};

extern "C" const struct stub_host_kernel *stub_host_kernel(const char *name)
{
	for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
		if (strcmp(kernels[i].name, name) == 0)
			return &kernels[i];
	return NULL;
}
