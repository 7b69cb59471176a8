/* Hand-written frames described by CFI directives.
 * long asm_frame(long (*cb)(long), long n): saves rbx/rbp, 40 bytes of locals, CFA on rsp;
 *   spins, then calls asm_fp_frame(cb, n).
 * long asm_fp_frame(long (*cb)(long), long n): a classic rbp frame, CFA on rbp, with a
 *   variable-size stack allocation; spins, then calls cb(n). */
    .text
    .globl  asm_frame
    .type   asm_frame, @function
asm_frame:
    .cfi_startproc
    pushq   %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbx, 0
    pushq   %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    subq    $40, %rsp
    .cfi_adjust_cfa_offset 40
    movq    %rdi, %rbx
    movq    %rsi, %rbp
    movq    $3000, %rcx
1:  decq    %rcx
    jnz     1b
    movq    %rbx, %rdi
    movq    %rbp, %rsi
    call    asm_fp_frame
    addq    $1, %rax
    addq    $40, %rsp
    .cfi_adjust_cfa_offset -40
    popq    %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbp
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    ret
    .cfi_endproc
    .size   asm_frame, .-asm_frame

    .globl  asm_fp_frame
    .type   asm_fp_frame, @function
asm_fp_frame:
    .cfi_startproc
    pushq   %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq    %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushq   %r12
    .cfi_offset %r12, -24
    movq    %rsi, %rax
    andq    $0x1f0, %rax
    addq    $16, %rax
    subq    %rax, %rsp
    andq    $-16, %rsp
    movq    %rdi, %r12
    movq    %rsi, %rdi
    movq    $3000, %rcx
2:  decq    %rcx
    jnz     2b
    call    *%r12
    addq    $2, %rax
    movq    -8(%rbp), %r12
    leave
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size   asm_fp_frame, .-asm_fp_frame

    .section .note.GNU-stack,"",@progbits
