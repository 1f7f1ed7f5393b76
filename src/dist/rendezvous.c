/* rendezvous.c: the TCP rendezvous of rendezvous.h. A rank's hello is 12 bytes: a magic word, its rank and
 * the world size it was started with (network order), so a stray connection or a rank of another job is
 * refused by name. */
#define _GNU_SOURCE
#include "dist/rendezvous.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "common/clock.h"
#include "common/error.h"

#define HELLO_MAGIC 0x514c5444u /* "QLTD" */

/* Milliseconds left until deadline (0 when past it). */
static int ms_left(double deadline) {
    double left = deadline - qlt_now_seconds();
    return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}

/* Reads or writes exactly `bytes` before the deadline: 0, or -1 (peer gone or time out). */
static int transfer(int fd, void *buf, size_t bytes, double deadline, int writing) {
    char *p = buf;
    while (bytes > 0) {
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int ms = ms_left(deadline);
        if (ms == 0) return -1;
        int ready = poll(&pfd, 1, ms);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return -1;
        ssize_t n = writing ? send(fd, p, bytes, MSG_NOSIGNAL) : recv(fd, p, bytes, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        p += n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* "1, 3, 4" of the ranks with arrived[r] == 0 (r >= 1), into out. */
static void missing_ranks(const unsigned char *arrived, int world, char *out, size_t size) {
    size_t used = 0;
    int listed = 0;
    out[0] = 0;
    for (int r = 1; r < world && used + 16 < size; r++) {
        if (arrived[r]) continue;
        if (listed == 8) {
            snprintf(out + used, size - used, ", ...");
            return;
        }
        used += (size_t)snprintf(out + used, size - used, "%s%d", listed ? ", " : "", r);
        listed++;
    }
}

static int serve(const char *addr, int port, int world, double timeout_s, const void *blob, size_t bytes) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) return qlt_fail("rendezvous: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
    if (bind(listener, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(listener, world) != 0) {
        int err = errno;
        close(listener);
        return qlt_fail("rank 0: cannot listen on port %d for the rendezvous (MASTER_PORT, MASTER_ADDR %s): %s: "
                        "pick a free port", port, addr, strerror(err));
    }
    int *fds = qlt_xcalloc((size_t)world, sizeof *fds);
    unsigned char *arrived = qlt_xcalloc((size_t)world, 1);
    double deadline = qlt_now_seconds() + timeout_s;
    int count = 1, rc = 0;
    while (count < world && rc == 0) {
        struct pollfd pfd = {.fd = listener, .events = POLLIN};
        int ms = ms_left(deadline);
        int ready = ms ? poll(&pfd, 1, ms) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            char list[160];
            missing_ranks(arrived, world, list, sizeof list);
            rc = qlt_fail("rendezvous at %s:%d: rank%s %s of %d did not arrive within %g s (train.dist_timeout_s): "
                          "check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE",
                          addr, port, world - count > 1 ? "s" : "", list, world, timeout_s);
            break;
        }
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) continue;
        uint32_t hello[3];
        if (transfer(fd, hello, sizeof hello, deadline, 0) != 0 || ntohl(hello[0]) != HELLO_MAGIC) {
            close(fd); /* not one of ours (or gone): keep waiting for the ranks */
            continue;
        }
        uint32_t r = ntohl(hello[1]), w = ntohl(hello[2]);
        if (w != (uint32_t)world)
            rc = qlt_fail("rendezvous at %s:%d: rank %u was started with WORLD_SIZE %u but rank 0 with %d: start every "
                          "rank with the same WORLD_SIZE", addr, port, r, w, world);
        else if (r == 0 || r >= (uint32_t)world || arrived[r])
            rc = qlt_fail("rendezvous at %s:%d: rank %u arrived %s: give every process its own RANK in 0 .. %d", addr,
                          port, r, r == 0 || r >= (uint32_t)world ? "(out of range)" : "twice", world - 1);
        if (rc != 0) {
            close(fd);
            break;
        }
        arrived[r] = 1;
        fds[r] = fd;
        count++;
    }
    for (int r = 1; r < world && rc == 0; r++)
        if (transfer(fds[r], (void *)blob, bytes, deadline + timeout_s, 1) != 0)
            rc = qlt_fail("rendezvous at %s:%d: rank %d went away before it got the blob", addr, port, r);
    for (int r = 1; r < world; r++)
        if (arrived[r]) close(fds[r]);
    close(listener);
    free(fds);
    free(arrived);
    return rc;
}

/* One connection to addr:port before the deadline (rank 0 may not listen yet: tried again every 100 ms). */
static int connect_until(const char *addr, int port, double deadline) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(addr, service, &hints, &ai);
    if (gai != 0) {
        qlt_fail("MASTER_ADDR %s: cannot resolve it (%s): set it to rank 0's address", addr, gai_strerror(gai));
        return -2;
    }
    int fd = -1;
    while (fd < 0 && ms_left(deadline) > 0) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
            usleep(100 * 1000);
        }
    }
    freeaddrinfo(ai);
    return fd;
}

static int join(const char *addr, int port, int rank, int world, double timeout_s, void *blob, size_t bytes) {
    double deadline = qlt_now_seconds() + timeout_s;
    int fd = connect_until(addr, port, deadline);
    if (fd == -2) return -1;
    if (fd < 0)
        return qlt_fail("rank %d: rank 0's rendezvous at %s:%d did not answer within %g s (train.dist_timeout_s): is "
                        "rank 0 running, and MASTER_ADDR / MASTER_PORT the same on every rank?", rank, addr, port,
                        timeout_s);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint32_t hello[3] = {htonl(HELLO_MAGIC), htonl((uint32_t)rank), htonl((uint32_t)world)};
    int rc = 0;
    /* rank 0 answers once every rank has arrived: the whole timeout again for the slowest one */
    if (transfer(fd, hello, sizeof hello, deadline, 1) != 0 ||
        transfer(fd, blob, bytes, deadline + timeout_s, 0) != 0)
        rc = qlt_fail("rank %d: the rendezvous with rank 0 at %s:%d ended before rank 0 sent its id (rank 0 failed, "
                      "or another rank did not arrive within %g s: rank 0's error names it)", rank, addr, port,
                      timeout_s);
    close(fd);
    return rc;
}

int qlt_rendezvous_share(const char *addr, int port, int rank, int world, double timeout_s, void *blob,
                         size_t bytes) {
    if (world <= 1) return 0;
    return rank == 0 ? serve(addr, port, world, timeout_s, blob, bytes)
                     : join(addr, port, rank, world, timeout_s, blob, bytes);
}
