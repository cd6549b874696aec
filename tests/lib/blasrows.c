/*
 * blasrows - does this process's BLAS compute a row panel of a product bit for bit as
 * it computes those rows of the whole product? (tests/lib/blasrows.h: the cases, and
 * the float-rounding bound used where it does not.) The script tests ask it before
 * they compare a run whose backward goes in row panels with one that does not.
 *
 *   blasrows       a line per case, then the verdict: exit 0 bit for bit, 1 within
 *                  float rounding only, 2 beyond it (a broken BLAS) or out of memory
 */
#include <stdio.h>

#include "lib/blasrows.h"

int main(void)
{
	char why[512];
	int v = blas_rows_exact(why, sizeof why, stdout);

	printf("%s\n", why);
	return v == 1 ? 0 : v == 0 ? 1 : 2;
}
