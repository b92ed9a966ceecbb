// sme2_region.S: the streaming region of an SME2 plan, and the transposing pack
// that runs inside it.
//
//   void at__sme2_region(void (*fn)(void *ctx), void *ctx);
//
// Enters streaming mode with ZA enabled (SMSTART) once, calls fn(ctx) -- a C
// function compiled as __arm_streaming, which runs a thread's whole share of a
// plan: packing, the kernels' `_s` entry points, edge code -- and leaves with
// SMSTOP, so PSTATE.SM and PSTATE.ZA are both off on return and the caller's
// NEON code runs unaffected.  Like every private-ZA function of the AAPCS64 it
// first commits a caller's lazy ZA save (TPIDR2_EL0 block), and it preserves
// x19-x28 and d8-d15 (SMSTART and SMSTOP zero z0-z31, so d8-d15 are saved on
// the stack around the region).
//
//   void at__sme2_pack_t_f32_s(int64_t K, int64_t n, const float *src, int64_t ld,
//                              float *dst, int64_t ldd);            (and _f64_s)
//
// Streaming-mode, ZA-enabled form of the transposing pack through a ZA tile:
//   dst[x + q*ldd] = src[q + x*ld]  for x < n, q < K;  0 for n <= x < ldd.
// Up to VL source rows are loaded as horizontal slices of za0 (predicated on
// q < K, so no read leaves the source footprint) and the tile's vertical slices
// are stored as contiguous panel rows.  Vector-length agnostic (cntw / cntd);
// ldd must be a multiple of VL.  It uses za0, p0, p1 and x0-x17 only: no Z
// register, so nothing callee-saved is touched.
#if !defined(__aarch64__)
#error "sme2_region.S needs AArch64 with SME2: compile it with the sme2 target's flags"
#endif
#include "at_asm.h"
    .arch armv9-a+sme2+sme-f64f64
    .text

AT_FUNC_BEGIN(at__sme2_region)
    stp x29, x30, [sp, #-96]!
    mov x29, sp
    stp d8, d9, [sp, #16]
    stp d10, d11, [sp, #32]
    stp d12, d13, [sp, #48]
    stp d14, d15, [sp, #64]
    stp x19, x20, [sp, #80]
    mov x19, x0                              // fn
    mov x20, x1                              // ctx
    mrs x16, tpidr2_el0                      // a caller's dormant ZA: save it now
    cbz x16, 3f
    ldur x14, [x16, #8]
    lsr x14, x14, #16                        // reserved bytes 10-15 must be zero
    cbnz x14, 9f
    ldr x17, [x16]                           // za_save_buffer
    ldrh w15, [x16, #8]                      // num_za_save_slices
    cbz x17, 2f
    mov w12, #0
    cbz w15, 2f
1:  str za[w12, 0], [x17]
    addsvl x17, x17, #1
    add w12, w12, #1
    cmp w12, w15
    b.lo 1b
2:  msr tpidr2_el0, xzr
3:  smstart                                  // streaming mode and ZA, once per share
    zero {za}
    mov x0, x20
    blr x19
    smstop                                   // both off: the caller sees neither
    ldp x19, x20, [sp, #80]
    ldp d14, d15, [sp, #64]
    ldp d12, d13, [sp, #48]
    ldp d10, d11, [sp, #32]
    ldp d8, d9, [sp, #16]
    ldp x29, x30, [sp], #96
    ret
9:  brk #0x5b                                // malformed TPIDR2 block: the caller broke the ABI
AT_FUNC_END(at__sme2_region)

// x0 K, x1 n, x2 src, x3 ld (bytes), x4 dst, x5 ldd (bytes), x6 ldd (elements),
// x7 ld (elements), x8 VL, x9 first x of the block, x10 first q, x11 rows of the
// block (<= 0 past n), w12 slice, x13 pointer, x14 columns of the block, x15 the
// slices done by the unrolled loop, x16/x17 a pointer two rows/columns ahead.
//
// Slices move \u at a time (4 for .s, 2 for .d: the slice offsets a ZA tile
// allows), the second one through the scalar index ld (ldd), the third and
// fourth from a pointer two rows ahead: per slice about 2 instructions instead
// of 5; the rest of a block goes one slice at a time.
.macro AT_SME2_PACK_S name, t, ld, cnt, shift, u
AT_FUNC_BEGIN(\name)
    \cnt x8
    mov x6, x5
    mov x7, x3
    lsl x3, x3, #\shift
    lsl x5, x5, #\shift
    ptrue p0.\t
    mov x9, #0
10: cmp x9, x6                               // every block of VL panel rows, padding included
    b.ge 19f
    sub x11, x1, x9
    cmp x11, x8
    csel x11, x11, x8, lt
    mov x10, #0
11: cmp x10, x0
    b.ge 18f
    zero {za0.\t}                            // rows past n read nothing and stay zero
    whilelt p1.\t, x10, x0
    madd x13, x9, x3, x2
    add x13, x13, x10, lsl #\shift           // &src[q + x*ld]
    mov w12, #0
    cmp x11, #0
    b.le 13f
    and x15, x11, #-\u                       // rows in whole groups of \u
    cbz x15, 21f
20: ld1\ld {za0h.\t[w12, 0]}, p1/z, [x13]
    ld1\ld {za0h.\t[w12, 1]}, p1/z, [x13, x7, lsl #\shift]
.if \u == 4
    add x16, x13, x3, lsl #1
    ld1\ld {za0h.\t[w12, 2]}, p1/z, [x16]
    ld1\ld {za0h.\t[w12, 3]}, p1/z, [x16, x7, lsl #\shift]
.endif
    add x13, x13, x3, lsl #(\u / 2)
    add w12, w12, #\u
    cmp x12, x15
    b.lt 20b
21: cmp x12, x11
    b.ge 13f
12: ld1\ld {za0h.\t[w12, 0]}, p1/z, [x13]
    add x13, x13, x3
    add w12, w12, #1
    cmp x12, x11
    b.lt 12b
13: sub x14, x0, x10
    cmp x14, x8
    csel x14, x14, x8, lt
    madd x13, x10, x5, x4
    add x13, x13, x9, lsl #\shift            // &dst[x + q*ldd]
    mov w12, #0
    and x15, x14, #-\u                       // columns in whole groups of \u
    cbz x15, 23f
22: st1\ld {za0v.\t[w12, 0]}, p0, [x13]
    st1\ld {za0v.\t[w12, 1]}, p0, [x13, x6, lsl #\shift]
.if \u == 4
    add x17, x13, x5, lsl #1
    st1\ld {za0v.\t[w12, 2]}, p0, [x17]
    st1\ld {za0v.\t[w12, 3]}, p0, [x17, x6, lsl #\shift]
.endif
    add x13, x13, x5, lsl #(\u / 2)
    add w12, w12, #\u
    cmp x12, x15
    b.lt 22b
23: cmp x12, x14
    b.ge 15f
14: st1\ld {za0v.\t[w12, 0]}, p0, [x13]
    add x13, x13, x5
    add w12, w12, #1
    cmp x12, x14
    b.lt 14b
15: add x10, x10, x8
    b 11b
18: add x9, x9, x8
    b 10b
19: ret
AT_FUNC_END(\name)
.endm

AT_SME2_PACK_S at__sme2_pack_t_f32_s, s, w, cntw, 2, 4
AT_SME2_PACK_S at__sme2_pack_t_f64_s, d, d, cntd, 3, 2

AT_NO_EXEC_STACK
