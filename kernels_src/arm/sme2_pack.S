// Transposing packs through a ZA tile, for the SME2 kernels' packed operand formats.
//
//   void at_sme2_pack_t_f32(int64_t K, int64_t n, const float *src, int64_t ld,
//                           float *dst, int64_t ldd);
//   void at_sme2_pack_t_f64(int64_t K, int64_t n, const double *src, int64_t ld,
//                           double *dst, int64_t ldd);
//
//   dst[x + p*ldd] = src[p + x*ld]   for 0 <= x < n, 0 <= p < K
//   dst[x + p*ldd] = 0               for n <= x < ldd  (the panel's zero padding)
//
// src is read along p (row x of the source is contiguous), dst is written along x:
// the routine loads up to VL source rows as horizontal slices of za0, then stores the
// tile's vertical slices, so both sides move whole contiguous vectors (KirbyMM's
// ZA-tile packing) instead of gathering strided elements.  Reads stay inside the
// source footprint (predicated on p < K, rows x < n only).
//
// Vector-length agnostic: VL is read in streaming mode (cntw / cntd), so the same
// code runs at any SVL.  ldd must be a multiple of VL (the kernels' panel stride,
// a whole number of tiles, always is).  Callers must not hold live ZA state: like
// the kernels, the routine commits a pending lazy ZA save first.
#if !defined(__aarch64__)
#error "sme2_pack.S needs AArch64 with SME: compile it with the sme2 target's flags"
#endif
#include "at_asm.h"
    .arch armv9-a+sme2+sme-f64f64
    .text

// Registers: x0 K, x1 n, x2 src, x3 ld (bytes), x4 dst, x5 ldd (bytes), x6 ldd,
// x8 VL, x9 first x of the block, x10 first p, x11 rows in the block (may be <= 0),
// x12/w12 slice index, x13 pointer, x14 columns in the block.
.macro AT_PACK_T name, t, ld, cnt, shift
AT_FUNC_BEGIN(\name)
    stp d8, d9, [sp, #-64]!                  // smstart zeroes z8-z15
    stp d10, d11, [sp, #16]
    stp d12, d13, [sp, #32]
    stp d14, d15, [sp, #48]
    mrs x16, tpidr2_el0                      // commit a caller's lazy ZA save
    cbz x16, AT_L(\name\()_za_free)
    ldur x14, [x16, #8]
    lsr x14, x14, #16                        // reserved bytes 10-15 must be zero
    cbnz x14, AT_L(\name\()_bad_tpidr2)
    ldr x17, [x16]
    ldrh w15, [x16, #8]
    cbz x17, AT_L(\name\()_za_saved)
    mov w12, #0
    cbz w15, AT_L(\name\()_za_saved)
AT_L(\name\()_za_save):
    str za[w12, 0], [x17]
    addsvl x17, x17, #1
    add w12, w12, #1
    cmp w12, w15
    b.lo AT_L(\name\()_za_save)
AT_L(\name\()_za_saved):
    msr tpidr2_el0, xzr
AT_L(\name\()_za_free):
    smstart
    \cnt x8
    mov x6, x5
    lsl x3, x3, #\shift
    lsl x5, x5, #\shift
    ptrue p0.\t
    mov x9, #0
AT_L(\name\()_xblock):
    cmp x9, x6
    b.ge AT_L(\name\()_done)
    sub x11, x1, x9                          // rows = min(n - x, VL)
    cmp x11, x8
    csel x11, x11, x8, lt
    mov x10, #0
AT_L(\name\()_pblock):
    cmp x10, x0
    b.ge AT_L(\name\()_xnext)
    zero {za0.\t}                            // rows x >= n stay zero: the padding
    whilelt p1.\t, x10, x0                   // p < K
    madd x13, x9, x3, x2
    add x13, x13, x10, lsl #\shift           // &src[p + x*ld]
    mov w12, #0
    cmp x11, #0
    b.le AT_L(\name\()_store)
AT_L(\name\()_row):
    ld1\ld {za0h.\t[w12, 0]}, p1/z, [x13]
    add x13, x13, x3
    add w12, w12, #1
    cmp x12, x11
    b.lt AT_L(\name\()_row)
AT_L(\name\()_store):
    sub x14, x0, x10                         // columns = min(K - p, VL)
    cmp x14, x8
    csel x14, x14, x8, lt
    madd x13, x10, x5, x4
    add x13, x13, x9, lsl #\shift            // &dst[x + p*ldd]
    mov w12, #0
AT_L(\name\()_col):
    st1\ld {za0v.\t[w12, 0]}, p0, [x13]
    add x13, x13, x5
    add w12, w12, #1
    cmp x12, x14
    b.lt AT_L(\name\()_col)
    add x10, x10, x8
    b AT_L(\name\()_pblock)
AT_L(\name\()_xnext):
    add x9, x9, x8
    b AT_L(\name\()_xblock)
AT_L(\name\()_done):
    smstop
    ldp d10, d11, [sp, #16]
    ldp d12, d13, [sp, #32]
    ldp d14, d15, [sp, #48]
    ldp d8, d9, [sp], #64
    ret
AT_L(\name\()_bad_tpidr2):
    brk #0x5a
AT_FUNC_END(\name)
.endm

AT_PACK_T at_sme2_pack_t_f32, s, w, cntw, 2
AT_PACK_T at_sme2_pack_t_f64, d, d, cntd, 3

AT_NO_EXEC_STACK
