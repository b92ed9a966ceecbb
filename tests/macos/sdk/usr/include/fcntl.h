/* Test stub of the macOS SDK's <fcntl.h> (see stdio.h): what record.c uses to append
 * AUTOTUNE_RECORD's lines.  The flag values are Darwin's. */
#ifndef AT_STUB_FCNTL_H
#define AT_STUB_FCNTL_H
#define O_WRONLY 0x0001
#define O_APPEND 0x0008
#define O_CREAT 0x0200
#define O_CLOEXEC 0x01000000
int open(const char *path, int flags, ...);
#endif
