/*
 * build.h - what this binary was built with: the backends, the CUDA, cuBLAS and
 * NCCL versions of the CUDA module, Open MPI's version and the licence. All of
 * it is known at build time (configure reads the headers), so --version prints
 * it without starting MPI or loading any CUDA library.
 */
#ifndef DDPT_BUILD_H
#define DDPT_BUILD_H

#include <jansson.h>
#include <stdio.h>

#define DDPT_LICENSE "MIT"

/* --version's text: the version line, the build lines and the licence. */
void build_print(FILE *f);
/* The same facts as a JSON object (new reference): for the metrics' first record. */
json_t *build_json(void);

#endif
