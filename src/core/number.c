#include "number.h"

#include <stddef.h>

bool blob__parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    bool neg = *s == '-';
    const char *p = s + neg;
    if (!*p)
        return false;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    int64_t x = neg ? (v ? -(int64_t)(v - 1) - 1 : 0) : (int64_t)v;
    if (x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

bool blob__parse_decimal(const char *s, double lo, double hi, double *out)
{
    static const double tens[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                  1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    bool neg = *s == '-', point = false;
    const char *p = s + neg;
    if (*p < '0' || *p > '9')
        return false;
    uint64_t mantissa = 0; /* below 10^15: exact in a double */
    size_t after = 0;
    for (; *p; p++) {
        if (*p == '.' && !point) {
            point = true;
            continue;
        }
        if (*p < '0' || *p > '9')
            return false;
        mantissa = mantissa * 10 + (uint64_t)(*p - '0');
        if (mantissa >= 1000000000000000ull)
            return false;
        if (point && ++after >= sizeof tens / sizeof tens[0])
            return false;
    }
    double v = (double)mantissa / tens[after]; /* two exact values: one rounding */
    if (neg)
        v = -v;
    if (!(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}
