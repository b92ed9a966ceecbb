/* features.c: which CPU features this machine has, by the names kernel records use.
 *
 * The float kernels (at_kernel.requires, cpu.c) and the quantised ones
 * (at_qkernel_entry.features, qgemm.c) name what they need as space-separated
 * HostInfo names; both ask here, so a name means the same test everywhere.  Its
 * own file because install's validation library for the quantised kernels links
 * qgemm.c without cpu.c (which needs the float kernel table).
 */
#include <string.h>

#include "at_internal.h"

#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__) && defined(__aarch64__)
#include <sys/sysctl.h>
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
