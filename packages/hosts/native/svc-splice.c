/*
 * svc-splice: moves exactly `bytes` bytes from descriptor 3 to descriptor 4, two connections of
 * the API's (a spliced download: from the host's to the client's; an upload: from the client's
 * to the host's), through a pipe of its own with splice(2), so that a file's bytes never pass
 * through the API's event loop. Started by the API once per transfer (@svc/hosts/Splice), with
 * both connections inherited.
 *
 *   svc-splice bytes idle-ms
 *
 * Reads no byte past `bytes` (whatever follows on descriptor 3 is not the transfer's). Both
 * connections are nonblocking (the API's own sockets): a side that is not ready is waited for
 * with poll, where the idle bound is kept (0: none).
 * Answers one line on descriptor 1 and exits 0 or 1:
 *   D bytes            all of them moved
 *   E errno side message
 *                      not all; side: `from` (3 ended early: ECONNRESET, or its read failed),
 *                      `to` (4's write failed: EPIPE, its reader went), `-` (ETIMEDOUT: nothing
 *                      moved for idle-ms; or a failure of this process's own)
 * It closes every other descriptor it inherited; run as root (a developer's host), it drops to
 * nobody; in every case it sets no_new_privs and dies with the API (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FROM 3
#define TO 4
#define PIPE_BYTES (1 << 20)

static int report(int e, const char *side, const char *what, unsigned long long moved) {
  char line[200];
  int n = e == 0 ? snprintf(line, sizeof line, "D %llu\n", moved)
                 : snprintf(line, sizeof line, "E %d %s %s after %llu bytes\n", e, side, what, moved);
  if (write(1, line, (size_t) n) < 0) return 1;
  return e == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc != 3) return report(EINVAL, "-", "usage: svc-splice bytes idle-ms", 0);
  char *end;
  errno = 0;
  unsigned long long total = strtoull(argv[1], &end, 10);
  if (errno || *end || end == argv[1]) return report(EINVAL, "-", "bytes is not a number", 0);
  unsigned long idle = strtoul(argv[2], &end, 10);
  if (*end || end == argv[2] || idle > 86400000UL) return report(EINVAL, "-", "idle-ms is not a number of ms", 0);

  /* Nothing of the API's but the two connections: a descriptor it left inheritable goes here. */
  if (syscall(SYS_close_range, 5U, ~0U, 0U) != 0) {
    for (int fd = 5; fd < 1024; fd++) close(fd);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() == 1) return report(ESRCH, "-", "the API is gone", 0);
  /* A reader gone is EPIPE from splice, not a signal that ends this process silently. */
  signal(SIGPIPE, SIG_IGN);
  if (geteuid() == 0) {
    if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
      return report(errno, "-", "dropping privileges", 0);
  }
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);

  int p[2];
  if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return report(errno, "-", "pipe", 0);
  /* 1 MiB (the unprivileged maximum): fewer wake-ups; a smaller pipe only costs more calls. */
  long capacity = fcntl(p[1], F_SETPIPE_SZ, PIPE_BYTES);
  if (capacity < 0) capacity = fcntl(p[1], F_GETPIPE_SZ);
  if (capacity <= 0) capacity = 65536;

  unsigned long long taken = 0, moved = 0; /* taken from FROM into the pipe; moved out to TO */
  int ended = 0;
  while (moved < total) {
    int progress = 0;
    unsigned long long held = taken - moved;
    if (!ended && taken < total && held < (unsigned long long) capacity) {
      unsigned long long want = total - taken;
      if (want > (unsigned long long) capacity - held) want = (unsigned long long) capacity - held;
      ssize_t n = splice(FROM, NULL, p[1], NULL, (size_t) want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        taken += (unsigned long long) n;
        progress = 1;
      } else if (n == 0) {
        ended = 1;
      } else if (errno != EAGAIN && errno != EINTR) {
        return report(errno, "from", "reading the source", moved);
      }
    }
    held = taken - moved;
    if (held > 0) {
      ssize_t n = splice(p[0], NULL, TO, NULL, (size_t) held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        moved += (unsigned long long) n;
        progress = 1;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return report(errno, "to", "writing the destination", moved);
      }
    }
    if (ended && taken == moved) return report(ECONNRESET, "from", "the source ended early", moved);
    if (progress) continue;
    /* Neither side moved: wait for what can unblock a call above. The pipe counts in slots, not
     * bytes (a TCP segment's bytes may take a page each): a full one refuses the source's bytes
     * while the source stays readable, so the source is waited for only while the pipe has
     * room, or this loop would spin until the destination drained. */
    struct pollfd room = {p[1], POLLOUT, 0};
    int has_room = taken == moved || (poll(&room, 1, 0) == 1 && (room.revents & POLLOUT));
    struct pollfd fds[2];
    nfds_t n = 0;
    if (!ended && taken < total && taken - moved < (unsigned long long) capacity && has_room)
      fds[n++] = (struct pollfd){FROM, POLLIN, 0};
    if (taken > moved) fds[n++] = (struct pollfd){TO, POLLOUT, 0};
    int ready = poll(fds, n, idle ? (int) idle : -1);
    if (ready == 0) return report(ETIMEDOUT, "-", "nothing moved for the idle bound", moved);
    if (ready < 0 && errno != EINTR) return report(errno, "-", "poll", moved);
    for (nfds_t i = 0; i < n; i++) {
      /* A hung-up destination: the next splice says EPIPE; a hung-up source: it reads 0 or fails. */
      if (fds[i].revents & POLLNVAL) return report(EBADF, "-", "a connection is closed", moved);
    }
  }
  return report(0, "", "", moved);
}
