/* Test stub of the macOS SDK's <sys/mman.h> (see ../stdio.h), with xnu's guards:
 * MAP_ANON is a BSD extension, hidden when _POSIX_C_SOURCE is defined unless
 * _DARWIN_C_SOURCE is too. */
#ifndef AT_STUB_SYS_MMAN_H
#define AT_STUB_SYS_MMAN_H
#include <stddef.h>
typedef long long off_t;
#define PROT_NONE 0x00
#define PROT_READ 0x01
#define PROT_WRITE 0x02
#define PROT_EXEC 0x04
#define MAP_SHARED 0x0001
#define MAP_PRIVATE 0x0002
#define MAP_FIXED 0x0010
#if !defined(_POSIX_C_SOURCE) || defined(_DARWIN_C_SOURCE)
#define MAP_FILE 0x0000
#define MAP_ANON 0x1000
#define MAP_ANONYMOUS MAP_ANON
#endif
#define MAP_FAILED ((void *)-1)
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset);
int mprotect(void *addr, size_t len, int prot);
int munmap(void *addr, size_t len);
#endif
