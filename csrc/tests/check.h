/*
 * check.h — the C core's minimal test harness.  CHECK records a failure and goes on;
 * check_report() prints "N passed, N failed" and returns the process exit code.
 */
#ifndef SC_CHECK_H
#define SC_CHECK_H

#include <stdio.h>

static int check_passed_, check_failed_;

#define CHECK(cond)                                                               \
    do {                                                                          \
        if (cond) {                                                               \
            check_passed_++;                                                      \
        } else {                                                                  \
            check_failed_++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                         \
    } while (0)

static inline int check_report(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif
