/* at_asm.h: what AArch64 assembly spells differently for ELF (Linux) and Mach-O
 * (macOS, iOS).  Included by the hand-written .S files (sme2_pack.S,
 * sme2_region.S) and by every generated SME2 kernel; .S files go through the C
 * preprocessor, and clang defines __APPLE__ for a Darwin target.
 *
 *   AT_SYM(name)          the assembler symbol of the C function `name`: Mach-O
 *                         prefixes C symbols with an underscore
 *   AT_L(name)            a local (assembler-temporary) label: ".L" on ELF, "L"
 *                         on Mach-O, so neither object carries it as a symbol
 *   AT_FUNC_BEGIN(name)   a global function: .globl, .type (ELF), 16-byte
 *                         alignment, the label
 *   AT_ENTRY(name)        a second global entry point inside a function (no
 *                         alignment: it follows the previous instructions)
 *   AT_FUNC_END(name)     the symbol's size (ELF only: Mach-O has none)
 *   AT_NO_EXEC_STACK      the GNU-stack note that keeps the stack not executable
 *                         (ELF only: Mach-O stacks never are)
 *
 * On Mach-O ";" starts a comment and "%%" separates statements; on ELF AArch64
 * ";" separates them (AT_SEP). */
#ifndef AT_ASM_H
#define AT_ASM_H

#if defined(__APPLE__)
#define AT_SYM(name) _##name
#define AT_L(name) L##name
#define AT_SEP %%
#define AT_TYPE_FUNC(sym)
#define AT_FUNC_END(name)
#define AT_NO_EXEC_STACK
#else
#define AT_SYM(name) name
#define AT_L(name) .L##name
#define AT_SEP ;
#define AT_TYPE_FUNC(sym) .type sym, %function
#define AT_FUNC_END(name) .size AT_SYM(name), .-AT_SYM(name)
#define AT_NO_EXEC_STACK .section .note.GNU-stack,"",%progbits
#endif

#define AT_ENTRY(name) .globl AT_SYM(name) AT_SEP AT_TYPE_FUNC(AT_SYM(name)) AT_SEP AT_SYM(name):
#define AT_FUNC_BEGIN(name) \
    .globl AT_SYM(name) AT_SEP AT_TYPE_FUNC(AT_SYM(name)) AT_SEP .p2align 4 AT_SEP AT_SYM(name):

#endif
