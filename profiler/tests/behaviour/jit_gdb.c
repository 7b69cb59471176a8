/* A JIT that describes its code through the GDB JIT interface, as LLVM's ORC JIT does: it
 * places code (the shared object argv[1], gcc-built without frame pointers or relocations:
 * tests/gdb_jit/jitted.c) in anonymous memory, makes it executable, then registers a symbol
 * file for it in __jit_debug_descriptor (a copy of the object moved to the code's addresses)
 * and calls __jit_debug_register_code. The descriptor is in the executable's symbol table only.
 *
 *   main -> via_jit -> jitted_call -> jitted_inner -> burn_in_host
 *
 * Under `record`, a walk from burn_in_host crosses the two generated functions by the symbol
 * file's rules, and their names come from its symbol table. ELF64 (x86_64). */
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "burn.h"

struct jit_code_entry {
    struct jit_code_entry *next_entry, *prev_entry;
    const char *symfile_addr;
    uint64_t symfile_size;
};
struct jit_descriptor {
    uint32_t version, action_flag;
    struct jit_code_entry *relevant_entry, *first_entry;
};

struct jit_descriptor __jit_debug_descriptor = {1, 0, NULL, NULL};

void __attribute__((noinline)) __jit_debug_register_code(void) { __asm__ volatile("" ::: "memory"); }

typedef void (*callback)(void *);
typedef long (*jitted_call_fn)(callback, void *);

__attribute__((noinline)) void burn_in_host(void *arg) { BURN(*(int *)arg); }

/* Through a volatile pointer: no tail call, no inlining. */
__attribute__((noinline)) void via_jit(jitted_call_fn call, int ms) {
    jitted_call_fn volatile f = call;
    f(burn_in_host, &ms);
    __asm__ volatile("" ::: "memory");
}

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc(*size);
    if (!data || fread(data, 1, *size, f) != *size) return NULL;
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t size;
    unsigned char *elf = argc > 1 ? read_file(argv[1], &size) : NULL;
    if (!elf) return 1;
    Elf64_Ehdr *eh = (Elf64_Ehdr *)elf;
    Elf64_Phdr *ph = (Elf64_Phdr *)(elf + eh->e_phoff);
    uint64_t end = 0;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr + ph[i].p_memsz > end)
            end = ph[i].p_vaddr + ph[i].p_memsz;
    size_t len = (end + 4095) & ~(size_t)4095;
    unsigned char *code = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) return 1;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD) memcpy(code + ph[i].p_vaddr, elf + ph[i].p_offset, ph[i].p_filesz);
    if (mprotect(code, len, PROT_READ | PROT_EXEC) != 0) return 1;

    /* The symbol file: the object moved to the code's addresses. */
    uint64_t base = (uint64_t)(uintptr_t)code;
    unsigned char *symfile = malloc(size);
    memcpy(symfile, elf, size);
    Elf64_Ehdr *sh_eh = (Elf64_Ehdr *)symfile;
    Elf64_Phdr *sph = (Elf64_Phdr *)(symfile + sh_eh->e_phoff);
    for (int i = 0; i < sh_eh->e_phnum; i++) {
        sph[i].p_vaddr += base;
        sph[i].p_paddr += base;
    }
    Elf64_Shdr *sh = (Elf64_Shdr *)(symfile + sh_eh->e_shoff);
    uint64_t jitted_call = 0;
    for (int i = 0; i < sh_eh->e_shnum; i++) {
        if (sh[i].sh_flags & SHF_ALLOC) sh[i].sh_addr += base;
        if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
        Elf64_Sym *sym = (Elf64_Sym *)(symfile + sh[i].sh_offset);
        const char *strings = (const char *)symfile + sh[sh[i].sh_link].sh_offset;
        for (size_t j = 0; j < sh[i].sh_size / sizeof *sym; j++) {
            if (sym[j].st_shndx == SHN_UNDEF || sym[j].st_shndx == SHN_ABS) continue;
            if (!strcmp(strings + sym[j].st_name, "jitted_call")) jitted_call = sym[j].st_value;
            sym[j].st_value += base;
        }
    }
    if (!jitted_call) return 1;

    static struct jit_code_entry entry;
    entry.symfile_addr = (const char *)symfile;
    entry.symfile_size = size;
    __jit_debug_descriptor.first_entry = &entry;
    __jit_debug_descriptor.relevant_entry = &entry;
    __jit_debug_descriptor.action_flag = 1; /* JIT_REGISTER_FN */
    __jit_debug_register_code();

    jitted_call_fn call = (jitted_call_fn)(void *)(code + jitted_call);
    for (int i = 0; i < 60; i++) via_jit(call, 10);
    printf("pid %d\n", (int)getpid());
    return 0;
}
