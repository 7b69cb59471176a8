/* The test agent's C API (libunwind_agent.so, built from tests/agent). */
#ifndef UNWIND_TEST_AGENT_H
#define UNWIND_TEST_AGENT_H
int agent_start(unsigned hz);
int agent_register_thread(void);
void agent_unregister_thread(void);
int agent_stop(const char *path);
int agent_refresh(void);
#endif
