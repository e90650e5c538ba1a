/*
 * svc-egress-front: the egress proxy's front on a host. The sandbox firewall redirects every TCP
 * connection a sandbox opens to this listener (nft `redirect`); Node cannot read a redirected
 * connection's original destination, this can (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST, from
 * conntrack). Each accepted connection is handed to the proxy (Node, on a root-only unix socket)
 * as a PROXY protocol v1 line naming source and original destination, then the bytes are
 * relayed both ways.
 *
 *   svc-egress-front <listen address> <port> <unix socket>
 *                    [<per-source cap> <total cap> <idle seconds> <hand-off seconds>]
 *
 * One thread, one epoll loop, non-blocking sockets: a held connection costs its two sockets
 * (the sandbox's, the proxy's) and one ~300-byte record; bytes go through one shared buffer and
 * only what a slow receiver has not taken yet is kept (at most CHUNK per direction, freed once
 * taken). Bounds (a sandbox is its source address):
 *   - per source: past <per-source cap> open connections, a new one is reset at once;
 *   - in all: past <total cap> (lowered to what the fd limit allows), the same;
 *   - a connection the proxy has not taken within <hand-off seconds> (its accept queue full),
 *     and one with no byte either way for <idle seconds>, is closed.
 * Refusals are reported on stdout, at most one line per source per NOTICE_MS, with how many
 * were refused since the last line:  refused <source> <per-source|total> <cap> <count>
 *
 * Prints "ready ..." once listening. Exits 98 when the port is taken (another agent on this
 * bridge serves it), 2 on bad usage, 1 on any other failure to start; ends when its stdin closes
 * (the agent went away) or its parent dies.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

#define CHUNK (32 * 1024)
#define NOTICE_MS 10000
#define SOURCE_BUCKETS 4096
/* Descriptors kept for the process itself (stdio, listener, epoll, one spare). */
#define RESERVED_FDS 16

enum { CLIENT = 0, PROXY = 1 };
enum { HANDOFF, RELAY, DEAD };

/* A sandbox, by its source address: its open connections and its refusals not yet reported. */
struct source {
  struct source *next;
  unsigned char address[16];
  int family;
  unsigned count;
  unsigned refused;
  const char *reason;
  unsigned cap;
  int64_t noticed;
};

/* Bytes read from fd[d] and written to fd[1 - d]: dir[CLIENT] goes to the proxy, dir[PROXY] back. */
struct direction {
  char *pending; /* what the receiver did not take yet (only while it is slower) */
  unsigned offset, length;
  unsigned char eof;  /* the sender ended (or failed) */
  unsigned char done; /* nothing more will go this way */
};

struct conn {
  struct conn *prev, *next; /* in `handoffs` or `relays`, soonest deadline first */
  struct conn *dead_next;
  struct source *source;
  int64_t deadline;
  int fd[2];
  uint32_t events[2];
  unsigned char gone[2]; /* hung up or failed: out of epoll, nothing more can be written to it */
  unsigned char state;
  unsigned char line_length;
  struct direction dir[2];
  char line[112]; /* the PROXY line, until the proxy takes the connection */
};

struct list {
  struct conn *head, *tail;
};

static struct sockaddr_un upstream;
static int epfd, listener;
static unsigned max_per_source = 256, max_total = 4096;
static int64_t idle_ms = 600000, handoff_ms = 10000;
static int64_t now;
static unsigned total;
static struct list handoffs, relays;
static struct conn *dead;
static struct source *sources[SOURCE_BUCKETS];
static char scratch[CHUNK];
static int64_t listener_paused_until;

/* Tags in epoll_event.data: a connection is its (aligned) address with the side in bit 0. */
#define TAG_LISTENER 0u
#define TAG_STDIN 2u

static int64_t clock_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void unlink_conn(struct list *l, struct conn *c) {
  if (c->prev) c->prev->next = c->next; else l->head = c->next;
  if (c->next) c->next->prev = c->prev; else l->tail = c->prev;
  c->prev = c->next = NULL;
}

static void append(struct list *l, struct conn *c) {
  c->prev = l->tail;
  c->next = NULL;
  if (l->tail) l->tail->next = c; else l->head = c;
  l->tail = c;
}

