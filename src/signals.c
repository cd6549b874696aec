/* signals.c - a flag for the first stop signal, an immediate exit on the second. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "signals.h"

static volatile sig_atomic_t first_signal;

static void on_signal(int sig)
{
	if (first_signal != 0) {
		static const char msg[] = "ddptrain: second signal: stopping now, without a checkpoint\n";

		(void)!write(STDERR_FILENO, msg, sizeof msg - 1);
		_exit(128 + sig);
	}
	first_signal = sig;
}

void signals_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
}

int signals_pending(void)
{
	return first_signal;
}
