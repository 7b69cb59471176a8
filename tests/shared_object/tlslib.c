/* A library with general-dynamic thread-local variables, dlopened half-way through the guard
 * program's run: loading it makes glibc grow every thread's dynamic thread vector, which the
 * next __tls_get_addr of each thread reallocates. */
__thread char tls_block[16384];
__thread int tls_counter;

int tls_touch(int x) {
    tls_counter += x;
    tls_block[(unsigned)x % sizeof tls_block] ^= (char)x;
    return tls_counter + tls_block[0];
}
