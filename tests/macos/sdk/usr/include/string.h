/* Test stub of the macOS SDK's <string.h> (see stdio.h). */
#ifndef AT_STUB_STRING_H
#define AT_STUB_STRING_H
#include <stddef.h>
void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memmove(void *dst, const void *src, size_t len);
void *memset(void *b, int c, size_t len);
int memcmp(const void *s1, const void *s2, size_t n);
size_t strlen(const char *s);
int strcmp(const char *s1, const char *s2);
int strncmp(const char *s1, const char *s2, size_t n);
char *strstr(const char *haystack, const char *needle);
size_t strcspn(const char *s, const char *charset);
#endif
