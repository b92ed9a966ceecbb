/* Test stub of the macOS SDK's <sys/sysctl.h> (see ../stdio.h). */
#ifndef AT_STUB_SYS_SYSCTL_H
#define AT_STUB_SYS_SYSCTL_H
#include <stddef.h>
int sysctlbyname(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
#endif
