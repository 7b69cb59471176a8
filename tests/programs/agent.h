/* The test agent's C API (libunwind_agent.so, built from tests/agent). */
#ifndef UNWIND_TEST_AGENT_H
#define UNWIND_TEST_AGENT_H
int agent_start(unsigned hz);
int agent_register_thread(void);
void agent_unregister_thread(void);
int agent_stop(const char *path);
int agent_refresh(void);
/* Installs a crash handler (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) that writes a minidump of
 * the crash, with the frames our unwinder found, to `path`, then lets the process die of the
 * signal. Preloads the rule table and registers the calling thread. Returns 0 on success. */
int agent_install_crash_handler(const char *path);
#endif