static struct source *source_of(const struct sockaddr_storage *sa) {
  unsigned char key[16] = { 0 };
  int family = sa->ss_family;
  if (family == AF_INET) memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  else if (family == AF_INET6) memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  else return NULL;
  uint32_t h = 2166136261u;
  for (int i = 0; i < 16; i++) h = (h ^ key[i]) * 16777619u;
  struct source **bucket = &sources[h % SOURCE_BUCKETS];
  for (struct source *s = *bucket; s; s = s->next) {
    if (s->family == family && memcmp(s->address, key, 16) == 0) return s;
  }
  struct source *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  memcpy(s->address, key, 16);
  s->family = family;
  s->noticed = now - NOTICE_MS;
  s->next = *bucket;
  *bucket = s;
  return s;
}

/* One line per source and NOTICE_MS at most; stdout never blocks the loop (a line may be lost). */
static void notice(struct source *s) {
  if (s->refused == 0 || now - s->noticed < NOTICE_MS) return;
  char address[INET6_ADDRSTRLEN], line[160];
  inet_ntop(s->family, s->address, address, sizeof address);
  int n = snprintf(line, sizeof line, "refused %s %s %u %u\n", address, s->reason, s->cap, s->refused);
  if (n > 0 && write(1, line, (size_t)n) < 0) {}
  s->refused = 0;
  s->noticed = now;
}

static void refuse(int fd, struct source *s, const char *reason, unsigned cap) {
  /* A reset, not an empty answer: the client sees at once that it was refused. */
  struct linger reset = { .l_onoff = 1, .l_linger = 0 };
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(fd);
  if (s == NULL) return;
  s->refused++;
  s->reason = reason;
  s->cap = cap;
  notice(s);
}

static void close_conn(struct conn *c) {
  if (c->state == DEAD) return;
  unlink_conn(c->state == HANDOFF ? &handoffs : &relays, c);
  for (int i = 0; i < 2; i++) {
    if (c->fd[i] >= 0) close(c->fd[i]);
    free(c->dir[i].pending);
    c->dir[i].pending = NULL;
  }
  c->source->count--;
  total--;
  c->state = DEAD;
  /* Freed after the current batch of events, which may still name it. */
  c->dead_next = dead;
  dead = c;
}

static void touch(struct conn *c) {
  c->deadline = now + idle_ms;
  if (relays.tail != c) {
    unlink_conn(&relays, c);
    append(&relays, c);
  }
}

/* Moves what it can one way; never blocks. */
static void pump(struct conn *c, int d) {
  struct direction *r = &c->dir[d];
  int from = c->fd[d], to = c->fd[1 - d];
  if (r->done) return;
  if (r->length > 0) {
    ssize_t m = send(to, r->pending + r->offset, r->length - r->offset, MSG_NOSIGNAL);
    if (m < 0 && errno != EAGAIN && errno != EINTR) {
      r->eof = r->done = 1;
      return;
    }
    if (m > 0) {
      r->offset += (unsigned)m;
      touch(c);
    }
    if (r->offset < r->length) return;
    free(r->pending);
    r->pending = NULL;
    r->offset = r->length = 0;
  }
  /* A bounded number of reads per wake-up, so one busy connection does not starve the others;
     a sender that hung up is out of epoll and is read to its end. */
  for (int budget = c->gone[d] ? -1 : 8; budget != 0 && !r->eof; budget--) {
    ssize_t n = recv(from, scratch, CHUNK, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    if (n <= 0) {
      r->eof = 1;
      break;
    }
    touch(c);
    ssize_t m = send(to, scratch, (size_t)n, MSG_NOSIGNAL);
    if (m < 0 && (errno == EAGAIN || errno == EINTR)) m = 0;
    if (m < 0) {
      r->eof = r->done = 1;
      return;
    }
    if (m < n) {
      r->pending = malloc((size_t)(n - m));
      if (r->pending == NULL) {
        r->eof = r->done = 1;
        return;
      }
      memcpy(r->pending, scratch + m, (size_t)(n - m));
      r->length = (unsigned)(n - m);
      return;
    }
  }
  if (r->eof && r->length == 0) {
    if (!c->gone[1 - d]) shutdown(to, SHUT_WR);
    r->done = 1;
  }
}

/* Registers what each live socket waits for: reading while its direction is clear, writing while the other one has a backlog. */
static void update(struct conn *c) {
  for (int side = 0; side < 2; side++) {
    if (c->gone[side]) continue;
    const struct direction *in = &c->dir[side], *out = &c->dir[1 - side];
    uint32_t want = 0;
    if (!in->eof && in->length == 0) want |= EPOLLIN;
    if (!out->done && out->length > 0) want |= EPOLLOUT;
    if (want != c->events[side]) {
      struct epoll_event e = { .events = want, .data.u64 = (uint64_t)(uintptr_t)c | (uint64_t)side };
      epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd[side], &e);
      c->events[side] = want;
    }
  }
}

