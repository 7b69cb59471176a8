/* The plugin that dlopen_loader.c loads: found only through the loader's own search path. */
int plugin_value(void) { return 42; }
