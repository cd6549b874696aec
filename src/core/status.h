/*
 * status.h - the status every fallible ddptrain function returns, and the
 * one-line message that travels with it.
 *
 * The core/ wing (floor 0): what every other wing uses and nothing of theirs:
 * status and messages, the clock, signals, random numbers, digests, build facts,
 * file mapping, the atomic output writer, trace buffers and the check of an entry-point
 * table loaded at run time. It knows nothing of
 * MPI, models or options.
 *
 * Library code never prints and never exits: it fills a struct diag and
 * returns its status upward. Only main() turns a status into an exit code
 * (after the ranks have agreed on it), so no rank is left waiting for one
 * that gave up.
 */
#ifndef DDPT_STATUS_H
#define DDPT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif
#include <stddef.h>

enum status {
	ST_OK = 0,
	ST_USAGE,   /* bad flag or value, inconsistent configuration: exit 2 */
	ST_RUNTIME, /* missing or malformed file, I/O, non-finite loss: exit 1 */
	ST_STOP,    /* nothing wrong, but stop now (--help, --version): exit 0 */
	ST_INTERRUPTED, /* stopped by a signal after a checkpoint, to be resumed: exit 3 */
	ST_PEER,    /* failed because another rank failed, which reports why: exit 1 */
	ST_INCOMPLETE, /* trained and saved, but an observer's output (--metrics, --trace,
			* --prometheus) is incomplete: exit 4 */
};

struct diag {
	enum status st;
	char msg[512]; /* one line, no trailing newline */
};

/* Room for what a message is about: a flag and a path of up to PATH_MAX (4096) bytes. */
#define DIAG_WHAT_LEN (4096 + 64)

/* Record st and a printf-style message in d (if d has no error yet); return st. A message
 * longer than msg loses its middle, marked "...": the start (what failed) and the end (why)
 * stay. */
enum status diag_set(struct diag *d, enum status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Record an errno failure: "<what>: <strerror(errnum)>". */
enum status diag_errno(struct diag *d, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Put formatted text before (diag_prefix) or after (diag_append) the message d already
 * holds, keeping its status: the context a caller adds to a callee's failure. No-op when
 * d holds no error. */
void diag_prefix(struct diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_append(struct diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define EXIT_INTERRUPTED 3 /* documented in ddptrain(1): requeue and --resume */
#define EXIT_INCOMPLETE 4  /* documented in ddptrain(1): finished, not to be retried */

/* Copy src into dst (n bytes, truncating at a whole escape) with control characters
 * written as \n, \r, \t or \xHH; returns the length. Every message goes through it. */
size_t diag_escape(char *dst, size_t n, const char *src);

/* Copy text taken from a file into dst (n bytes, truncating) with control characters
 * replaced by '?', so it cannot break a one-line message; returns dst. */
const char *diag_quote(char *dst, size_t n, const char *src);

/* Exit code for a status: 0, 1, 2, EXIT_INTERRUPTED or EXIT_INCOMPLETE. */
int status_exit_code(enum status st);

#ifdef __cplusplus
}
#endif

#endif
