/* backend.c - starting and stopping whichever backend was chosen. */
#include "backend/backend.h"

enum status backend_init(struct backend *be, const struct backend_ops *ops,
			 const struct backend_config *cfg, struct diag *d)
{
	be->ops = ops;
	be->ctx = NULL;
	return ops->init(&be->ctx, cfg, d);
}

void backend_free(struct backend *be)
{
	if (be->ops != NULL)
		be->ops->fini(be->ctx);
	be->ops = NULL;
	be->ctx = NULL;
}
