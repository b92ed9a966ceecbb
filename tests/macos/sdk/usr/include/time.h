/* Test stub of the macOS SDK's <time.h> (see stdio.h): clock_gettime and Darwin's
 * clock ids (macOS 10.12 and later). */
#ifndef AT_STUB_TIME_H
#define AT_STUB_TIME_H
struct timespec {
    long tv_sec;
    long tv_nsec;
};
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE >= 199309L || defined(_DARWIN_C_SOURCE)
typedef enum {
    _CLOCK_REALTIME = 0,
    _CLOCK_MONOTONIC = 6,
    _CLOCK_PROCESS_CPUTIME_ID = 12,
    _CLOCK_THREAD_CPUTIME_ID = 16
} clockid_t;
#define CLOCK_REALTIME _CLOCK_REALTIME
#define CLOCK_MONOTONIC _CLOCK_MONOTONIC
int clock_gettime(clockid_t clock_id, struct timespec *tp);
#endif
#endif
