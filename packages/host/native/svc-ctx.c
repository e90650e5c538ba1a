/*
 * svc-ctx: the client of a code context's runner (packages/sandboxes/src/Contexts.ts), run inside
 * the sandbox per run (through the exec path, from the helper folder bound read-only at
 * /dev/.svc; built static: a template may have no libc). It replaces the runner's own client
 * (a second python3 or node started per run, hundreds of milliseconds on a busy machine): it
 * starts in about a millisecond and only moves bytes.
 *
 *   svc-ctx SOCK TIMEOUT_MS KICK(0|1)    (stdin: the run's request, JSON, as the runner reads it)
 *
 * Connects to the runner's Unix socket SOCK, writes stdin to it, ends its side, and copies the
 * answer to stdout as it comes (a streamed run's events are written as they arrive). The socket
 * may not be there yet (the interpreter starting): a missing socket is waited for up to 10 s. A
 * socket that refuses is the interpreter gone (its file stays behind), after a short grace for
 * the moment between its bind and its listen. With KICK 1 (javascript: synchronous code holds the
 * interpreter's event loop), a run still open 100 ms past TIMEOUT_MS gets a SIGINT sent to the pid
 * the runner wrote in SOCK.pid.
 *
 * Exit codes: 3 the socket could not be reached (the interpreter is gone or never listened),
 * 4 the interpreter closed without answering, 1 anything else (bad arguments, stdin, stdout).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long) t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t) w;
  }
  return 0;
}

static void kick(const char *sock) {
  char path[sizeof(((struct sockaddr_un *) 0)->sun_path) + 8];
  snprintf(path, sizeof path, "%s.pid", sock);
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  long pid = 0;
  if (fscanf(f, "%ld", &pid) == 1 && pid > 1) kill((pid_t) pid, SIGINT);
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc != 4) return 1;
  const char *sock = argv[1];
  long long timeout_ms = atoll(argv[2]);
  int kicks = strcmp(argv[3], "1") == 0;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(sock) >= sizeof addr.sun_path) return 1;
  strcpy(addr.sun_path, sock);
  signal(SIGPIPE, SIG_IGN);

  /* The request, whole, before connecting: the runner reads it to its end. */
  size_t size = 0, cap = 65536;
  char *request = malloc(cap);
  if (request == NULL) return 1;
  for (;;) {
    if (size == cap) {
      char *grown = realloc(request, cap *= 2);
      if (grown == NULL) return 1;
      request = grown;
    }
    ssize_t r = read(0, request + size, cap - size);
    if (r < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (r == 0) break;
    size += (size_t) r;
  }

  long long started = now_ms();
  long long refused_since = -1;
  int fd;
  for (;;) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 1;
    if (connect(fd, (struct sockaddr *) &addr, sizeof addr) == 0) break;
    int e = errno;
    close(fd);
    long long t = now_ms();
    if (e == ECONNREFUSED) {
      /* Between the runner's bind and its listen, or no one behind the file any more. */
      if (refused_since < 0) refused_since = t;
      if (t - refused_since > 1000) return 3;
    } else if (e != ENOENT && e != EINTR && e != EAGAIN) {
      return 3;
    }
    if (t - started > 10000) return 3;
    usleep(20000);
  }
  if (write_all(fd, request, size) != 0) return 4;
  free(request);
  shutdown(fd, SHUT_WR);

  long long kick_at = kicks ? now_ms() + timeout_ms + 100 : -1;
  int got = 0;
  char buffer[65536];
  for (;;) {
    int wait = -1;
    if (kick_at >= 0) {
      long long left = kick_at - now_ms();
      if (left <= 0) {
        kick(sock);
        kick_at = -1;
      } else {
        wait = left > 1000000 ? 1000000 : (int) left;
      }
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int ready = poll(&p, 1, wait);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (ready == 0) continue;
    ssize_t r = read(fd, buffer, sizeof buffer);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (r == 0) break;
    got = 1;
    if (write_all(1, buffer, (size_t) r) != 0) return 1;
  }
  return got ? 0 : 4;
}
