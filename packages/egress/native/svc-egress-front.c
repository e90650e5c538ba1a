/*
 * svc-egress-front: the egress proxy's front on a host. The sandbox firewall redirects every TCP
 * connection a sandbox opens to this listener (nft `redirect`); Node cannot read a redirected
 * connection's original destination, this can (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST, from
 * conntrack). Each accepted connection is handed to the proxy (Node, on a root-only unix socket)
 * as a PROXY protocol v1 line naming source and original destination, then the bytes are
 * relayed both ways with splice(2), never copied through user space.
 *
 *   svc-egress-front <listen address> <port> <unix socket>
 *
 * Prints "ready" once listening. Exits 98 when the port is taken (another agent on this bridge
 * serves it), 2 on bad usage, 1 on any other failure to start; ends when its stdin closes (the
 * agent went away) or its parent dies.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

static struct sockaddr_un upstream;

struct relay {
  int from;
  int to;
};

/* One direction: from → pipe → to, until EOF or an error; then half-closes `to`. */
static void *pump(void *arg) {
  struct relay *r = arg;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) == 0) {
    for (;;) {
      ssize_t n = splice(r->from, NULL, pipefd[1], NULL, 1 << 16, SPLICE_F_MOVE);
      if (n <= 0) break;
      while (n > 0) {
        ssize_t m = splice(pipefd[0], NULL, r->to, NULL, (size_t)n, SPLICE_F_MOVE);
        if (m <= 0) goto done;
        n -= m;
      }
    }
  done:
    close(pipefd[0]);
    close(pipefd[1]);
  }
  shutdown(r->to, SHUT_WR);
  shutdown(r->from, SHUT_RD);
  return NULL;
}

static int format_address(const struct sockaddr_storage *sa, char *host, size_t size, unsigned *port) {
  if (sa->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    *port = ntohs(in->sin_port);
    return inet_ntop(AF_INET, &in->sin_addr, host, size) == NULL ? -1 : 4;
  }
  if (sa->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    *port = ntohs(in6->sin6_port);
    return inet_ntop(AF_INET6, &in6->sin6_addr, host, size) == NULL ? -1 : 6;
  }
  return -1;
}

static void *serve(void *arg) {
  int client = (int)(long)arg;
  struct sockaddr_storage source, target;
  socklen_t length = sizeof source;
  char src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN], line[160];
  unsigned sport = 0, dport = 0;
  int proxy = -1;
  if (getpeername(client, (struct sockaddr *)&source, &length) != 0) goto out;
  length = sizeof target;
  if (getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &target, &length) != 0) {
    length = sizeof target;
    if (getsockopt(client, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &target, &length) != 0) goto out;
  }
  int family = format_address(&source, src, sizeof src, &sport);
  if (family < 0 || format_address(&target, dst, sizeof dst, &dport) != family) goto out;
  proxy = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (proxy < 0 || connect(proxy, (struct sockaddr *)&upstream, sizeof upstream) != 0) goto out;
  int n = snprintf(line, sizeof line, "PROXY TCP%d %s %s %u %u\r\n", family, src, dst, sport, dport);
  if (n <= 0 || write(proxy, line, (size_t)n) != n) goto out;
  struct relay up = { client, proxy }, down = { proxy, client };
  pthread_t other;
  if (pthread_create(&other, NULL, pump, &up) != 0) goto out;
  pump(&down);
  pthread_join(other, NULL);
out:
  if (proxy >= 0) close(proxy);
  close(client);
  return NULL;
}

/* The agent holds our stdin: when it goes, so do we. */
static void *watch_stdin(void *arg) {
  (void)arg;
  char buffer[64];
  while (read(0, buffer, sizeof buffer) > 0) {}
  _exit(0);
}

int main(int argc, char **argv) {
  if (argc != 4 || strlen(argv[3]) >= sizeof upstream.sun_path) {
    fprintf(stderr, "usage: svc-egress-front <listen address> <port> <unix socket>\n");
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  upstream.sun_family = AF_UNIX;
  strcpy(upstream.sun_path, argv[3]);

  struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
  if (inet_pton(AF_INET, argv[1], &address.sin_addr) != 1) {
    fprintf(stderr, "svc-egress-front: %s is not an IPv4 address\n", argv[1]);
    return 2;
  }
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) {
    int code = errno == EADDRINUSE ? 98 : 1;
    fprintf(stderr, "svc-egress-front: bind %s:%s: %s\n", argv[1], argv[2], strerror(errno));
    return code;
  }
  if (listen(listener, 1024) != 0) {
    fprintf(stderr, "svc-egress-front: listen: %s\n", strerror(errno));
    return 1;
  }
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 64 * 1024);
  pthread_t watcher;
  pthread_create(&watcher, &attributes, watch_stdin, NULL);
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) usleep(10000);
        continue;
      }
      fprintf(stderr, "svc-egress-front: accept: %s\n", strerror(errno));
      return 1;
    }
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t thread;
    if (pthread_create(&thread, &attributes, serve, (void *)(long)client) != 0) close(client);
  }
}
