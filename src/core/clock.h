/* Internal: the monotonic clock, in seconds, for deadlines, timeouts and waits. Depends
 * on nothing else of the library. Never installed. */
#ifndef BLOB_CLOCK_H
#define BLOB_CLOCK_H

#include <time.h>

/* Monotonic seconds (CLOCK_MONOTONIC). */
double blob__now(void);

/* Sleep that many seconds (nothing for a number not > 0), through interruptions. */
void blob__sleep(double seconds);

/* The monotonic time that many seconds from now, as pthread_cond_timedwait takes it on a
 * condition variable set to CLOCK_MONOTONIC. */
struct timespec blob__time_after(double seconds);

#endif
