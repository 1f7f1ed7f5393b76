/* launcher.h: `qlora-train train --gpus N`: the same command started once per GPU of this machine as ranks
 * 0 .. N-1 of a data parallel job (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free
 * MASTER_PORT set for each), watched until they end. */
#ifndef QLT_LAUNCHER_H
#define QLT_LAUNCHER_H

/* argv [argc]: the command line to run in each rank (argv[0] is replaced by this executable). Waits for every
 * rank; when one fails (a non-zero status other than the 130 / 143 of an interrupted run, or a signal) the
 * others get SIGTERM (SIGKILL after grace_s) and the error names the rank. Returns the exit status the
 * launcher should end with (0, 130 / 143 when the ranks were interrupted, else 1 with the error recorded). */
int qlt_launch_ranks(int argc, char **argv, int n_ranks, double grace_s);

#endif
