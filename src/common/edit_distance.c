/* edit_distance.c: Damerau-Levenshtein distance over three rolling rows (see edit_distance.h). */
#include "common/edit_distance.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Folds the differences a user does not mean: letter case and '-' versus '_'. */
static int fold(char c) {
    if (c == '-') return '_';
    return tolower((unsigned char)c);
}

static int64_t min3(int64_t a, int64_t b, int64_t c) {
    int64_t m = a < b ? a : b;
    return m < c ? m : c;
}

int64_t qlt_edit_distance(const char *a, const char *b) {
    int64_t n = (int64_t)strlen(a), m = (int64_t)strlen(b);
    if (n == 0) return m;
    if (m == 0) return n;
    /* rows[0] = row i-2, rows[1] = row i-1, rows[2] = row i; each has m + 1 cells. */
    int64_t *cells = qlt_xmalloc(3 * (size_t)(m + 1) * sizeof *cells);
    int64_t *prev2 = cells, *prev = cells + (m + 1), *cur = cells + 2 * (m + 1);
    for (int64_t j = 0; j <= m; j++) prev[j] = j;
    for (int64_t i = 1; i <= n; i++) {
        cur[0] = i;
        for (int64_t j = 1; j <= m; j++) {
            int64_t cost = fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1;
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) && fold(a[i - 2]) == fold(b[j - 1]) &&
                prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        int64_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    int64_t d = prev[m];
    free(cells);
    return d;
}
