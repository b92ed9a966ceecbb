// rt_abi_call: call a function with canaries in every callee-saved register
// and report what it failed to preserve (AAPCS64: x19-x28, d8-d15, sp) and, in
// an SME2 build, whether it left PSTATE.SM / PSTATE.ZA as the SME rules say.
//
//   uint64_t rt_abi_call(void (*fn)(void), const uint64_t x[8], double d0, double d1,
//                        int64_t mode);
//
// x0-x7 are loaded from x[], d0/d1 from the arguments (narrowed to s0/s1 when
// mode bit 0 is set).  Mode bit 1 (SME2 builds only): call fn inside a
// streaming region (SMSTART before, SMSTOP after), as a plan's region calls a
// kernel's `_s` entry, and expect SVCR = 3 (SM and ZA on) on return; without
// it SVCR must be 0 on return (a private-ZA, non-streaming function).
// Result: bit i for x(19+i), bit 10+i for d(8+i), bit 20 sp, bit 21 SVCR.
#if defined(RT_SME)
    .arch armv9-a+sme2
#endif
    .text
    .globl rt_abi_call
    .type rt_abi_call, %function
    .p2align 4
rt_abi_call:
    stp x29, x30, [sp, #-192]!
    mov x29, sp
    stp x19, x20, [sp, #16]
    stp x21, x22, [sp, #32]
    stp x23, x24, [sp, #48]
    stp x25, x26, [sp, #64]
    stp x27, x28, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    str x0, [sp, #160]                 // fn
    mov x9, sp
    str x9, [sp, #168]                 // sp as the callee must leave it
    str x2, [sp, #176]                 // mode
    mov x17, x1
    stp d0, d1, [sp, #-16]!            // the FP arguments survive smstart on the stack
#if defined(RT_SME)
    tbz x2, #1, 1f
    smstart
1:
#endif
    ldp d0, d1, [sp], #16
    ldr x9, [sp, #176]
    tbz x9, #0, 2f
    fcvt s0, d0
    fcvt s1, d1
2:
    mov x19, #0x1900
    add x20, x19, #1
    add x21, x19, #2
    add x22, x19, #3
    add x23, x19, #4
    add x24, x19, #5
    add x25, x19, #6
    add x26, x19, #7
    add x27, x19, #8
    add x28, x19, #9
    mov x9, #0x0800
    fmov d8, x9
    add x9, x9, #1
    fmov d9, x9
    add x9, x9, #1
    fmov d10, x9
    add x9, x9, #1
    fmov d11, x9
    add x9, x9, #1
    fmov d12, x9
    add x9, x9, #1
    fmov d13, x9
    add x9, x9, #1
    fmov d14, x9
    add x9, x9, #1
    fmov d15, x9
    ldr x16, [sp, #160]
    ldp x0, x1, [x17]
    ldp x2, x3, [x17, #16]
    ldp x4, x5, [x17, #32]
    ldp x6, x7, [x17, #48]
    blr x16
    mov x0, #0
    mov x10, #0x1900
    mov x12, #0
    .irp r, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28
    add x11, x10, x12
    cmp x\r, x11
    cset x13, ne
    lsl x13, x13, x12
    orr x0, x0, x13
    add x12, x12, #1
    .endr
    mov x10, #0x0800
    mov x12, #0
    .irp r, 8, 9, 10, 11, 12, 13, 14, 15
    fmov x11, d\r
    add x14, x10, x12
    cmp x11, x14
    cset x13, ne
    add x15, x12, #10
    lsl x13, x13, x15
    orr x0, x0, x13
    add x12, x12, #1
    .endr
    ldr x9, [sp, #168]
    mov x10, sp
    cmp x9, x10
    cset x13, ne
    orr x0, x0, x13, lsl #20
#if defined(RT_SME)
    mrs x11, svcr
    ldr x9, [sp, #176]
    ubfx x12, x9, #1, #1
    mov x14, #3
    mul x12, x12, x14                  // expected SVCR: 3 in a region, else 0
    cmp x11, x12
    cset x13, ne
    orr x0, x0, x13, lsl #21
    tbz x9, #1, 3f
    smstop
3:
#endif
    ldp x19, x20, [sp, #16]
    ldp x21, x22, [sp, #32]
    ldp x23, x24, [sp, #48]
    ldp x25, x26, [sp, #64]
    ldp x27, x28, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    ldp x29, x30, [sp], #192
    ret
    .size rt_abi_call, .-rt_abi_call

#if defined(RT_SME)
// rt_lazy_za_call: call fn(x0..x7) with live ZA data under a pending lazy save,
// the AAPCS64 "dormant" state a private-ZA callee must respect.
//
//   uint64_t rt_lazy_za_call(void (*fn)(void), const uint64_t x[8], double d0, double d1,
//                            void *buffer, uint64_t slices);
//
// Fills ZA row r with the byte r, leaves streaming mode with ZA on, points
// TPIDR2_EL0 at a block {buffer, slices}, calls fn.  A conforming callee that
// uses ZA stores the rows to buffer and clears TPIDR2_EL0 first.  Returns
// TPIDR2_EL0 after the call | SVCR << 62 (both must be 0: save committed, ZA off).
    .globl rt_lazy_za_call
    .type rt_lazy_za_call, %function
    .p2align 4
rt_lazy_za_call:
    stp x29, x30, [sp, #-112]!
    mov x29, sp
    str x0, [sp, #16]                  // fn
    stp d8, d9, [sp, #48]              // smstart zeroes z8-z15
    stp d10, d11, [sp, #64]
    stp d12, d13, [sp, #80]
    stp d14, d15, [sp, #96]
    stp d0, d1, [sp, #-16]!
    smstart
    ptrue p0.b
    rdsvl x9, #1                       // ZA rows = SVL in bytes
    mov w12, #0
1:  dup z0.b, w12
    mova za0h.b[w12, 0], p0/m, z0.b
    add w12, w12, #1
    cmp x12, x9
    b.lt 1b
    smstop sm                          // ZA stays on: the caller's live state
    ldp d0, d1, [sp], #16
    str x2, [sp, #32]                  // TPIDR2 block: za_save_buffer
    str xzr, [sp, #40]                 // reserved bytes zero
    strh w3, [sp, #40]                 // num_za_save_slices
    add x9, sp, #32
    msr tpidr2_el0, x9
    mov x17, x1
    ldr x16, [sp, #16]
    ldp x0, x1, [x17]
    ldp x2, x3, [x17, #16]
    ldp x4, x5, [x17, #32]
    ldp x6, x7, [x17, #48]
    blr x16
    mrs x0, tpidr2_el0
    mrs x1, svcr
    orr x0, x0, x1, lsl #62
    msr tpidr2_el0, xzr
    smstop
    ldp d8, d9, [sp, #48]
    ldp d10, d11, [sp, #64]
    ldp d12, d13, [sp, #80]
    ldp d14, d15, [sp, #96]
    ldp x29, x30, [sp], #112
    ret
    .size rt_lazy_za_call, .-rt_lazy_za_call
#endif
    .section .note.GNU-stack,"",%progbits
