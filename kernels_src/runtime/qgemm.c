/* qgemm.c: the quantised matmul's entry points (at_qmatmul_f32 of autotune.h).
 *
 * One call: quantise A per row and block (as autotune.quant.quantize_activations
 * does, bit for bit), cover C with the registry's kernels (at_qkernel.h) - the
 * preferred block kernel for whole groups of its mr rows, the preferred mr = 1
 * kernel for the rest - then add the bias and clamp.  Each registry entry names
 * the CPU features it needs; the first entry of a kind this CPU can run is used.
 * Where the library has no such kernel, the portable code
 * below computes with the same arithmetic: never a wrong answer, never SIGILL.
 * Compiled with the baseline flags, like the rest of the runtime.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__) && defined(__aarch64__)
#include <sys/sysctl.h>
#endif

#include "at_internal.h"
#include "at_qkernel.h"
#include "autotune.h"

#define QSUB 32
#define QPANEL 8

/* Round to nearest, ties to even, for |x| < 2^51: rint without a libm call (the
 * baseline ISA has no rounding instruction).  Adding 1.5 * 2^52 leaves no fraction
 * bits, so the addition rounds; C forbids folding (x + c) - c without -ffast-math,
 * which the runtime is never built with, and SSE arithmetic has no excess precision. */
static inline double round_even(double x)
{
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    return (x + magic) - magic;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AT_QUANT_AVX2 1

/* One whole block of A (`block` values, a multiple of 32) with AVX2: the scalar
 * code's arithmetic lane by lane, so its codes are bit-identical.  The quotient
 * a / sa is the same IEEE double division; it is clipped to [-127, 127] before
 * vcvtpd2dq rounds it (ties to even, MXCSR's default, as round_even assumes):
 * clipping to integers commutes with rounding.  Returns the sum of the codes, or
 * -1 << 30 for a block holding NaN or Inf (nothing written: the caller does it). */
__attribute__((target("avx2,fma"))) static int32_t quantize_block_avx2(const float *a, int64_t block, int8_t *q,
                                                                        float *scale_out)
{
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 largest = _mm256_set1_ps(3.4028234663852886e38f);
    __m256 amax = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int64_t k = 0; k < block; k += 8) {
        const __m256 x = _mm256_and_ps(_mm256_loadu_ps(a + k), magnitude);
        finite = _mm256_and_ps(finite, _mm256_cmp_ps(x, largest, _CMP_LE_OQ)); /* false for NaN, Inf */
        amax = _mm256_max_ps(amax, x);
    }
    if (_mm256_movemask_ps(finite) != 0xFF) return -(1 << 30);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float scale = (float)((double)_mm_cvtss_f32(m4) / 127.0);
    *scale_out = scale;
    if (!(scale > 0.0f)) {
        memset(q, 0, (size_t)block);
        return 0;
    }
    const __m256d divisor = _mm256_set1_pd((double)scale), hi = _mm256_set1_pd(127.0), lo = _mm256_set1_pd(-127.0);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t k = 0; k < block; k += 8) {
        const __m256 x = _mm256_loadu_ps(a + k);
        __m256d r0 = _mm256_div_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), divisor);
        __m256d r1 = _mm256_div_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), divisor);
        r0 = _mm256_max_pd(_mm256_min_pd(r0, hi), lo);
        r1 = _mm256_max_pd(_mm256_min_pd(r1, hi), lo);
        const __m256i codes = _mm256_set_m128i(_mm256_cvtpd_epi32(r1), _mm256_cvtpd_epi32(r0)); /* k+7 .. k */
        sum = _mm256_add_epi32(sum, codes);
        const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
        _mm_storel_epi64((__m128i *)(q + k), _mm_packs_epi16(c16, c16));
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    return _mm_cvtsi128_si32(s4);
}

static int have_avx2(void)
{
    static _Atomic int known = -1;
    int ok = atomic_load_explicit(&known, memory_order_relaxed);
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&known, ok, memory_order_relaxed);
    }
    return ok;
}
#endif

