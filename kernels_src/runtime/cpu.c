/* cpu.c: which of the library's kernels this CPU can run.
 *
 * A library meets other machines than the one it was built on: a home shared
 * over NFS, a container image moved between hosts, the one aarch64 library
 * copied from a phone with SME2 to a Graviton without it, or to a core whose
 * streaming vector length differs from the one its SME2 kernels were
 * generated for.  Running an instruction the CPU lacks ends in SIGILL, and an
 * SME2 kernel at another vector length reads and writes the wrong extents.
 * So every kernel record names the features it needs (at_kernel.requires,
 * HostInfo names) and, for SME2, its SVL; the planner asks at__kernel_usable()
 * and leaves out the kernels this CPU cannot run.  The runtime itself is built
 * for the architecture's baseline, and the portable edge code covers what no
 * usable kernel does, so every CPU of the architecture gets right answers.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_internal.h"

/* This thread's streaming vector length in bytes, read now; only on a CPU with
 * SME.  RDSVL is an SME instruction that runs outside streaming mode; it is
 * spelled as its encoding so this file keeps the baseline flags. */
static int32_t rdsvl(void)
{
#if defined(__aarch64__)
    register uint64_t x0 __asm__("x0");
    __asm__ volatile(".inst 0x04bf5820" : "=r"(x0)); /* rdsvl x0, #1 */
    return (int32_t)x0;
#else
    return 0;
#endif
}

/* The streaming vector length in bytes; 0 without SME. */
static int32_t streaming_vector_bytes(void) { return at__has_feature("sme", 3) ? rdsvl() : 0; }

/* Asked once, like the usable mask: kernels are chosen for the SVL of the first
 * call.  Linux keeps one SVL per thread, and prctl(PR_SME_SET_VL) changes it at
 * any time, so at__svl_unchanged() checks it again where SME2 kernels run. */
int32_t at__svl_bytes(void)
{
    static _Atomic int32_t known = -1;
    int32_t svl = atomic_load_explicit(&known, memory_order_relaxed);
    if (svl < 0) {
        svl = streaming_vector_bytes();
        atomic_store_explicit(&known, svl, memory_order_relaxed);
    }
    return svl;
}

/* Whether the calling thread's SVL is still the one the SME2 kernels were chosen
 * for: a thread that set another one after the first call (or was created with
 * another) would run them at the wrong extents -- wrong answers, or writes past
 * a panel (both seen under QEMU).  One instruction: cheap beside the streaming
 * region it guards.  Only for a CPU with SME (a plan with SME2 steps implies it). */
int at__svl_unchanged(void) { return rdsvl() == at__svl_bytes(); }

static int kernel_runs_here(const at_kernel *k, int32_t svl_bytes)
{
    return at__has_features(k->requires) && (k->svl_bytes == 0 || k->svl_bytes == svl_bytes);
}

/* One byte per kernel, computed at the first question and kept: the answers
 * cannot change while the process runs. */
static _Atomic(unsigned char *) usable;

static unsigned char *usable_mask(void)
{
    unsigned char *mask = atomic_load_explicit(&usable, memory_order_acquire);
    if (mask) return mask;
    int n = at_kernel_table_count;
    unsigned char *fresh = malloc((size_t)(n > 0 ? n : 1));
    if (!fresh) return NULL;
    int32_t svl = at__svl_bytes();
    for (int i = 0; i < n; i++) fresh[i] = (unsigned char)kernel_runs_here(&at_kernel_table[i].kernel, svl);
    unsigned char *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&usable, &expected, fresh, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(fresh); /* another thread published the same answers first */
        return expected;
    }
    return fresh;
}

int at__kernel_usable(int index)
{
    if (index < 0 || index >= at_kernel_table_count) return 0;
    const unsigned char *mask = usable_mask();
    if (mask) return mask[index];
    /* Out of memory for n bytes: answer without remembering. */
    return kernel_runs_here(&at_kernel_table[index].kernel, at__svl_bytes());
}

int at_kernel_usable(int index) { return at__kernel_usable(index); }

const char *at_required_features(void) { return at_library_features; }

/* The features the kernels' records name and this CPU lacks, each once. */
struct missing {
    char text[160];
};

static void note_missing(const char *name, size_t len, void *ctx)
{
    struct missing *m = ctx;
    if (at__has_feature(name, len)) return;
    for (const char *word = m->text; *word;) { /* already listed? */
        size_t n = strcspn(word, " ");
        if (n == len && memcmp(word, name, len) == 0) return;
        word += n + (word[n] == ' ');
    }
    size_t used = strlen(m->text);
    snprintf(m->text + used, sizeof m->text - used, "%s%.*s", used ? " " : "", (int)len, name);
}

/* Appends " 128 256 512": the SVLs of the library's SME2 sets, in bits, ascending
 * (the architecture allows powers of two from 128 to 2048). */
static void list_svls(char *text, size_t size)
{
    for (int32_t bytes = 16; bytes <= 256; bytes *= 2)
        for (int i = 0; i < at_kernel_table_count; i++)
            if (at_kernel_table[i].kernel.svl_bytes == bytes) {
                snprintf(text + strlen(text), size - strlen(text), " %d", (int)bytes * 8);
                break;
            }
}

int at_cpu_check(void)
{
    int32_t svl = at__svl_bytes();
    if (svl > 0 && !at__svl_unchanged()) {
        at__set_error("this thread's streaming vector length is %d bits, not the %d its SME2 kernels "
                      "were chosen for: it computes with portable code (right answers, less speed); "
                      "set it with prctl(PR_SME_SET_VL) before the first call",
                      (int)rdsvl() * 8, (int)svl * 8);
        return AT_ENOCPU;
    }
    int own_set = 0, sets = 0;
    for (int i = 0; i < at_kernel_table_count; i++) {
        int32_t bytes = at_kernel_table[i].kernel.svl_bytes;
        own_set |= bytes != 0 && bytes == svl;
        sets |= bytes != 0;
    }
    /* The SME2 sets of other vector lengths are for other CPUs, not a lack of
     * this one, when the library has the set of this CPU's. */
    int total = 0, runnable = 0;
    struct missing m = {""};
    for (int i = 0; i < at_kernel_table_count; i++) {
        int32_t bytes = at_kernel_table[i].kernel.svl_bytes;
        if (own_set && bytes && bytes != svl) continue;
        int usable = at__kernel_usable(i);
        total++;
        runnable += usable;
        if (!usable) at__each_feature(at_kernel_table[i].kernel.requires, note_missing, &m);
    }
    if (runnable == total) return AT_OK;
    if (sets && svl && !own_set) {
        char svls[64] = "";
        list_svls(svls, sizeof svls);
        snprintf(m.text + strlen(m.text), sizeof m.text - strlen(m.text),
                 "%sSME2 kernels at its vector length (the library has%s bits; this CPU's is %d)",
                 m.text[0] ? " and " : "", svls, (int)svl * 8);
    }
    at__set_error("this CPU lacks %s: plans use the library's other %d of %d kernels (right "
                  "answers, less speed); run `autotune install` on this machine for its own library",
                  m.text[0] ? m.text : "what some kernels need", runnable, total);
    return AT_ENOCPU;
}
