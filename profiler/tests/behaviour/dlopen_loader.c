/* A library that loads a plugin by its own search path (built with an RPATH or a RUNPATH of
 * $ORIGIN/../plugins): by a bare file name and by a name starting with $ORIGIN, and the same
 * for a file that is nowhere. glibc resolves both kinds of name from the object that calls
 * dlopen, so an interposed dlopen must keep the caller. Prints one line per load: its result,
 * and that dlerror has nothing left after a success. */
#include <dlfcn.h>
#include <stdio.h>

static void load(const char *label, const char *file) {
    dlerror();
    void *handle = dlopen(file, RTLD_NOW);
    if (handle == NULL) {
        const char *error = dlerror();
        printf("%s: failed: %s\n", label, error ? error : "(no dlerror)");
        return;
    }
    const char *left = dlerror();
    int (*value)(void) = (int (*)(void))dlsym(handle, "plugin_value");
    printf("%s: loaded, plugin_value %d, dlerror %s\n", label, value ? value() : -1,
           left ? left : "empty");
    /* Unloaded each time, so that each load finds the file on its own. */
    dlclose(handle);
}

void load_plugins(void) {
    load("bare name", "libplugin.so");
    load("$ORIGIN name", "$ORIGIN/../plugins/libplugin.so");
    load("missing", "libnot-anywhere.so");
    load("$ORIGIN missing", "$ORIGIN/../plugins/libnot-anywhere.so");
}
