/* Test stub of the macOS SDK's <unistd.h> (see stdio.h): Darwin's sysconf names. */
#ifndef AT_STUB_UNISTD_H
#define AT_STUB_UNISTD_H
#define _SC_PAGESIZE 29
#define _SC_NPROCESSORS_CONF 57
#define _SC_NPROCESSORS_ONLN 58
long sysconf(int name);
typedef long ssize_t;
ssize_t write(int fd, const void *buf, unsigned long count);
#endif
