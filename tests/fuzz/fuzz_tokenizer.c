/* fuzz_tokenizer.c: libFuzzer harness for tokenizer.json (src/tokenizer): the input is the file, then
 * optionally (after a "\n--8<--\n" line) a text. What loads encodes the text (or a fixed one) and decodes
 * the ids back, so a vocabulary or merge list the loader accepted is also exercised. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[2];
    size_t lens[2];
    int n = fuzz_split(data, size, parts, lens, 2);
    qlt_tokenizer *tok = NULL;
    int rc = qlt_tokenizer_load_json(&tok, (const char *)parts[0], lens[0], "fuzz/tokenizer.json");
    fuzz_check_error(rc);
    if (rc == 0) {
        static const char kText[] = "Hello world! 123 <|im_start|> caf\xc3\xa9  \n\tend";
        const char *text = n > 1 ? (const char *)parts[1] : kText;
        size_t len = n > 1 ? lens[1] : sizeof kText - 1;
        qlt_ids ids = {0};
        rc = qlt_tokenizer_encode(tok, text, len, &ids);
        fuzz_check_error(rc);
        if (rc == 0) {
            char *out = NULL;
            size_t out_len = 0;
            fuzz_check_error(qlt_tokenizer_decode(tok, ids.data, ids.len, &out, &out_len));
            free(out);
        }
        free(ids.data);
        qlt_tokenizer_free(tok);
    }
    return 0;
}
