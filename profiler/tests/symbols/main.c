/* Runs the library's work for about half a second of CPU. */
#include <stdio.h>

unsigned long lib_entry(unsigned long n);

int main(void) {
    unsigned long s = 0;
    for (int i = 0; i < 40; i++)
        s += lib_entry(5000000);
    printf("%lu\n", s & 1);
    return 0;
}
