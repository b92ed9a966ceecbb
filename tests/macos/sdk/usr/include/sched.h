/* Test stub of the macOS SDK's <sched.h> (see stdio.h): what the runtime calls,
 * declared as libSystem exports it. */
#ifndef AT_STUB_SCHED_H
#define AT_STUB_SCHED_H
int sched_yield(void);
#endif
