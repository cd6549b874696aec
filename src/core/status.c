/* status.c - filling struct diag; mapping statuses to exit codes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

size_t diag_escape(char *dst, size_t n, const char *src)
{
	size_t o = 0;

	if (n == 0)
		return 0;
	for (; *src != '\0'; src++) {
		unsigned char c = (unsigned char)*src;
		char e[8];
		size_t k;

		if (c >= 0x20 && c != 0x7f) {
			e[0] = (char)c;
			e[1] = '\0';
		} else {
			snprintf(e, sizeof e, "\\%s", c == '\n' ? "n" : c == '\r' ? "r" : c == '\t' ? "t" : "");
			if (e[1] == '\0')
				snprintf(e, sizeof e, "\\x%02x", c);
		}
		k = strlen(e);
		if (o + k >= n)
			break;
		memcpy(dst + o, e, k);
		o += k;
	}
	dst[o] = '\0';
	return o;
}

enum status diag_set(struct diag *d, enum status st, const char *fmt, ...)
{
	char raw[sizeof d->msg];
	va_list ap;

	if (d == NULL || d->st != ST_OK)
		return st;
	d->st = st;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	/* A file name can hold a newline or a terminal escape: shown escaped, it cannot forge
	 * a log line or drive the terminal. */
	diag_escape(d->msg, sizeof d->msg, raw);
	return st;
}

/* The message of d with the escaped text of fmt before (front) or after it. */
static void diag_wrap(struct diag *d, int front, const char *fmt, va_list ap)
{
	char raw[sizeof d->msg], both[2 * sizeof d->msg];
	size_t n;

	if (d == NULL || d->st == ST_OK)
		return;
	vsnprintf(raw, sizeof raw, fmt, ap);
	n = diag_escape(both, sizeof d->msg, front ? raw : d->msg);
	if (front)
		snprintf(both + n, sizeof both - n, "%s", d->msg);
	else
		diag_escape(both + n, sizeof d->msg, raw);
	n = strlen(both) < sizeof d->msg ? strlen(both) : sizeof d->msg - 1;
	memcpy(d->msg, both, n); /* cut at the message's length, as diag_set does */
	d->msg[n] = '\0';
}

void diag_prefix(struct diag *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	diag_wrap(d, 1, fmt, ap);
	va_end(ap);
}

void diag_append(struct diag *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	diag_wrap(d, 0, fmt, ap);
	va_end(ap);
}

enum status diag_errno(struct diag *d, int errnum, const char *fmt, ...)
{
	char what[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return diag_set(d, ST_RUNTIME, "%s: %s", what, strerror(errnum));
}

const char *diag_quote(char *dst, size_t n, const char *src)
{
	size_t i = 0;

	if (n == 0)
		return dst;
	for (; src[i] != '\0' && i + 1 < n; i++)
		dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
	dst[i] = '\0';
	return dst;
}

int status_exit_code(enum status st)
{
	switch (st) {
	case ST_OK:
	case ST_STOP:
		return 0;
	case ST_USAGE:
		return 2;
	case ST_RUNTIME:
	case ST_PEER:
		return 1;
	case ST_INTERRUPTED:
		return EXIT_INTERRUPTED;
	case ST_INCOMPLETE:
		return EXIT_INCOMPLETE;
	}
	return 1;
}
