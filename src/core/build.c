/* build.c - the build facts --version and the metrics report. */
#include <mpi.h> /* OMPI_*_VERSION: the headers this binary was compiled against */

#include "core/build.h"
#include "config.h" /* PACKAGE_VERSION, DDPT_BUILD_CUDA, DDPT_BUILD_CUBLAS, DDPT_BUILD_NCCL */

#if defined(OMPI_MAJOR_VERSION)
#define MPI_STR(x) #x
#define MPI_XSTR(x) MPI_STR(x)
#define BUILD_MPI "Open MPI " MPI_XSTR(OMPI_MAJOR_VERSION) "." MPI_XSTR(OMPI_MINOR_VERSION) "." \
	MPI_XSTR(OMPI_RELEASE_VERSION)
#else
#define BUILD_MPI "an MPI other than Open MPI"
#endif

#ifdef HAVE_CUDA_MODULE
#define BUILD_BACKENDS "cpu (OpenBLAS) + mpi; cuda (cuBLAS) + nccl in " "ddptrain-cuda.so, loaded when a GPU is used"
#else
#define BUILD_BACKENDS "cpu (OpenBLAS) + mpi (built without CUDA)"
#endif

void build_print(FILE *f)
{
	fprintf(f, "ddptrain %s\n", PACKAGE_VERSION);
	fprintf(f, "backends: %s\n", BUILD_BACKENDS);
	fprintf(f, "built with: %s", BUILD_MPI);
	if (DDPT_BUILD_CUDA[0] != '\0')
		fprintf(f, ", CUDA %s, cuBLAS %s, NCCL %s", DDPT_BUILD_CUDA, DDPT_BUILD_CUBLAS,
			DDPT_BUILD_NCCL);
	fputc('\n', f);
	fprintf(f, "License: %s (see the LICENSE file). Copyright (c) 2026 the ddptrain authors.\n"
		   "This is free software: you may change and redistribute it. There is NO WARRANTY.\n",
		DDPT_LICENSE);
}

json_t *build_json(void)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "version", PACKAGE_VERSION, "backends",
			      BUILD_BACKENDS, "mpi", BUILD_MPI, "license", DDPT_LICENSE);

	if (o != NULL && DDPT_BUILD_CUDA[0] != '\0') {
		json_object_set_new(o, "cuda", json_string(DDPT_BUILD_CUDA));
		json_object_set_new(o, "cublas", json_string(DDPT_BUILD_CUBLAS));
		json_object_set_new(o, "nccl", json_string(DDPT_BUILD_NCCL));
	}
	return o;
}