/* A[M, K] -> codes [M, Kp], scales and code sums [M, blocks]: per block
 * sa = float(max|a| / 127) (divided in double, as numpy does), qa = rint(a / sa)
 * clipped to [-127, 127]; a block with NaN or Inf gets sa = NaN and codes 0.
 * Whole blocks go through AVX2 where the CPU has it (a 64 x 4096 A took 1.1 ms
 * in scalar code, 7% of the product); the last, partial block stays scalar. */
static void quantize_rows(int64_t M, int64_t K, const float *A, int64_t lda, int64_t block, int64_t blocks,
                          int8_t *qa, float *sa, float *asum)
{
    const int64_t kp = blocks * block;
#ifdef AT_QUANT_AVX2
    const int vector = have_avx2();
#endif
    for (int64_t m = 0; m < M; ++m) {
        const float *a = A + m * lda;
        int8_t *q = qa + m * kp;
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t k0 = b * block, k1 = k0 + block < K ? k0 + block : K;
#ifdef AT_QUANT_AVX2
            if (vector && k1 - k0 == block) {
                const int32_t sum = quantize_block_avx2(a + k0, block, q + k0, &sa[m * blocks + b]);
                if (sum == -(1 << 30)) {
                    sa[m * blocks + b] = NAN;
                    memset(q + k0, 0, (size_t)block);
                    asum[m * blocks + b] = 0.0f;
                } else {
                    asum[m * blocks + b] = (float)sum;
                }
                continue;
            }
#endif
            float amax = 0.0f;
            int finite = 1;
            for (int64_t k = k0; k < k1; ++k) {
                const float x = fabsf(a[k]);
                if (!(x <= 3.4028234663852886e38f)) finite = 0; /* NaN or Inf */
                else if (x > amax) amax = x;
            }
            int32_t sum = 0;
            if (!finite) {
                sa[m * blocks + b] = NAN;
                memset(q + k0, 0, (size_t)block);
            } else {
                const float scale = (float)((double)amax / 127.0);
                sa[m * blocks + b] = scale;
                for (int64_t k = k0; k < k0 + block; ++k) {
                    int32_t code = 0;
                    if (k < k1 && scale > 0.0f) {
                        double r = round_even((double)a[k] / (double)scale);
                        code = r > 127.0 ? 127 : r < -127.0 ? -127 : (int32_t)r;
                    }
                    q[k] = (int8_t)code;
                    sum += code;
                }
            }
            asum[m * blocks + b] = (float)sum;
        }
    }
}

/* The portable kernel: one row, one panel, any kind; the kernels' arithmetic in C. */
static void portable_1x8(int kind, int64_t blocks, int64_t sub, const int8_t *qa, const float *sa,
                         const float *asum, const uint8_t *wq, const float *ws, const float *wz, float *C,
                         int load_c)
{
    float c[QPANEL] = {0};
    if (load_c) memcpy(c, C, sizeof c);
    const int64_t bytes = kind == AT_Q8 ? 256 : 128;
    for (int64_t b = 0; b < blocks; ++b) {
        int32_t isum[QPANEL] = {0};
        for (int64_t u = 0; u < sub; ++u) {
            const int64_t t = b * sub + u;
            const int8_t *a = qa + t * QSUB;
            const uint8_t *w = wq + t * bytes;
            for (int col = 0; col < QPANEL; ++col) {
                int32_t s = 0;
                if (kind == AT_Q8) {
                    for (int g = 0; g < 8; ++g)
                        for (int j = 0; j < 4; ++j) s += (int8_t)w[g * 32 + col * 4 + j] * a[4 * g + j];
                } else {
                    for (int v = 0; v < 4; ++v)
                        for (int j = 0; j < 4; ++j) {
                            const uint8_t byte = w[v * 32 + col * 4 + j];
                            s += (byte & 0x0F) * a[8 * v + j] + (byte >> 4) * a[8 * v + 4 + j];
                        }
                }
                isum[col] += s;
            }
        }
        const float scale_a = sa[b];
        for (int col = 0; col < QPANEL; ++col) {
            float x = (float)isum[col];
            if (kind == AT_Q4S) x -= 8.0f * asum[b];
            else if (kind == AT_Q4A) x -= wz[b * QPANEL + col] * asum[b];
            c[col] += x * (scale_a * ws[b * QPANEL + col]);
        }
    }
    memcpy(C, c, sizeof c);
}

