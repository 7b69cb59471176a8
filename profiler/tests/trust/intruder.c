/* Another user's process on the machine where root runs `record` (profiler/tests/trust.rs runs
 * it as a user of its own while `record` profiles a program): it finds record's socket in
 * /proc/net/unix, connects, says hello with a key of its own and a process record it then
 * shrinks, and sends garbage; it tries to read the profiled program's environment (where the
 * session's key is); and it plants a perf map naming all of the program's code. Prints what
 * each step gave; exits 0 whatever record did.
 *
 * Usage: intruder PID (the profiled program's pid) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    int pid = atoi(argv[1]);

    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    int env = open(path, O_RDONLY);
    printf("environ: %s\n", env < 0 ? "refused" : "read");

    FILE *unix_sockets = fopen("/proc/net/unix", "r");
    char line[512];
    int found = 0, connected = 0, sent = 0;
    while (unix_sockets && fgets(line, sizeof line, unix_sockets)) {
        char *name = strstr(line, "@unwind-profiler-");
        if (!name) continue;
        name[strcspn(name, "\n")] = 0;
        found++;
        int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        size_t len = strlen(name + 1);
        memcpy(a.sun_path + 1, name + 1, len);
        if (connect(s, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + 1 + len) != 0)
            continue;
        connected++;
        /* A hello with a key of its own and a process record it shrinks once sent. */
        int fd = memfd_create("unwind-profiler", 0);
        if (fd < 0 || ftruncate(fd, 4096) != 0) continue;
        unsigned char m[64] = {0};
        uint64_t w[3] = {1, (uint64_t)getpid(), 0};
        memcpy(m, w, sizeof w);
        memset(m + 24, 0x42, 16);
        memcpy(m + 40, "intruder", 8);
        struct iovec iov = {.iov_base = m, .iov_len = 48};
        char control[CMSG_SPACE(sizeof(int))];
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
        if (sendmsg(s, &msg, MSG_NOSIGNAL) == 48) sent++;
        if (ftruncate(fd, 0) != 0) printf("truncate: %s\n", strerror(errno));
        uint64_t garbage[2] = {2, 7};
        if (send(s, garbage, sizeof garbage, MSG_NOSIGNAL) == sizeof garbage) sent++;
    }
    printf("sockets: %d found, %d connected, %d messages sent\n", found, connected, sent);

    snprintf(path, sizeof path, "/tmp/perf-%d.map", pid);
    FILE *map = fopen(path, "w");
    if (map) {
        fprintf(map, "0 7fffffffffff INTRUDER\n");
        fclose(map);
    }
    printf("perf map: %s\n", map ? "planted" : "not planted");
    return 0;
}
