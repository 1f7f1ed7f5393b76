/* whole_number.h: whether a double (a number read from JSON) is a whole number that an int32 holds. The range is
 * checked before the cast because converting an out-of-range double to an integer is undefined behaviour (a
 * dataset line with the id 62222222222222222222 once reached that cast). NaN is not a whole number. */
#ifndef QLT_COMMON_WHOLE_NUMBER_H
#define QLT_COMMON_WHOLE_NUMBER_H

#include <stdint.h>

static inline int qlt_is_int32(double d) {
    return d >= -2147483648.0 && d <= 2147483647.0 && d == (double)(int32_t)d;
}

#endif
