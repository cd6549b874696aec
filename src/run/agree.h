/*
 * agree.h - the session's agreement, handed to the parts of a run that must
 * agree across the ranks half-way through their work (a checkpoint written on
 * rank 0, a resume read there, the trace merged there).
 *
 * Every rank passes its status and gets the verdict; the lowest rank that saw a
 * failure has printed its message. The session (run/session.c) provides it.
 */
#ifndef DDPT_AGREE_H
#define DDPT_AGREE_H

#include "core/status.h"

struct agreement {
	enum status (*fn)(void *arg, enum status st);
	void *arg;
};

static inline enum status agreement_reach(const struct agreement *a, enum status st)
{
	return a->fn(a->arg, st);
}

#endif
