/* signals.c - the stop flag (and the stop file), the SIGBUS message and the temporary files removed on a fatal exit. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h> /* lstat */
#include <unistd.h>

#include "core/clock.h"   /* clock_now */
#include "core/signals.h"
#include "core/status.h" /* EXIT_INTERRUPTED */

#define SLOTS 8
#define TMP_SLOTS 16 /* a run's temporaries and the lock files of its outputs */
#define PATH_LEN 4096

static volatile sig_atomic_t first_signal, stop_saved;
/* --stop-file, and when to look for it next (clock_now seconds): the trainer and the
 * watchdog thread both ask, so the time is atomic; two looks at once cost one extra stat. */
static const char *stop_file;
static _Atomic double stop_file_next;

/* Slot tables shared with the handlers, filled by the main thread only: a slot's text is
 * written before `used` is set and is not touched while it is set, so a handler reads
 * only complete strings. */
static struct {
	atomic_int used;
	const char *addr;
	size_t len;
	const char *why; /* what a lost page means here (a static string) */
	char what[PATH_LEN + 32];
} maps[SLOTS];

static struct {
	atomic_int used;
	char path[PATH_LEN];
} tmps[TMP_SLOTS];

static void say(const char *s)
{
	(void)!write(STDERR_FILENO, s, strlen(s));
}

void signals_tmp_cleanup(void)
{
	for (int i = 0; i < TMP_SLOTS; i++)
		if (atomic_load(&tmps[i].used))
			unlink(tmps[i].path);
}

static void on_stop(int sig)
{
	if (first_signal != 0) { /* ends now: exit 3 if the stop's checkpoint is written */
		say(stop_saved ? "ddptrain: second signal: stopping now; the checkpoint is written\n"
			       : "ddptrain: second signal: stopping now, without a checkpoint\n");
		signals_tmp_cleanup();
		_exit(stop_saved ? EXIT_INTERRUPTED : 128 + sig);
	}
	first_signal = sig;
}

/* A page of a mapped file vanished: the file was truncated under us. */
static void on_bus(int sig, siginfo_t *si, void *ctx)
{
	const char *p = si->si_addr;

	(void)ctx;
	for (int i = 0; i < SLOTS; i++) {
		if (atomic_load(&maps[i].used) && p >= maps[i].addr && p < maps[i].addr + maps[i].len) {
			say("ddptrain: ");
			say(maps[i].what);
			say(": ");
			say(maps[i].why);
			say("; giving up\n");
			signals_tmp_cleanup();
			_exit(1);
		}
	}
	/* Not one of ours (MPI's shared memory, most likely, whose pages are taken as they are
	 * first touched): say so, then the default action (core dump, exit 128 + SIGBUS). */
	say("ddptrain: bus error (SIGBUS): a page of a shared mapping could not be had; is /dev/shm full? (MPI's shared memory lives there: df /dev/shm)\n");
	signals_tmp_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

void signals_install(void)
{
	static const int stops[] = {SIGTERM, SIGINT, SIGUSR1, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = on_stop;
	for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++)
		sigaction(stops[i], &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sigaction(SIGXFSZ, &sa, NULL);
	sa.sa_flags = SA_SIGINFO;
	sa.sa_sigaction = on_bus;
	sigaction(SIGBUS, &sa, NULL);
}

void signals_stop_saved(void)
{
	stop_saved = 1;
}

void signals_stop_file(const char *path)
{
	stop_file = path;
	atomic_store(&stop_file_next, 0.0);
}

int signals_pending(void)
{
	if (first_signal == 0 && stop_file != NULL) {
		double now = clock_now();

		if (now >= atomic_load(&stop_file_next)) {
			atomic_store(&stop_file_next, now + SIGNALS_STOP_FILE_EVERY);
			struct stat sb;

			/* Any kind of file counts, a link to nothing too: whoever made it asks. */
			if (lstat(stop_file, &sb) == 0 && first_signal == 0)
				first_signal = SIGUSR1;
		}
	}
	return first_signal;
}

void signals_map_add(const void *addr, size_t len, const char *what)
{
	signals_map_note(addr, len, what,
			 "the file became shorter while training read it (truncated or replaced in place by another program?)");
}

void signals_map_note(const void *addr, size_t len, const char *what, const char *why)
{
	for (int i = 0; i < SLOTS; i++) {
		if (atomic_load(&maps[i].used))
			continue;
		maps[i].addr = addr;
		maps[i].len = len;
		maps[i].why = why;
		strncpy(maps[i].what, what, sizeof maps[i].what - 1);
		maps[i].what[sizeof maps[i].what - 1] = '\0';
		atomic_store(&maps[i].used, 1);
		return;
	}
}

void signals_map_remove(const void *addr)
{
	for (int i = 0; i < SLOTS; i++)
		if (atomic_load(&maps[i].used) && maps[i].addr == addr)
			atomic_store(&maps[i].used, 0);
}

int signals_tmp_add(const char *path)
{
	if (strlen(path) >= PATH_LEN)
		return -1;
	for (int i = 0; i < TMP_SLOTS; i++) {
		if (atomic_load(&tmps[i].used))
			continue;
		strcpy(tmps[i].path, path);
		atomic_store(&tmps[i].used, 1);
		return i;
	}
	return -1;
}

void signals_tmp_remove(int slot)
{
	if (slot >= 0 && slot < TMP_SLOTS)
		atomic_store(&tmps[slot].used, 0);
}
