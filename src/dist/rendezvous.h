/* rendezvous.h: how the ranks of a data parallel job first meet: rank 0 listens on MASTER_ADDR:MASTER_PORT
 * (TCP), every other rank connects and says who it is, and once all have arrived rank 0 sends each the same
 * blob (NCCL's unique id). Bounded by a timeout whose error names the ranks that did not arrive. */
#ifndef QLT_RENDEZVOUS_H
#define QLT_RENDEZVOUS_H

#include <stddef.h>

/* Rank 0: blob [bytes] is sent to ranks 1 .. world-1. Other ranks: blob receives rank 0's. 0 when every rank
 * arrived (rank 0) / the blob came (others) within timeout_s; else -1 with the error. */
int qlt_rendezvous_share(const char *addr, int port, int rank, int world, double timeout_s, void *blob,
                         size_t bytes);

#endif
