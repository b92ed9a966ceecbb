/* Test stub of the macOS SDK's <stdio.h>: only what kernels_src/runtime uses, with
 * Darwin's names (stderr is libSystem's __stderrp).  For compile checks of the
 * Mach-O build (tests/test_macos_build.py); never shipped, never run. */
#ifndef AT_STUB_STDIO_H
#define AT_STUB_STDIO_H
#include <stdarg.h>
#include <stddef.h>
typedef struct __sFILE FILE;
extern FILE *__stdoutp;
extern FILE *__stderrp;
#define stdout __stdoutp
#define stderr __stderrp
#define _IOFBF 0
#define _IOLBF 1
#define _IONBF 2
int printf(const char *restrict format, ...);
int putchar(int c);
int setvbuf(FILE *restrict stream, char *restrict buf, int type, size_t size);
int fprintf(FILE *restrict stream, const char *restrict format, ...);
int snprintf(char *restrict s, size_t n, const char *restrict format, ...);
int vfprintf(FILE *restrict stream, const char *restrict format, va_list ap);
int vsnprintf(char *restrict s, size_t n, const char *restrict format, va_list ap);
int fflush(FILE *stream);
#endif
