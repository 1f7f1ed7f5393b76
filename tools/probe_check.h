/* probe_check.h: the measuring tools' error checks (tools/*_probe.cu): a CUDA, cuBLAS or qlora-train call that
 * returns non-zero ends the program, naming the tool, the call, its code and the line. The tools are
 * single-file programs with nothing to recover. */
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

/* The same for the tools linked with qlora-train's library (the file includes common/error.h): its calls say why
 * through qlt_error(); exit status 2. */
#define PROBE_CHECK_QLT(tool, x)                                                                       \
    do {                                                                                              \
        long e_ = (long)(x);                                                                          \
        if (e_ != 0) {                                                                                \
            fprintf(stderr, "%s: %s failed (%ld) at line %d: %s\n", tool, #x, e_, __LINE__, qlt_error()); \
            exit(2);                                                                                  \
        }                                                                                             \
    } while (0)

#endif
