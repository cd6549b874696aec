/* gpu.c - finding GPUs without CUDA, loading the CUDA module, spotting shared GPUs. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "backend/gpu.h"

#ifndef DDPT_PKGLIBDIR
#define DDPT_PKGLIBDIR "/usr/local/lib/ddptrain"
#endif

int gpu_visible_count(const char *proc_dir, const char *cuda_visible_devices)
{
	DIR *dp = opendir(proc_dir);
	struct dirent *e;
	int present = 0, listed = 0;
	const char *p;

	if (dp == NULL)
		return 0;
	while ((e = readdir(dp)) != NULL)
		present += e->d_name[0] != '.';
	closedir(dp);
	if (cuda_visible_devices == NULL)
		return present;
	/* The runtime takes entries up to the first invalid one; "", "-1", "none" hide all. */
	for (p = cuda_visible_devices; *p != '\0';) {
		size_t len = strcspn(p, ",");
		char *end;
		long idx;

		if (len == 0)
			break;
		if (strncmp(p, "GPU-", 4) == 0 || strncmp(p, "MIG-", 4) == 0) {
			listed++; /* a UUID: trust it */
		} else {
			idx = strtol(p, &end, 10);
			if (end == p || (size_t)(end - p) != len || idx < 0 || idx >= present)
				break;
			listed++;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return listed < present ? listed : present;
}

static int try_load(struct gpu *g, const char *path, char *why, size_t len)
{
	void *h;
	const struct gpu_module *(*entry)(void);

	if (access(path, R_OK) != 0) {
		snprintf(why, len, "%s: %s", path, strerror(errno));
		return 0;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(why, len, "%s", dlerror());
		return 0;
	}
	*(void **)&entry = dlsym(h, GPU_MODULE_SYMBOL);
	if (entry == NULL || entry()->abi != GPU_MODULE_ABI) {
		snprintf(why, len, "%s: not a ddptrain %d GPU module", path, GPU_MODULE_ABI);
		dlclose(h);
		return 0;
	}
	g->handle = h;
	g->mod = entry();
	snprintf(g->path, sizeof g->path, "%s", path);
	return 1;
}

enum status gpu_load(struct gpu *g, struct diag *d)
{
	char exe[4096], cand[4200], why[1024] = "";
	const char *env = getenv("DDPTRAIN_CUDA_MODULE");
	ssize_t n;

	memset(g, 0, sizeof *g);
	if (env != NULL && env[0] != '\0') {
		if (try_load(g, env, why, sizeof why))
			return ST_OK;
		return diag_set(d, ST_RUNTIME, "cannot load the CUDA module (DDPTRAIN_CUDA_MODULE): %s", why);
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		snprintf(cand, sizeof cand, "%s/%s", dirname(exe), GPU_MODULE_FILE);
		if (try_load(g, cand, why, sizeof why))
			return ST_OK;
		/* A missing file there is normal for an installed binary; a present one that
		 * fails to load is the reason to report. */
		if (access(cand, R_OK) == 0)
			return diag_set(d, ST_RUNTIME, "cannot load the CUDA module: %s", why);
	}
	snprintf(cand, sizeof cand, "%s/%s", DDPT_PKGLIBDIR, GPU_MODULE_FILE);
	if (try_load(g, cand, why, sizeof why))
		return ST_OK;
	return diag_set(d, ST_RUNTIME, "cannot load the CUDA module: %s", why);
}

int gpu_find_duplicate(const unsigned char (*uuid)[GPU_UUID_BYTES], int n, int *a, int *b)
{
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (memcmp(uuid[i], uuid[j], GPU_UUID_BYTES) == 0) {
				*a = i;
				*b = j;
				return 1;
			}
	return 0;
}
