/* nf4_slice.c: NF4 tensors cut into runs of blocks (see nf4_slice.h). */
#include "nf4/nf4_slice.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int qlt_nf4_slice(const qlt_nf4 *whole, int64_t start, int64_t numel, qlt_nf4 *part) {
    const int64_t bs = whole->blocksize;
    if (start < 0 || numel < 1 || start + numel > whole->numel || start % bs ||
        (numel % bs && start + numel != whole->numel))
        return qlt_fail("NF4 values [%lld, %lld) of a tensor of %lld do not start and end on blocks of %lld",
                        (long long)start, (long long)(start + numel), (long long)whole->numel, (long long)bs);
    const int64_t b0 = start / bs;
    const int keep_nested = whole->double_quant && b0 % whole->nested_blocksize == 0;
    QLT_TRY(qlt_nf4_alloc_host(part, numel, (int)bs, keep_nested));
    memcpy(part->code, whole->code, 16 * sizeof(float));
    memcpy(part->codes, whole->codes + start / 2, (size_t)((numel + 1) / 2));
    if (keep_nested) {
        memcpy(part->nested_code, whole->nested_code, 256 * sizeof(float));
        memcpy(part->absmax_q, whole->absmax_q + b0, (size_t)part->nblocks);
        memcpy(part->nested_absmax, whole->nested_absmax + b0 / whole->nested_blocksize,
               sizeof(float) * (size_t)part->nested_nblocks);
        part->offset = whole->offset;
    } else if (whole->double_quant) {
        float *scales = qlt_xmalloc(sizeof(float) * (size_t)whole->nblocks); /* [nblocks] */
        qlt_nf4_absmax_f32(whole, scales);
        memcpy(part->absmax, scales + b0, sizeof(float) * (size_t)part->nblocks);
        free(scales);
    } else {
        memcpy(part->absmax, whole->absmax + b0, sizeof(float) * (size_t)part->nblocks);
    }
    return 0;
}
