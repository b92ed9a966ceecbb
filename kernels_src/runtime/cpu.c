/* cpu.c: refuse to plan on a CPU that lacks what the library's kernels need.
 *
 * A library meets other machines than the one it was built on: a home shared
 * over NFS, a container image moved between hosts, an aarch64 build copied to
 * another board.  Running an AVX-512 kernel on a CPU without it ends in SIGILL,
 * so the first plan checks the features the install recorded in the table
 * (at_library_features, HostInfo names separated by spaces) and every entry
 * point then fails with AT_ENOCPU and a message naming what is missing.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "at_internal.h"

#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif

/* Whether this CPU has one feature; 1 for names this build cannot test (the
 * table only records names of the families below). */
static int has_feature(const char *name, size_t len)
{
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(name, lit, len) == 0)
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (IS("avx512f")) return __builtin_cpu_supports("avx512f");
    if (IS("avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (IS("avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (IS("avx512dq")) return __builtin_cpu_supports("avx512dq");
    if (IS("avx2")) return __builtin_cpu_supports("avx2");
    if (IS("fma")) return __builtin_cpu_supports("fma");
    return 1;
#elif defined(__linux__) && defined(__aarch64__)
    if (IS("asimd")) return (getauxval(AT_HWCAP) >> 1) & 1;
    if (IS("sme2")) return (getauxval(AT_HWCAP2) >> 37) & 1;
    return 1;
#else
    (void)name;
    (void)len;
    return 1;
#endif
#undef IS
}

const char *at_required_features(void) { return at_library_features; }

static char missing_text[128];
static _Atomic int cpu_state; /* 0 not checked, 1 fine, -1 missing features */

int at_cpu_check(void)
{
    int state = atomic_load_explicit(&cpu_state, memory_order_acquire);
    if (state == 0) {
        /* Racing threads compute the same answer; the text is written before
         * the state that publishes it. */
        char missing[sizeof missing_text] = "";
        const char *p = at_library_features;
        while (*p) {
            while (*p == ' ') p++;
            const char *end = p;
            while (*end && *end != ' ') end++;
            if (end > p && !has_feature(p, (size_t)(end - p))) {
                size_t used = strlen(missing);
                snprintf(missing + used, sizeof missing - used, "%s%.*s", used ? " " : "",
                         (int)(end - p), p);
            }
            p = end;
        }
        state = missing[0] ? -1 : 1;
        if (state < 0) memcpy(missing_text, missing, sizeof missing);
        atomic_store_explicit(&cpu_state, state, memory_order_release);
    }
    if (state > 0) return AT_OK;
    at__set_error("this CPU lacks %s, which the library's kernels need (it was built for another "
                  "machine): run `autotune install` on this one",
                  missing_text);
    return AT_ENOCPU;
}
