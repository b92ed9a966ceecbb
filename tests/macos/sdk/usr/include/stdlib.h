/* Test stub of the macOS SDK's <stdlib.h> (see stdio.h). */
#ifndef AT_STUB_STDLIB_H
#define AT_STUB_STDLIB_H
#include <stddef.h>
void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void free(void *ptr);
void *aligned_alloc(size_t alignment, size_t size); /* macOS 10.15 and later */
char *getenv(const char *name);
int atoi(const char *str);
long strtol(const char *restrict str, char **restrict endptr, int base);
long long strtoll(const char *restrict str, char **restrict endptr, int base);
unsigned long long strtoull(const char *restrict str, char **restrict endptr, int base);
double strtod(const char *restrict str, char **restrict endptr);
void qsort(void *base, size_t nel, size_t width, int (*compar)(const void *, const void *));
void exit(int status) __attribute__((noreturn));
void abort(void) __attribute__((noreturn));
#endif
