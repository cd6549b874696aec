/*
 * nvtx_record.c - an NVTX injection library that writes every range push and pop to a
 * file: what Nsight Systems would show of --trace's NVTX ranges, seen on a GPU machine
 * that has no Nsight (scripts/gpu-check.sh checks they are there and nested).
 *
 *   NVTX_INJECTION64_PATH=.../nvtx-record.so NVTX_RECORD=PREFIX ddptrain ...
 *
 * Each process that uses NVTX writes PREFIX.PID, one line per event, in order:
 * "TID push NAME" or "TID pop" (TID: the calling thread). NVTX loads this library
 * itself, on a module's first NVTX call, through the documented injection entry
 * point; without NVTX_RECORD it declines and NVTX stays a no-op.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h> /* the injection interface: NvtxExportTableCallbacks, ... */

static int record_fd = -1;

/* One event as one write, so the lines of several threads never interleave. */
static void record(const char *what, const char *name)
{
	char line[512];
	int n = snprintf(line, sizeof line, "%ld %s%s%s\n", (long)syscall(SYS_gettid), what,
			 name != NULL ? " " : "", name != NULL ? name : "");

	if (n > (int)sizeof line - 1) {
		n = (int)sizeof line - 1;
		line[n - 1] = '\n';
	}
	if (record_fd >= 0 && n > 0 && write(record_fd, line, (size_t)n) < 0)
		record_fd = -1; /* nothing to report to: the check then finds the file short */
}

static int NVTX_API record_push(const char *name)
{
	record("push", name);
	return 0;
}

static int NVTX_API record_pop(void)
{
	record("pop", NULL);
	return 0;
}

/* The entry point NVTX looks for: 1 takes over the core ranges, 0 declines. */
int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
	const NvtxExportTableCallbacks *cb = get(NVTX_ETID_CALLBACKS);
	const char *prefix = getenv("NVTX_RECORD");
	NvtxFunctionTable table = NULL;
	unsigned int size = 0;
	char path[4200];

	if (cb == NULL || prefix == NULL ||
	    !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || table == NULL ||
	    size <= NVTX_CBID_CORE_RangePop)
		return 0;
	if (record_fd < 0) { /* every module that uses NVTX initialises it: one file */
		snprintf(path, sizeof path, "%s.%ld", prefix, (long)getpid());
		record_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (record_fd < 0)
			return 0;
	}
	*table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)record_push;
	*table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)record_pop;
	return 1;
}
