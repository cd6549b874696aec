/* comm.c - releasing whichever communicator was set up. */
#include "dist/comm.h"

void comm_free(struct comm *c)
{
	if (c->ops != NULL)
		c->ops->fini(c->ctx);
	c->ops = NULL;
	c->ctx = NULL;
}
