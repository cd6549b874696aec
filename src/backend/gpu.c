/* gpu.c - finding GPUs without CUDA, loading the CUDA module, spotting shared GPUs. */
#define _GNU_SOURCE /* dladdr1, RTLD_DL_SYMENT */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <link.h>     /* ElfW, ELF64_ST_TYPE: the entry's symbol type */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "core/opstable.h" /* opstable_check: the module's tables, entry by entry */
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

/* The entries of struct gpu_module and of its backend_ops that a module must fill in
 * (backend.h says which are optional, and which go together). */
#define MOD(m) OPSTABLE_ROW(gpu_module, "", m, OPSTABLE_REQUIRED)
#define BE(m, group) OPSTABLE_ROW(backend_ops, "backend.", m, group)
#define REQ OPSTABLE_REQUIRED
#define OPT OPSTABLE_OPTIONAL
enum { GRAPHS = 1, MARKS, TIMERS };
static const struct opstable_row module_rows[] = {
	MOD(probe), MOD(device_info), MOD(backend), MOD(nccl_unique_id), MOD(nccl_comm_init),
	MOD(bench_sgemm),
};
OPSTABLE_COVERS(module_rows, gpu_module, probe);
static const struct opstable_row backend_rows[] = {
	BE(init, REQ), BE(fini, REQ), BE(bind, REQ), BE(alloc, REQ), BE(free, REQ),
	BE(host_alloc, REQ), BE(host_free, REQ), BE(to_device, REQ), BE(synth, REQ),
	BE(to_host, REQ), BE(to_host_async, REQ), BE(copy, REQ), BE(copy_peer, REQ), BE(add, REQ),
	BE(linear_forward, REQ), BE(linear_backward, REQ), BE(linear_grad_rows, REQ),
	BE(relu_forward, REQ), BE(relu_backward, REQ), BE(mse, REQ), BE(axpbz, REQ),
	BE(cross_entropy, REQ), BE(adamw, REQ), BE(sumsq, REQ), BE(clip, REQ), BE(hash64, REQ), BE(sync, REQ),
	BE(mem_used, REQ),
	BE(graph_begin, GRAPHS), BE(graph_end, GRAPHS), BE(graph_launch, GRAPHS),
	BE(graph_reset, GRAPHS),
	BE(host_mark, MARKS), BE(host_wait, MARKS), BE(host_poll, OPT),
	BE(timer_mark, TIMERS), BE(timer_ms, TIMERS),
	BE(set_progress, OPT), BE(trace_dev, OPT),
};
OPSTABLE_COVERS(backend_rows, backend_ops, init);
#undef MOD
#undef BE
#undef REQ
#undef OPT

enum status gpu_module_check(const struct gpu_module *m, struct diag *d)
{
	if (m == NULL)
		return diag_set(d, ST_RUNTIME, "%s() returned NULL", GPU_MODULE_SYMBOL);
	if (m->abi != GPU_MODULE_ABI) /* before its tables: an older one's are shorter */
		return diag_set(d, ST_RUNTIME, "not a ddptrain %d GPU module (its ABI is %d)",
				GPU_MODULE_ABI, m->abi);
	if (opstable_check(m, module_rows, (int)(sizeof module_rows / sizeof module_rows[0]), d) != ST_OK)
		return d->st;
	return opstable_check(m->backend, backend_rows, (int)(sizeof backend_rows / sizeof backend_rows[0]), d);
}

/* What kind of file mode says, for the refusal of one that is not a regular file. */
static const char *file_kind(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "a special file";
}

/* path opened for dlopen, if it is a regular file; -1 with why if not. Open without
 * waiting: a FIFO's open for reading waits for a writer, for ever (it comes before any
 * --timeout watches, and SIGTERM's handler only sets the stop flag). */
static int open_regular(const char *path, char *why, size_t len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(why, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0)
		snprintf(why, len, "%s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		snprintf(why, len, "%s: %s, not a regular file", path, file_kind(st.st_mode));
	else
		return fd;
	close(fd);
	return -1;
}

/* Whether addr is where a function of a loaded object starts (its symbol's ELF type): a
 * data symbol of the entry's name would be jumped into (SIGSEGV). */
static int is_function(void *addr)
{
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (dladdr1(addr, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL)
		return 0;
	/* ELF32_ST_TYPE and ELF64_ST_TYPE are the same: the low 4 bits */
	return ELF64_ST_TYPE(sym->st_info) == STT_FUNC || ELF64_ST_TYPE(sym->st_info) == STT_GNU_IFUNC;
}

static int try_load(struct gpu *g, const char *path, char *why, size_t len)
{
	char by_fd[64];
	const struct gpu_module *(*entry)(void);
	const struct gpu_module *m;
	struct diag d = {0};
	void *h, *sym;
	int fd = open_regular(path, why, len);

	if (fd < 0)
		return 0;
	/* dlopen reads the file just checked, through its descriptor, not whatever path names
	 * by then (a FIFO put in its place). The object keeps that name: the descriptor stays
	 * open as long as the module is loaded (for ever, gpu.h). Its dependencies are found
	 * by absolute RPATH or the system's paths, never $ORIGIN (which would be /proc/self/fd). */
	snprintf(by_fd, sizeof by_fd, "/proc/self/fd/%d", fd);
	h = dlopen(access(by_fd, F_OK) == 0 ? by_fd : path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();

		/* dlerror names the descriptor: name the file */
		if (e == NULL)
			snprintf(why, len, "%s: dlopen failed", path);
		else if (strncmp(e, by_fd, strlen(by_fd)) == 0)
			snprintf(why, len, "%s%s", path, e + strlen(by_fd));
		else
			snprintf(why, len, "%s", e);
		close(fd);
		return 0;
	}
	sym = dlsym(h, GPU_MODULE_SYMBOL);
	if (sym == NULL)
		diag_set(&d, ST_RUNTIME, "not a ddptrain %d GPU module (no %s)", GPU_MODULE_ABI,
			 GPU_MODULE_SYMBOL);
	else if (!is_function(sym))
		diag_set(&d, ST_RUNTIME, "%s is not a function (a data symbol)", GPU_MODULE_SYMBOL);
	if (d.st == ST_OK) {
		*(void **)&entry = sym;
		m = entry();
		(void)gpu_module_check(m, &d);
	}
	if (d.st != ST_OK) {
		snprintf(why, len, "%s: %s", path, d.msg);
		dlclose(h);
		close(fd);
		return 0;
	}
	g->handle = h;
	g->fd = fd;
	g->mod = m;
	snprintf(g->path, sizeof g->path, "%s", path);
	return 1;
}

enum status gpu_load(struct gpu *g, struct diag *d)
{
	char exe[4096], cand[4200], why[1024] = "";
	const char *env = getenv("DDPTRAIN_CUDA_MODULE");
	ssize_t n;

	memset(g, 0, sizeof *g);
	g->fd = -1;
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
