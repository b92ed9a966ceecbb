/* Test stub of the macOS SDK's <dlfcn.h> (see stdio.h): what blas.c uses to find
 * the host's error handlers.  RTLD_DEFAULT is the SDK's value. */
#ifndef AT_STUB_DLFCN_H
#define AT_STUB_DLFCN_H
#define RTLD_DEFAULT ((void *)-2)
void *dlsym(void *handle, const char *symbol);
#endif
