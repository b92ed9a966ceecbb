/* features.c: which CPU features this machine has, by the names kernel records use.
 *
 * The float kernels (at_kernel.requires, cpu.c) and the quantised ones
 * (at_qkernel_entry.features, qgemm.c) name what they need as space-separated
 * HostInfo names; both ask here, so a name means the same test everywhere.  Its
 * own file because install's validation library for the quantised kernels links
 * qgemm.c without cpu.c (which needs the float kernel table).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall(), for AMX's arch_prctl */
#endif
#include <string.h>

#include "at_internal.h"

#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__) && defined(__aarch64__)
#include <sys/sysctl.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* CPUID leaf 7, subleaf 0, EDX: AMX-TILE is bit 24, AMX-INT8 bit 25.  Read directly:
 * __builtin_cpu_supports knows the AMX names only from GCC 11 and recent clang. */
static int amx_cpuid(int bit)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> bit) & 1);
}
#endif

#if defined(__linux__) && defined(__x86_64__)
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Linux leaves AMX's tile data (8 KiB of state) off until a process asks for it; a
 * tile instruction before that dies of SIGILL.  Asked once per process, on a CPU that
 * has the tiles: where the kernel refuses (before 5.16, a seccomp filter, a hypervisor
 * without XFD), the AMX features test false and qgemm.c runs the other kernels. */
static int amx_permitted(void)
{
    static _Atomic int known = -1;
    int ok = atomic_load_explicit(&known, memory_order_relaxed);
    if (ok < 0) {
        ok = amx_cpuid(24) &&
             syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
        atomic_store_explicit(&known, ok, memory_order_relaxed);
    }
    return ok;
}
#elif defined(__x86_64__) || defined(__i386__)
static int amx_permitted(void) { return 0; } /* no request to make: no tiles */
#endif

#if defined(__APPLE__) && defined(__aarch64__)
static int sysctl_flag(const char *key)
{
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(key, &value, &size, NULL, 0) == 0 && value != 0;
}
#endif

int at__has_feature(const char *name, size_t len)
{
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(name, lit, len) == 0)
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (IS("avx2")) return __builtin_cpu_supports("avx2");
    if (IS("fma")) return __builtin_cpu_supports("fma");
    if (IS("avx512f")) return __builtin_cpu_supports("avx512f");
    if (IS("avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (IS("avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (IS("avx512dq")) return __builtin_cpu_supports("avx512dq");
    if (IS("avx512_vnni")) return __builtin_cpu_supports("avx512vnni");
    if (IS("avx_vnni")) return __builtin_cpu_supports("avxvnni");
    if (IS("amx_tile")) return amx_permitted();
    if (IS("amx_int8")) return amx_cpuid(25) && amx_permitted();
#elif defined(__linux__) && defined(__aarch64__)
    /* Bits of arch/arm64/include/uapi/asm/hwcap.h: HWCAP_ASIMD, HWCAP_ASIMDDP,
     * HWCAP2_I8MM, HWCAP2_SME, HWCAP2_SME_F64F64, HWCAP2_SME2. */
    if (IS("asimd")) return (getauxval(AT_HWCAP) >> 1) & 1;
    if (IS("asimddp")) return (getauxval(AT_HWCAP) >> 20) & 1;
    if (IS("i8mm")) return (getauxval(AT_HWCAP2) >> 13) & 1;
    if (IS("sme")) return (getauxval(AT_HWCAP2) >> 23) & 1;
    if (IS("smef64f64")) return (getauxval(AT_HWCAP2) >> 25) & 1;
    if (IS("sme2")) return (getauxval(AT_HWCAP2) >> 37) & 1;
#elif defined(__APPLE__) && defined(__aarch64__)
    if (IS("asimd")) return 1; /* every Apple arm64 core */
    if (IS("asimddp")) return sysctl_flag("hw.optional.arm.FEAT_DotProd");
    if (IS("i8mm")) return sysctl_flag("hw.optional.arm.FEAT_I8MM");
    if (IS("sme")) return sysctl_flag("hw.optional.arm.FEAT_SME");
    if (IS("smef64f64")) return sysctl_flag("hw.optional.arm.FEAT_SME_F64F64");
    if (IS("sme2")) return sysctl_flag("hw.optional.arm.FEAT_SME2");
#endif
#undef IS
    (void)name;
    (void)len;
    return 0;
}

void at__each_feature(const char *list, void (*fn)(const char *, size_t, void *), void *ctx)
{
    const char *p = list ? list : "";
    while (*p) {
        while (*p == ' ') p++;
        const char *end = p;
        while (*end && *end != ' ') end++;
        if (end > p) fn(p, (size_t)(end - p), ctx);
        p = end;
    }
}

static void check_one(const char *name, size_t len, void *ctx)
{
    if (!at__has_feature(name, len)) *(int *)ctx = 0;
}

int at__has_features(const char *list)
{
    int ok = 1;
    at__each_feature(list, check_one, &ok);
    return ok;
}
