/* opstable.c - checking a table of entry points against its rows (see opstable.h). */
#include <string.h>

#include "core/opstable.h"

/* Whether the pointer at table + off is set. A member may point to a function or to a
 * table: both are read as a function pointer, whose null is the same bytes (POSIX, which
 * dlsym relies on, makes every pointer the same size and form). */
static int is_set(const void *table, size_t off)
{
	void (*p)(void);

	memcpy(&p, (const char *)table + off, sizeof p);
	return p != NULL;
}

enum status opstable_check(const void *table, const struct opstable_row *rows, int n,
			   struct diag *d)
{
	for (int i = 0; i < n; i++) {
		if (is_set(table, rows[i].off) || rows[i].group == OPSTABLE_OPTIONAL)
			continue;
		if (rows[i].group == OPSTABLE_REQUIRED)
			return diag_set(d, ST_RUNTIME, "its entry %s is NULL", rows[i].name);
		for (int j = 0; j < n; j++)
			if (rows[j].group == rows[i].group && is_set(table, rows[j].off))
				return diag_set(d, ST_RUNTIME,
						"its entry %s is NULL while %s is not (they come together)",
						rows[i].name, rows[j].name);
	}
	return ST_OK;
}
