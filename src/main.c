/*
 * main.c - ddptrain: parse the command line, start the world, run one session,
 * choose the exit code.
 *
 * Usage errors, --help and --version are decided from the command line alone:
 * a process started without a launcher answers them without starting MPI. Under
 * a launcher every rank joins the agreement first, so one rank's bad flag or
 * --version stops every rank with the same code. Everything after that is the
 * session's (run/session.h).
 */
#include <stdio.h>
#include <string.h>

#include "core/signals.h"  /* signals_install, signals_stop_file */
#include "core/status.h"   /* status_exit_code */
#include "core/vmspace.h"  /* vmspace_init */
#include "comm/world.h"    /* world_launch_size, world_watchdog_start, world_init */
#include "run/options.h"   /* options_parse, options_print_help, options_print_version */
#include "run/preflight.h" /* preflight_launch */
#include "run/session.h"   /* struct session, session_* */

/* Without a launcher: print what the command line alone decided and exit. */
static int answer_alone(const struct options *o, enum status st, const struct diag *d)
{
	if (st == ST_STOP && o->help)
		options_print_help(stdout);
	else if (st == ST_STOP)
		options_print_version(stdout);
	else
		fprintf(stderr, "ddptrain: %s\n", d->msg);
	return status_exit_code(st);
}

/* The watchdog watches MPI's start-up and every collective after it, to MPI_Finalize. */
static enum status start_world(struct world *w, double timeout, int *argc, char ***argv)
{
	struct diag d = {0};
	enum status st = world_watchdog_start(w, timeout, &d);

	if (st == ST_OK)
		st = world_init(w, argc, argv, &d);
	if (st != ST_OK) {
		fprintf(stderr, "ddptrain: %s\n", d.msg);
		world_free(w);
	}
	return st;
}

int main(int argc, char **argv)
{
	struct session s;
	enum status st;

	memset(&s, 0, sizeof s);
	/* Handlers first: a stop signal during MPI's start-up is a graceful stop too. */
	signals_install();
	/* Before MPI starts its threads: under ulimit -v, what a rank maps does not depend on it. */
	vmspace_init();
	/* The command line alone decides --help, --version (ST_STOP) and usage errors. */
	st = options_parse(&s.o, argc, argv, &s.d);
	signals_stop_file(st == ST_OK ? s.o.stop_file : NULL); /* before the watchdog thread */
	if (st == ST_OK && (s.o.help || s.o.version))
		st = ST_STOP;
	/* Alone: answer without starting MPI, which would spawn orted first (and wait for a
	 * name lookup where localhost is missing from /etc/hosts). */
	if (st != ST_OK && world_launch_size() == 1)
		return answer_alone(&s.o, st, &s.d);
	{
		enum status wst = start_world(&s.w, s.o.timeout, &argc, &argv);

		if (wst != ST_OK)
			return status_exit_code(wst);
	}
	/* With other ranks, all agree: one rank's --version or bad flag stops every rank. */
	st = session_agree(&s, st);
	if (st == ST_OK)
		st = session_agree(&s, preflight_launch(&s.o, &s.w, &s.d));
	if (st == ST_OK)
		st = session_setup(&s);
	if (st == ST_OK)
		st = session_run(&s);
	session_end(&s, st);
	return status_exit_code(st);
}
