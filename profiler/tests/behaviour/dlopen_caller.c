/* The program of the dlopen test: its library (dlopen_loader.c) loads the plugins. */
#include <stdio.h>

void load_plugins(void);

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    load_plugins();
    return 0;
}
