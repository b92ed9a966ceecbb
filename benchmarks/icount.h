/* icount.h: what the programs benchmarks/arm_icount.py counts under QEMU share.
 *
 * Each program puts the call it measures between icount_begin(phase) and
 * icount_end(phase); the counter (benchmarks/icount.py) finds a phase by these two
 * symbols in QEMU's instruction log, so they stay out of line, distinct and empty.
 * One translation unit per program includes this file, after defining ICOUNT_PROGRAM,
 * the name its messages start with. */
#ifndef AT_ICOUNT_H
#define AT_ICOUNT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void icount_begin(int phase) { __asm__ volatile("" ::"r"(phase) : "memory"); }
__attribute__((noinline)) void icount_end(int phase) { __asm__ volatile("" ::"r"(phase) : "memory"); }

#ifdef AT_KLEIDIAI
/* KleidiAI's kai_commit_za calls the SME ABI's __arm_tpidr2_save, which Debian 12's
 * aarch64 libgcc lacks.  It saves a caller's dormant ZA state when TPIDR2_EL0 is set;
 * nothing in these programs leaves ZA dormant (TPIDR2_EL0 stays 0), so here it
 * returns at once, as the real routine does in that case. */
__asm__(".text\n.globl __arm_tpidr2_save\n.type __arm_tpidr2_save, %function\n"
        "__arm_tpidr2_save:\n    ret\n.size __arm_tpidr2_save, .-__arm_tpidr2_save\n");
#endif

/* The operands come from a file the Python side writes; a short one is a bug there,
 * so the program stops rather than count a product of garbage. */
__attribute__((unused)) static void *icount_read(FILE *f, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, ICOUNT_PROGRAM ": truncated input\n");
        exit(2);
    }
    return p;
}

/* An array preceded by its int64 size in bytes. */
__attribute__((unused)) static void *icount_read_counted(FILE *f, size_t *bytes)
{
    int64_t n = 0;
    if (fread(&n, sizeof n, 1, f) != 1) {
        fprintf(stderr, ICOUNT_PROGRAM ": truncated input\n");
        exit(2);
    }
    *bytes = (size_t)n;
    return icount_read(f, (size_t)n);
}

#endif