static void on_conn(struct conn *c, int side, uint32_t events) {
  if (c->state != RELAY) return;
  if (events & (EPOLLHUP | EPOLLERR)) {
    /* Hung up or reset: what it sent is still read (pump, below, also without epoll), nothing more reaches it. */
    c->gone[side] = 1;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd[side], NULL);
    struct direction *to_it = &c->dir[1 - side];
    to_it->eof = to_it->done = 1;
    free(to_it->pending);
    to_it->pending = NULL;
    to_it->offset = to_it->length = 0;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) pump(c, side);
  if (events & EPOLLOUT) pump(c, 1 - side);
  if (c->dir[0].done && c->dir[1].done) {
    close_conn(c);
    return;
  }
  update(c);
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

/* 1: the proxy has the connection; 0: its accept queue is full, try again; -1: it cannot be reached. */
static int hand_off(struct conn *c) {
  int proxy = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (proxy < 0) return errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM ? 0 : -1;
  if (connect(proxy, (struct sockaddr *)&upstream, sizeof upstream) != 0) {
    int e = errno;
    close(proxy);
    return e == EAGAIN || e == EINTR ? 0 : -1;
  }
  /* A fresh socket's send buffer takes the whole line. */
  if (send(proxy, c->line, c->line_length, MSG_NOSIGNAL) != c->line_length) {
    close(proxy);
    return -1;
  }
  c->fd[PROXY] = proxy;
  for (int side = 0; side < 2; side++) {
    struct epoll_event e = { .events = EPOLLIN, .data.u64 = (uint64_t)(uintptr_t)c | (uint64_t)side };
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd[side], &e) != 0) return -1;
    c->events[side] = EPOLLIN;
  }
  unlink_conn(&handoffs, c);
  c->state = RELAY;
  c->deadline = now + idle_ms;
  append(&relays, c);
  return 1;
}

static void retry_handoffs(void) {
  while (handoffs.head) {
    struct conn *c = handoffs.head;
    int result = hand_off(c);
    if (result == 0) return;
    if (result < 0) close_conn(c);
  }
}

static void accept_all(void) {
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage source, target;
    socklen_t length = sizeof source;
    int fd = accept4(listener, (struct sockaddr *)&source, &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno != EAGAIN) listener_paused_until = now + 100; /* EMFILE and the like: breathe */
      return;
    }
    struct source *s = source_of(&source);
    if (s == NULL) {
      refuse(fd, NULL, "", 0);
      continue;
    }
    if (s->count >= max_per_source) {
      refuse(fd, s, "per-source", max_per_source);
      continue;
    }
    if (total >= max_total) {
      refuse(fd, s, "total", max_total);
      continue;
    }
    char src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN];
    unsigned sport = 0, dport = 0;
    length = sizeof target;
    if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &target, &length) != 0) {
      length = sizeof target;
      if (getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &target, &length) != 0) {
        close(fd);
        continue;
      }
    }
    int family = format_address(&source, src, sizeof src, &sport);
    struct conn *c = calloc(1, sizeof *c);
    if (family < 0 || format_address(&target, dst, sizeof dst, &dport) != family || c == NULL) {
      free(c);
      close(fd);
      continue;
    }
    int n = snprintf(c->line, sizeof c->line, "PROXY TCP%d %s %s %u %u\r\n", family, src, dst, sport, dport);
    c->line_length = (unsigned char)n;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd[CLIENT] = fd;
    c->fd[PROXY] = -1;
    c->source = s;
    c->state = HANDOFF;
    c->deadline = now + handoff_ms;
    s->count++;
    total++;
    append(&handoffs, c);
    /* In order: a connection never overtakes one still waiting for the proxy. */
    if (handoffs.head == c && hand_off(c) < 0) close_conn(c);
  }
}

