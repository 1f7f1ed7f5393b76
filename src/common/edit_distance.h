/* edit_distance.h: how far apart two short names are, so that an unknown key or command can be answered
 * with "did you mean ...?" instead of a bare "unknown". */
#ifndef QLT_EDIT_DISTANCE_H
#define QLT_EDIT_DISTANCE_H

#include <stdint.h>

/* Damerau-Levenshtein distance (optimal string alignment: insert, delete, substitute, swap two neighbours,
 * each costing 1). ASCII letters compare case-insensitively and '-' equals '_', so "Learning-Rate" and
 * "learning_rate" are 0 apart. */
int64_t qlt_edit_distance(const char *a, const char *b);

#endif
