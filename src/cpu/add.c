/* add.c: the elementwise sum of two float32 arrays (the residual add): one IEEE addition an element, the same
 * in both modes, across threads for large arrays. */
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"

QLT_CPU_VECTOR
void qlt_cpu_add(float *out, const float *a, const float *b, int64_t count) {
#pragma omp parallel for simd schedule(static) if (count > (1 << 18))
    for (int64_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}
