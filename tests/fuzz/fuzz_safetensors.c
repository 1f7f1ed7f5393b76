/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader (src/formats/safetensors.c): the input is
 * one .safetensors file (8-byte header length, JSON header, data). What opens is read back in full, so an
 * offset or shape the validation let through shows up as an out-of-bounds read. */
#include <stdint.h>
#include <stdlib.h>

#include "common/dtype.h"
#include "formats/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = fuzz_write("model.safetensors", data, size);
    qlt_st_file f;
    int rc = qlt_st_open(&f, path);
    fuzz_check_error(rc);
    if (rc == 0) {
        for (int64_t i = 0; i < f.n_tensors; i++) {
            const qlt_st_tensor *t = &f.tensors[i];
            if (t->numel > (1 << 20) || !qlt_dtype_is_float(t->dtype)) continue;
            float *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
            qlt_st_read_f32(t, buf);
            int64_t nan, inf, first;
            qlt_st_count_nonfinite(t, &nan, &inf, &first);
            free(buf);
            if (qlt_st_find(&f, t->name) == NULL) abort();
        }
        qlt_st_close(&f);
    }
    free(path);
    return 0;
}
