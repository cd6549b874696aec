/*
 * opstable.h - whether a table of entry points that came from outside the program (the
 * GPU module's, loaded at run time) has every entry its callers call without looking.
 *
 * Each interface keeps its rows (one per member: name, offset, group) beside the code
 * that owns its struct, with a static assertion that they cover the struct, and checks a
 * table once, where it comes in. Tables built into the program need no check: their
 * designated initializers and the tests see them. Not a registry of tables.
 */
#ifndef DDPT_OPSTABLE_H
#define DDPT_OPSTABLE_H

#include <stddef.h> /* offsetof, for OPSTABLE_ROW */

#include "core/status.h"

/* A row's group: required, optional (NULL means "not supported"), or a number above 0
 * that optional entries used together share: all of them set, or none. */
#define OPSTABLE_REQUIRED 0
#define OPSTABLE_OPTIONAL (-1)

struct opstable_row {
	const char *name; /* as the message names it: "backend.axpbz" */
	size_t off;       /* offsetof the member: a pointer, to a function or to a table */
	int group;
};

/* The row of member M of struct S, named PREFIX M ("backend." axpbz). */
#define OPSTABLE_ROW(S, PREFIX, M, GROUP) {PREFIX #M, offsetof(struct S, M), GROUP}
/* The rows of ROWS are one per pointer of struct S from member FIRST to its end (so that a
 * member added to S without a row does not compile). */
#define OPSTABLE_COVERS(ROWS, S, FIRST)                                                      \
	_Static_assert(sizeof(ROWS) / sizeof((ROWS)[0]) * sizeof(void (*)(void)) ==          \
			       sizeof(struct S) - offsetof(struct S, FIRST),                 \
		       "a row for every entry of struct " #S " from " #FIRST)

/* ST_OK if table has every entry rows[0..n) require; else ST_RUNTIME naming the first that
 * is missing: "its entry backend.axpbz is NULL", or, for one of a group of which another
 * is set, "its entry backend.graph_end is NULL while backend.graph_begin is not (they come
 * together)". */
enum status opstable_check(const void *table, const struct opstable_row *rows, int n,
			   struct diag *d);

#endif