/* The calling thread's scratch for the quantised A, kept between calls: glibc
 * serves an allocation of this size (256 KiB for 64 x 4096) with a fresh mmap,
 * whose pages fault and are cleared on every call.  Freed at thread exit. */
static _Thread_local struct { char *data; size_t size; } scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_key_init(void) { (void)pthread_key_create(&scratch_key, free); }

static char *workspace(size_t size)
{
    if (size <= scratch.size) return scratch.data;
    pthread_once(&scratch_once, scratch_key_init);
    char *data = realloc(scratch.data, size);
    if (!data) return NULL;
    scratch.data = data, scratch.size = size;
    (void)pthread_setspecific(scratch_key, data);
    return data;
}

#if defined(__APPLE__) && defined(__aarch64__)
static int sysctl_flag(const char *key)
{
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(key, &value, &size, NULL, 0) == 0 && value != 0;
}
#endif

/* Whether this CPU has one feature, by the names the registry's entries use.
 * Names this build cannot test count as absent: an entry that needs something
 * unknown is never run.  (cpu.c answers the same for the float kernels, but
 * install's validation library links qgemm.c without the rest of the runtime.) */
static int has_feature(const char *name, size_t len)
{
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(name, lit, len) == 0)
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (IS("avx2")) return __builtin_cpu_supports("avx2");
    if (IS("fma")) return __builtin_cpu_supports("fma");
    if (IS("avx512f")) return __builtin_cpu_supports("avx512f");
    if (IS("avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (IS("avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (IS("avx512vnni")) return __builtin_cpu_supports("avx512vnni");
    if (IS("avxvnni")) return __builtin_cpu_supports("avxvnni");
#elif defined(__linux__) && defined(__aarch64__)
    /* Bits of arch/arm64/include/uapi/asm/hwcap.h: HWCAP_ASIMD, HWCAP_ASIMDDP,
     * HWCAP2_I8MM, HWCAP2_SME, HWCAP2_SME2. */
    if (IS("asimd")) return (getauxval(AT_HWCAP) >> 1) & 1;
    if (IS("dotprod")) return (getauxval(AT_HWCAP) >> 20) & 1;
    if (IS("i8mm")) return (getauxval(AT_HWCAP2) >> 13) & 1;
    if (IS("sme")) return (getauxval(AT_HWCAP2) >> 23) & 1;
    if (IS("sme2")) return (getauxval(AT_HWCAP2) >> 37) & 1;
#elif defined(__APPLE__) && defined(__aarch64__)
    if (IS("asimd")) return 1; /* every Apple arm64 core */
    if (IS("dotprod")) return sysctl_flag("hw.optional.arm.FEAT_DotProd");
    if (IS("i8mm")) return sysctl_flag("hw.optional.arm.FEAT_I8MM");
    if (IS("sme")) return sysctl_flag("hw.optional.arm.FEAT_SME");
    if (IS("sme2")) return sysctl_flag("hw.optional.arm.FEAT_SME2");
#endif
#undef IS
    (void)name;
    (void)len;
    return 0;
}

/* Whether this CPU has every feature entry e names. */
static int runnable(const at_qkernel_entry *e)
{
    const char *p = e->features ? e->features : "";
    while (*p) {
        while (*p == ' ') p++;
        const char *end = p;
        while (*end && *end != ' ') end++;
        if (end > p && !has_feature(p, (size_t)(end - p))) return 0;
        p = end;
    }
    return 1;
}

static int kind_of(const at_qweights *w) { return w->bits == 8 ? AT_Q8 : w->symmetric ? AT_Q4S : AT_Q4A; }

static int check(int64_t M, const float *A, int64_t lda, const at_qweights *w, const float *clamp, float *C,
                 int64_t ldc)
{
    if (!w) { at__set_error("at_qmatmul_f32: no weights"); return AT_EINVAL; }
    if (w->bits != 4 && w->bits != 8) { at__set_error("at_qmatmul_f32: bits must be 4 or 8, not %d", w->bits); return AT_EINVAL; }
    if (w->bits == 8 && !w->symmetric) { at__set_error("at_qmatmul_f32: 8-bit weights are symmetric"); return AT_EINVAL; }
    if (w->block < QSUB || w->block % QSUB != 0) {
        at__set_error("at_qmatmul_f32: block must be a positive multiple of 32, not %lld", (long long)w->block);
        return AT_EINVAL;
    }
    if (w->k < 1 || w->n < 1 || M < 0) {
        at__set_error("at_qmatmul_f32: M=%lld, K=%lld, N=%lld", (long long)M, (long long)w->k, (long long)w->n);
        return AT_EINVAL;
    }
    if (lda < w->k || ldc < w->n) {
        at__set_error("at_qmatmul_f32: lda=%lld < K=%lld or ldc=%lld < N=%lld", (long long)lda, (long long)w->k,
                      (long long)ldc, (long long)w->n);
        return AT_EINVAL;
    }
    if (M > 0 && (!A || !C || !w->codes || !w->scales || (w->bits == 4 && !w->symmetric && !w->zeros))) {
        at__set_error("at_qmatmul_f32: a NULL operand");
        return AT_EINVAL;
    }
    if (clamp && !(clamp[0] <= clamp[1])) {
        at__set_error("at_qmatmul_f32: clamp must be {low, high} with low <= high");
        return AT_EINVAL;
    }
    return AT_OK;
}

static void finish_rows(int64_t M, int64_t N, const float *bias, const float *clamp, float *C, int64_t ldc)
{
    if (!bias && !clamp) return;
    for (int64_t m = 0; m < M; ++m) {
        float *c = C + m * ldc;
        for (int64_t n = 0; n < N; ++n) {
            float v = c[n];
            if (bias) v += bias[n];
            if (clamp) v = v < clamp[0] ? clamp[0] : v > clamp[1] ? clamp[1] : v; /* NaN stays NaN */
            c[n] = v;
        }
    }
}

/* How many blocks of K one slice covers: a group of panels' weights for a slice
 * (about SLICE_BYTES) stay in L1 while every row passes over them; the slices of
 * one group of panels follow each other, so its columns of C (M x nr) stay in L1
 * too instead of going through L3 once per slice.  Measured on
 * this Zen 3 VM (64 x 4096 x 4096, 4 bits, one thread, noisy): 17-22 GMAC/s with
 * whole-K panels, 28-38 with 4 KiB slices; 16 KiB slices fell in between. */
#define SLICE_BYTES 4096

/* Rows [m0, m0 + rows) and panels [p_begin, p_end) of C with kernel k (NULL: the
 * portable kernel, a row at a time); rows is a multiple of k's mr, p_begin and
 * p_end of its panels per tile.  Columns past N go to a tile on the stack. */
static void cover(const at_qkernel_entry *k, int64_t m0, int64_t rows, int kind, const int8_t *qa, const float *sa,
                  const float *asum, int64_t kp, int64_t blocks, int64_t sub, int64_t p_begin, int64_t p_end,
                  int64_t wstride, int64_t sstride, const at_qweights *w, float *C, int64_t ldc)
{
    float tile[8 * AT_QPAD_COLUMNS] = {0};
    const int64_t mr = k ? k->mr : 1, step = k ? k->nr / QPANEL : 1;
    const int64_t block_bytes = sub * (kind == AT_Q8 ? 256 : 128) * step;
    const int64_t slice = block_bytes >= SLICE_BYTES ? 1 : SLICE_BYTES / block_bytes;
    for (int64_t p = p_begin; p < p_end; p += step) {
        const int64_t n0 = p * QPANEL, width = step * QPANEL;
        const int whole = n0 + width <= w->n;
        const int64_t cols = w->n - n0 < width ? w->n - n0 : width;
        for (int64_t b0 = 0; b0 < blocks; b0 += slice) {
            const int64_t nb = blocks - b0 < slice ? blocks - b0 : slice;
            const int64_t code_offset = b0 * sub * (kind == AT_Q8 ? 256 : 128);
            const uint8_t *wq = w->codes + p * wstride + code_offset;
            const float *ws = w->scales + p * sstride + b0 * QPANEL;
            const float *wz = w->zeros ? w->zeros + p * sstride + b0 * QPANEL : NULL;
            for (int64_t m = m0; m < m0 + rows; m += mr) {
                float *out = whole ? C + m * ldc + n0 : tile;
                const int64_t ldo = whole ? ldc : width;
                if (!whole && b0 > 0)
                    for (int64_t r = 0; r < mr && cols > 0; ++r)
                        memcpy(tile + r * width, C + (m + r) * ldc + n0, sizeof(float) * (size_t)cols);
                const int64_t a_off = m * kp + b0 * sub * QSUB, s_off = m * blocks + b0;
                if (k) {
                    k->fn(nb, sub, qa + a_off, kp, sa + s_off, asum + s_off, blocks, wq, wstride, ws, wz, sstride,
                          out, ldo, b0 > 0);
                } else {
                    portable_1x8(kind, nb, sub, qa + a_off, sa + s_off, asum + s_off, wq, ws, wz, out, b0 > 0);
                }
                if (!whole)
                    for (int64_t r = 0; r < mr && cols > 0; ++r)
                        memcpy(C + (m + r) * ldc + n0, tile + r * width, sizeof(float) * (size_t)cols);
            }
        }
    }
}

/* One call's work, shared by the threads: each takes a run of whole units of
 * AT_QPAD_COLUMNS columns (a multiple of every kernel's nr), so a column of C is
 * computed by the same kernel with the same slices of K whatever the thread
 * count, and C is bit for bit the same for any number of threads. */
typedef struct {
    const at_qkernel_entry *main, *one;
    int64_t rows_main, M, kp, blocks, sub, wstride, sstride, units, ldc;
    int kind, threads;
    const int8_t *qa;
    const float *sa, *asum;
    const at_qweights *w;
    float *C;
} qjob;

#define UNIT_PANELS (AT_QPAD_COLUMNS / QPANEL)

static void qjob_part(void *ctx, int t)
{
    const qjob *j = ctx;
    const int64_t u0 = j->units * t / j->threads, u1 = j->units * (t + 1) / j->threads;
    if (u0 == u1) return;
    /* Whole groups of the main kernel's rows, then the rest one row at a time.  A
     * group of panels is the outer loop: its weights (nr/8 * K/2 bytes for 4 bits)
     * stay in cache while every row passes over them, and are read from memory once. */
    cover(j->main, 0, j->rows_main, j->kind, j->qa, j->sa, j->asum, j->kp, j->blocks, j->sub, u0 * UNIT_PANELS,
          u1 * UNIT_PANELS, j->wstride, j->sstride, j->w, j->C, j->ldc);
    cover(j->one, j->rows_main, j->M - j->rows_main, j->kind, j->qa, j->sa, j->asum, j->kp, j->blocks, j->sub,
          u0 * UNIT_PANELS, u1 * UNIT_PANELS, j->wstride, j->sstride, j->w, j->C, j->ldc);
}

/* Multiply-adds below which one more thread costs more than it saves: waking a
 * pool worker and joining it takes some 10-50 us here, 2-4 million int8 MACs. */
#define MACS_PER_THREAD (1 << 22)

/* C with `main` on whole groups of its rows and `one` (mr = 1) on the rest;
 * either may be NULL (the portable kernel then does its rows).  The library's
 * thread count (at_set_num_threads, AUTOTUNE_NUM_THREADS) splits the columns. */
static int run(const at_qkernel_entry *main, const at_qkernel_entry *one, int64_t M, const float *A, int64_t lda,
               const at_qweights *w, const float *bias, const float *clamp, float *C, int64_t ldc)
{
    int status = check(M, A, lda, w, clamp, C, ldc);
    if (status != AT_OK || M == 0) return status;
    const int kind = kind_of(w);
    const int64_t blocks = (w->k + w->block - 1) / w->block, kp = blocks * w->block, sub = w->block / QSUB;
    const int64_t units = (w->n + AT_QPAD_COLUMNS - 1) / AT_QPAD_COLUMNS;
    const int64_t wstride = kp / QSUB * (kind == AT_Q8 ? 256 : 128), sstride = blocks * QPANEL;
    const size_t scale_bytes = sizeof(float) * (size_t)(M * blocks);
    char *space = workspace((size_t)(M * kp) + 2 * scale_bytes);
    if (!space) {
        at__set_error("at_qmatmul_f32: no memory for the quantised A (%lld bytes)", (long long)(M * kp));
        return AT_ENOMEM;
    }
    float *sa = (float *)space, *asum = (float *)(space + scale_bytes);
    int8_t *qa = (int8_t *)(space + 2 * scale_bytes);
    /* On the calling thread: 0.1 ms for a 64 x 4096 A, below a pool region's worth splitting. */
    quantize_rows(M, w->k, A, lda, w->block, blocks, qa, sa, asum);

    const double macs = (double)M * (double)kp * (double)(units * AT_QPAD_COLUMNS);
    int64_t threads = at__num_threads();
    if (threads > units) threads = units;
    if (threads > macs / MACS_PER_THREAD) threads = (int64_t)(macs / MACS_PER_THREAD);
    if (threads < 1) threads = 1;
    qjob job = {main, one, main ? M / main->mr * main->mr : 0, M, kp, blocks, sub, wstride, sstride, units, ldc,
                kind, (int)threads, qa, sa, asum, w, C};
    if (threads > 1) at__parallel((int)threads, qjob_part, &job);
    else qjob_part(&job, 0);
    finish_rows(M, w->n, bias, clamp, C, ldc);
    return AT_OK;
}

/* The first kernel of `kind` this CPU runs with mr > 1 (rows > 1) or mr == 1
 * (rows == 1); NULL for none.  The answer cannot change while the process runs,
 * so it is asked once per kind and form: entry index + 1, -1 for none, 0 not yet. */
static const at_qkernel_entry *preferred(int kind, int rows)
{
    static _Atomic int chosen[AT_QKINDS][2];
    if (kind < 0 || kind >= AT_QKINDS) return NULL;
    _Atomic int *slot = &chosen[kind][rows > 1];
    int known = atomic_load_explicit(slot, memory_order_relaxed);
    if (known == 0) {
        known = -1;
        for (int i = 0; i < at_qkernel_count; ++i) {
            const at_qkernel_entry *e = &at_qkernel_table[i];
            if (e->kind == kind && (rows > 1 ? e->mr > 1 : e->mr == 1) && runnable(e)) {
                known = i + 1;
                break;
            }
        }
        atomic_store_explicit(slot, known, memory_order_relaxed);
    }
    return known > 0 ? &at_qkernel_table[known - 1] : NULL;
}

int at_qmatmul_f32(int64_t M, const float *A, int64_t lda, const at_qweights *w, const float *bias,
                   const float *clamp, float *C, int64_t ldc)
{
    if (!w) return check(M, A, lda, w, clamp, C, ldc);
    const int kind = kind_of(w);
    return run(M > 1 ? preferred(kind, 2) : NULL, preferred(kind, 1), M, A, lda, w, bias, clamp, C, ldc);
}

int at_qmatmul_f32_using(const char *kernel, int64_t M, const float *A, int64_t lda, const at_qweights *w,
                         const float *bias, const float *clamp, float *C, int64_t ldc)
{
    if (!w) return check(M, A, lda, w, clamp, C, ldc);
    for (int i = 0; kernel && i < at_qkernel_count; ++i) {
        const at_qkernel_entry *e = &at_qkernel_table[i];
        if (strcmp(e->name, kernel) != 0) continue;
        if (e->kind != kind_of(w) || !runnable(e)) break;
        return e->mr > 1 ? run(e, NULL, M, A, lda, w, bias, clamp, C, ldc)
                         : run(NULL, e, M, A, lda, w, bias, clamp, C, ldc);
    }
    at__set_error("at_qmatmul_f32_using: no runnable kernel %s for %d-bit %s weights", kernel ? kernel : "(null)",
                  w->bits, w->symmetric ? "symmetric" : "asymmetric");
    return AT_ENOKERNEL;
}

const char *at_qkernel_name(int index)
{
    return index >= 0 && index < at_qkernel_count ? at_qkernel_table[index].name : NULL;
}
