/* A library whose work is in two static functions: only a symbol table or debug information
 * names them (profiler/tests/symbol_files.rs strips it and puts their names elsewhere). */
static volatile unsigned long sink;

static __attribute__((noinline)) unsigned long hidden_spin_a(unsigned long n) {
    unsigned long s = 1;
    for (unsigned long i = 0; i < n; i++)
        s = s * 6364136223846793005UL + i;
    return s;
}

static __attribute__((noinline)) unsigned long hidden_spin_b(unsigned long n) {
    unsigned long s = 7;
    for (unsigned long i = 0; i < n; i++)
        s ^= (s << 7) + (s >> 3) + i;
    return s;
}

unsigned long lib_entry(unsigned long n) {
    unsigned long s = hidden_spin_a(n);
    s += hidden_spin_b(n);
    sink = s;
    return s;
}
