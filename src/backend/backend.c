/* backend.c: the names of a step's profiling phases (backend.h), shared by every backend and `bench`. */
#include "backend/backend.h"

const char *qlt_phase_name(qlt_phase p) {
    static const char *names[QLT_PHASE_COUNT] = {"forward GEMMs", "backward GEMMs", "LoRA", "attention", "loss",
                                                 "elementwise", "NF4 dequant", "optimizer", "other"};
    return p >= 0 && p < QLT_PHASE_COUNT ? names[p] : "?";
}
