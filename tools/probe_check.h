/* probe_check.h: the GEMM measuring tools' one error check (tools/gemm_probe.cu, tools/gemm_beta_probe.cu): a
 * CUDA or cuBLAS call that returns non-zero ends the program, naming the tool, the call, its code and the line.
 * The tools are single-file programs with nothing to recover. */
#ifndef QLT_PROBE_CHECK_H
#define QLT_PROBE_CHECK_H

#include <cstdio>
#include <cstdlib>

#define PROBE_CHECK(tool, x)                                                              \
    do {                                                                                  \
        int e_ = (int)(x);                                                                \
        if (e_ != 0) {                                                                    \
            fprintf(stderr, "%s: %s failed (%d) at line %d\n", tool, #x, e_, __LINE__);  \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#endif