/* Deadlines, and refusal counts whose line was held back; sources with nothing left are dropped. */
static void sweep(void) {
  while (handoffs.head && handoffs.head->deadline <= now) close_conn(handoffs.head);
  while (relays.head && relays.head->deadline <= now) close_conn(relays.head);
  for (int i = 0; i < SOURCE_BUCKETS; i++) {
    for (struct source **p = &sources[i]; *p;) {
      struct source *s = *p;
      notice(s);
      if (s->count == 0 && s->refused == 0 && now - s->noticed >= NOTICE_MS) {
        *p = s->next;
        free(s);
      } else {
        p = &s->next;
      }
    }
  }
}

static unsigned argument(const char *text, unsigned low, unsigned high) {
  char *end;
  unsigned long value = strtoul(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < low || value > high) {
    fprintf(stderr, "svc-egress-front: %s is not a number in [%u, %u]\n", text, low, high);
    exit(2);
  }
  return (unsigned)value;
}

int main(int argc, char **argv) {
  if ((argc != 4 && argc != 8) || strlen(argv[3]) >= sizeof upstream.sun_path) {
    fprintf(stderr, "usage: svc-egress-front <listen address> <port> <unix socket> "
                    "[<per-source cap> <total cap> <idle seconds> <hand-off seconds>]\n");
    return 2;
  }
  if (argc == 8) {
    max_per_source = argument(argv[4], 1, 1u << 20);
    max_total = argument(argv[5], 1, 1u << 20);
    idle_ms = (int64_t)argument(argv[6], 1, 86400 * 7) * 1000;
    handoff_ms = (int64_t)argument(argv[7], 1, 3600) * 1000;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  upstream.sun_family = AF_UNIX;
  strcpy(upstream.sun_path, argv[3]);

  /* Two descriptors a connection: the total cap stays below what the fd limit allows. */
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur != RLIM_INFINITY) {
      rlim_t room = files.rlim_cur > 2 * RESERVED_FDS ? (files.rlim_cur - RESERVED_FDS) / 2 : 1;
      if (room < max_total) max_total = (unsigned)room;
    }
  }

  struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
  if (inet_pton(AF_INET, argv[1], &address.sin_addr) != 1) {
    fprintf(stderr, "svc-egress-front: %s is not an IPv4 address\n", argv[1]);
    return 2;
  }
  listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
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
  epfd = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event e = { .events = EPOLLIN, .data.u64 = TAG_LISTENER };
  if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &e) != 0) {
    fprintf(stderr, "svc-egress-front: epoll: %s\n", strerror(errno));
    return 1;
  }
  /* The agent holds our stdin: when it goes, so do we. */
  e.data.u64 = TAG_STDIN;
  epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &e);
  fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
  printf("ready per-source=%u total=%u idle=%llds hand-off=%llds\n", max_per_source, max_total,
         (long long)(idle_ms / 1000), (long long)(handoff_ms / 1000));
  fflush(stdout);

  int listening = 1;
  int64_t swept = 0;
  struct epoll_event events[256];
  for (;;) {
    int timeout = handoffs.head ? 20 : !listening ? 100 : 1000;
    int n = epoll_wait(epfd, events, 256, timeout);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "svc-egress-front: epoll_wait: %s\n", strerror(errno));
      return 1;
    }
    now = clock_ms();
    for (int i = 0; i < n; i++) {
      uint64_t tag = events[i].data.u64;
      if (tag == TAG_LISTENER) {
        accept_all();
      } else if (tag == TAG_STDIN) {
        char buffer[64];
        ssize_t got = read(0, buffer, sizeof buffer);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) _exit(0);
      } else {
        on_conn((struct conn *)(uintptr_t)(tag & ~(uint64_t)1), (int)(tag & 1), events[i].events);
      }
    }
    if (handoffs.head) retry_handoffs();
    if (listening && listener_paused_until > now) {
      epoll_ctl(epfd, EPOLL_CTL_DEL, listener, NULL);
      listening = 0;
    } else if (!listening && listener_paused_until <= now) {
      struct epoll_event again = { .events = EPOLLIN, .data.u64 = TAG_LISTENER };
      epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &again);
      listening = 1;
    }
    if (now - swept >= 1000 || (handoffs.head && handoffs.head->deadline <= now)) {
      sweep();
      swept = now;
    }
    while (dead) {
      struct conn *c = dead;
      dead = c->dead_next;
      free(c);
    }
  }
}
