/* world.c - MPI start-up, node-local ranks, status agreement and configuration check. */
#include <stdio.h>
#include <string.h>

#include "world.h"

#define CONFIG_TEXT_MAX 4096

static enum status mpi_fail(struct diag *d, int rc, const char *call)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(rc, msg, &len);
	return diag_set(d, ST_RUNTIME, "%s failed: %s", call, msg);
}

enum status world_init(struct world *w, int *argc, char ***argv, struct diag *d)
{
	int provided, rc, flag = 0;

	memset(w, 0, sizeof *w);
	w->comm = MPI_COMM_NULL;
	w->local = MPI_COMM_NULL;
	MPI_Initialized(&flag);
	if (!flag) {
		/* MPI_THREAD_FUNNELED: only the main thread calls MPI (dp mode's workers do not). */
		rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
		if (rc != MPI_SUCCESS)
			return diag_set(d, ST_RUNTIME, "MPI_Init_thread failed (code %d)", rc);
		w->inited = 1;
	}
	/* Errors come back as codes, so every rank can agree before exiting. */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	w->comm = MPI_COMM_WORLD;
	MPI_Comm_rank(w->comm, &w->rank);
	MPI_Comm_size(w->comm, &w->size);
	rc = MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &w->local);
	if (rc != MPI_SUCCESS)
		return mpi_fail(d, rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
	MPI_Comm_rank(w->local, &w->local_rank);
	MPI_Comm_size(w->local, &w->local_size);
	return ST_OK;
}

static int severity(enum status st)
{
	switch (st) {
	case ST_OK: return 0;
	case ST_STOP: return 1;
	case ST_RUNTIME: return 2;
	case ST_USAGE: return 3;
	}
	return 2;
}

enum status world_agree(struct world *w, enum status mine, int *reporter)
{
	/* MINLOC over (-severity, rank): the most severe status, lowest rank on ties. */
	struct { int value, rank; } in = {-severity(mine), w->rank}, out;
	static const enum status by_severity[] = {ST_OK, ST_STOP, ST_RUNTIME, ST_USAGE};

	if (MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, w->comm) != MPI_SUCCESS) {
		*reporter = mine != ST_OK;
		return mine != ST_OK ? mine : ST_RUNTIME;
	}
	*reporter = out.rank == w->rank;
	return by_severity[-out.value];
}

enum status world_check_config(struct world *w, const char *text, struct diag *d)
{
	char root[CONFIG_TEXT_MAX];
	const char *a, *b;
	int rc;

	if (strlen(text) >= sizeof root)
		return diag_set(d, ST_RUNTIME, "internal: configuration text too long");
	if (w->rank == 0)
		strcpy(root, text);
	rc = MPI_Bcast(root, sizeof root, MPI_CHAR, 0, w->comm);
	if (rc != MPI_SUCCESS)
		return mpi_fail(d, rc, "MPI_Bcast(configuration)");
	/* Compare line by line; the lines are in the same order on every rank. */
	a = text;
	b = root;
	while (*a != '\0' || *b != '\0') {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");

		if (la != lb || memcmp(a, b, la) != 0)
			return diag_set(d, ST_USAGE,
					"configuration differs between ranks: %.*s here, %.*s on rank 0",
					(int)la, a, (int)lb, b);
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
	}
	return ST_OK;
}

int world_all(struct world *w, int mine)
{
	int in = mine != 0, out = 0;

	if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, w->comm) != MPI_SUCCESS)
		return 0;
	return out;
}

enum status world_bcast(struct world *w, void *buf, size_t len, int root, struct diag *d)
{
	int rc = MPI_Bcast(buf, (int)len, MPI_BYTE, root, w->comm);

	return rc == MPI_SUCCESS ? ST_OK : mpi_fail(d, rc, "MPI_Bcast");
}

enum status world_local_allgather(struct world *w, const void *mine, size_t len, void *all,
				  struct diag *d)
{
	int rc = MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, w->local);

	return rc == MPI_SUCCESS ? ST_OK : mpi_fail(d, rc, "MPI_Allgather(node)");
}

enum status world_gather(struct world *w, const void *mine, size_t len, void *all, struct diag *d)
{
	int rc = MPI_Gather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, 0, w->comm);

	return rc == MPI_SUCCESS ? ST_OK : mpi_fail(d, rc, "MPI_Gather(statistics)");
}

double world_time(void)
{
	return MPI_Wtime();
}

void world_free(struct world *w)
{
	if (w->local != MPI_COMM_NULL)
		MPI_Comm_free(&w->local);
	w->local = MPI_COMM_NULL;
	if (w->inited) {
		MPI_Finalize();
		w->inited = 0;
	}
}
