/* status.c - filling struct diag; mapping statuses to exit codes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

/* The escaped width of one byte: itself, \n, or \xHH. */
static size_t escaped_len(unsigned char c)
{
	if (c >= 0x20 && c != 0x7f)
		return 1;
	return c == '\n' || c == '\r' || c == '\t' ? 2 : 4;
}

/* Append src[0, len) escaped at dst + o (n bytes in all, stopping at a whole escape);
 * returns the new length. */
static size_t escape_into(char *dst, size_t n, size_t o, const char *src, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)src[i];
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

size_t diag_escape(char *dst, size_t n, const char *src)
{
	if (n == 0)
		return 0;
	return escape_into(dst, n, 0, src, strlen(src));
}

/* src escaped into dst (n bytes); too long, its middle gives way to "..." (cut between
 * whole characters of UTF-8 text), so the start and the end both stay. */
static void fit_escaped(char *dst, size_t n, const char *src)
{
	size_t len = strlen(src), total = 0, head = 0, tail = len, h = 0, t = 0, room, o;

	for (size_t i = 0; i < len; i++)
		total += escaped_len((unsigned char)src[i]);
	if (total < n) {
		escape_into(dst, n, 0, src, len);
		return;
	}
	room = n - 1 - 3; /* the marker */
	while (head < len && h + escaped_len((unsigned char)src[head]) <= room / 2)
		h += escaped_len((unsigned char)src[head++]);
	while (head > 0 && ((unsigned char)src[head] & 0xc0) == 0x80) /* not inside a character */
		h -= escaped_len((unsigned char)src[--head]);
	while (tail > head && t + escaped_len((unsigned char)src[tail - 1]) <= room - h)
		t += escaped_len((unsigned char)src[--tail]);
	while (tail < len && ((unsigned char)src[tail] & 0xc0) == 0x80)
		t -= escaped_len((unsigned char)src[tail++]);
	o = escape_into(dst, n, 0, src, head);
	o = escape_into(dst, n, o, "...", 3);
	escape_into(dst, n, o, src + tail, len - tail);
}

/* Formatted text: room for two paths of PATH_MAX and what is said about them. */
#define DIAG_RAW_LEN (2 * DIAG_WHAT_LEN + 512)

enum status diag_set(struct diag *d, enum status st, const char *fmt, ...)
{
	char raw[DIAG_RAW_LEN];
	va_list ap;

	if (d == NULL || d->st != ST_OK)
		return st;
	d->st = st;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	/* A file name can hold a newline or a terminal escape: shown escaped, it cannot forge
	 * a log line or drive the terminal. */
	fit_escaped(d->msg, sizeof d->msg, raw);
	return st;
}

/* The message of d with the escaped text of fmt before (front) or after it, fitted as
 * diag_set fits a message (d->msg holds no control character: escaping it again keeps it). */
static void diag_wrap(struct diag *d, int front, const char *fmt, va_list ap)
{
	char raw[DIAG_RAW_LEN], both[DIAG_RAW_LEN + sizeof d->msg];
	const char *first, *second;
	size_t n;

	if (d == NULL || d->st == ST_OK)
		return;
	vsnprintf(raw, sizeof raw, fmt, ap);
	first = front ? raw : d->msg;
	second = front ? d->msg : raw;
	n = strlen(first); /* each fits its own buffer, so both fit `both` */
	memcpy(both, first, n);
	memcpy(both + n, second, strlen(second) + 1);
	fit_escaped(d->msg, sizeof d->msg, both);
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
	char what[DIAG_WHAT_LEN];
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
