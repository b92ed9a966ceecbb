/* error.c: the text of the last error, per thread (at_last_error).
 *
 * Thread-locals stay small: a library opened with dlopen keeps its TLS in
 * glibc's static reserve (the front cache's pointer is initial-exec), a few
 * hundred bytes shared by every library loaded later; so the text lives on the
 * heap, from the thread's first error to its exit.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "at_internal.h"

/* at_cpu_check names every missing feature and the library's vector lengths,
 * which passed 256 bytes on CPUs that lack several; messages stay one allocation. */
#define AT_ERROR_TEXT 1024

static _Thread_local char *at_error_text;
static pthread_key_t error_key;
static pthread_once_t error_once = PTHREAD_ONCE_INIT;
static void error_key_init(void) { (void)pthread_key_create(&error_key, free); }

void at__set_error(const char *fmt, ...)
{
    if (!at_error_text) {
        pthread_once(&error_once, error_key_init);
        at_error_text = malloc(AT_ERROR_TEXT);
        if (!at_error_text) return; /* no memory for the message: the code still says it */
        (void)pthread_setspecific(error_key, at_error_text);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at_error_text, AT_ERROR_TEXT, fmt, ap);
    va_end(ap);
}

const char *at_last_error(void) { return at_error_text ? at_error_text : ""; }
