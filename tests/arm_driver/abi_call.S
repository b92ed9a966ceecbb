// drv_abi_call: call a kernel with canaries in every callee-saved register and
// report which ones it failed to preserve (AAPCS64: x19-x28, d8-d15, sp).
//
//   uint64_t drv_abi_call(void (*fn)(void), const int64_t args[7],
//                         double alpha, double beta, int64_t is_f32);
//
// args = {K, A, lda, B, ldb, C, ldc}.  For fp32 kernels alpha and beta are
// narrowed to s0/s1.  Returns 0 when everything was preserved, else a bit per
// broken register: bit i for x(19+i), bit 10 + i for d(8+i), bit 20 for sp.
    .text
    .globl drv_abi_call
    .type drv_abi_call, %function
    .p2align 4
drv_abi_call:
    stp x29, x30, [sp, #-176]!
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
    str x9, [sp, #168]                 // sp as the kernel must leave it
    cbz x2, 1f
    fcvt s0, d0
    fcvt s1, d1
1:
    mov x17, x1
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
    ldr x6, [x17, #48]
    blr x16
    mov x0, #0                         // broken-register bits
    mov x10, #0x1900
    // x19 .. x28 against 0x1900 + i
    mov x12, #0
    .irp r, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28
    add x11, x10, x12
    cmp x\r, x11
    cset x13, ne
    lsl x13, x13, x12
    orr x0, x0, x13
    add x12, x12, #1
    .endr
    // d8 .. d15 against 0x800 + i
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
    ldp x19, x20, [sp, #16]
    ldp x21, x22, [sp, #32]
    ldp x23, x24, [sp, #48]
    ldp x25, x26, [sp, #64]
    ldp x27, x28, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    ldp x29, x30, [sp], #176
    ret
    .size drv_abi_call, .-drv_abi_call
    .section .note.GNU-stack,"",%progbits
