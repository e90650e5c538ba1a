/*
 * svc-spawner: starts host commands on the driver's behalf, so that no command start forks the
 * agent (a Node process of ~150 MB, whose every fork costs in proportion to its memory: ~5.6 ms
 * at 151 MB, against ~0.1 ms for this process). Started once by the driver (`Spawner.ts`), as
 * the agent's user, with its requests on fd 0 and its answers on fd 1: pipes it inherited, so
 * no other process can reach it (there is no path to connect to, and it is not dumpable, so
 * only root can open its descriptors through /proc).
 *
 * Requests (fd 0), each `u32 length` then the body; integers u32 little-endian, strings
 * `u32 length` + bytes:
 *   'S' id flags file argc argv... envc env... nfds {kind u8, arg string}...
 *       starts file with argv and exactly env, in a session of its own; its descriptor i is
 *       kind i: 'n' nothing (0-2: /dev/null), 'i' a pipe it reads (the agent writes),
 *       'o' a pipe it writes (the agent reads), 'd' a pipe holding arg's bytes then end of
 *       file, 'a' arg opened to append (created 0600), 't' arg opened and truncated (created
 *       0600), 's' the same open file as its descriptor number arg. flags: 1 = outlive this
 *       spawner (a sandbox's bubblewrap); otherwise it is killed (SIGKILL) if this process
 *       dies.
 *   'O' id        the agent opened its ends (/proc/<this pid>/fd/N): this process closes them.
 *   'K' id signal group   signals the command (or its process group), if not reaped yet: a
 *       pid this process has not reaped cannot have been reused.
 *   'N' id pid start-ticks bridge host-end mac ip prefix gateway
 *       a sandbox's veth pair, by rtnetlink (what two `ip -batch` runs did): the host end on
 *       the bridge, isolated, up, the host's neighbour entry of ip; the inner end born in the
 *       network namespace of the sandbox's init (pid, checked against its start time) as eth0
 *       with the MAC, no IPv6 address generation, ip/prefix, up, lo up, and a default route
 *       via gateway unless it is empty.
 *   'A' id pid start-ticks hostname shm-bytes
 *       a sandbox adopted from the pool (what `nsenter` + a busybox shell did): in the UTS and
 *       mount namespaces and the root of its init, the hostname, and /dev/shm remounted with
 *       size shm-bytes.
 *   'L' id name
 *       removes the link `name` of the host's network namespace (what `ip link del` did: a
 *       sandbox's veth host end, whose removal takes its peer with it); one gone already is done.
 *   'P' id from to idle-ms
 *       splices bytes from the agent's descriptor `from` to its descriptor `to` (a connection and
 *       a command's pipe, either way) until end of file on `from`: the kernel moves them, the
 *       agent's event loop never touches them. Both are the agent's own open files, taken with
 *       pidfd_getfd(2) (the agent is this process's parent). Fails with ETIMEDOUT once nothing
 *       moved for idle-ms (0: no bound), with the errno of a read or write that failed (a
 *       connection reset, a reader gone).
 *     All four run in a child of this process that never execs (a fork of this small process, no
 *     program started), so a namespace it joins is never this process's own.
 * Answers (fd 1), one line each:
 *   S id pid fd0 fd1 ...  started; fdN is this process's descriptor of the agent's end, or -1
 *   E id errno message    could not start (nothing runs), or an 'N', 'A', 'L' or 'P' that failed
 *   X id status           ended, with its wait status
 *   D id [bytes]          an 'N', 'A' or 'L' done; a 'P' done, with the bytes it moved
 * An unreadable request ends this process (the agent restarts it). End of file on fd 0 ends it
 * too: the commands started with flag 1 go on, the others are killed by the kernel.
 */
#define _GNU_SOURCE
#include "rtnl.h"
#include "start-ticks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/if_link.h>
#include <linux/magic.h>
#include <linux/neighbour.h>
#include <linux/openat2.h>
#include <linux/veth.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REQUEST (8 * 1024 * 1024)
#define MAX_FDS 16
#define MAX_ARGS 4096

struct child {
  uint32_t id;
  pid_t pid;
  int reaped;
  int held[MAX_FDS]; /* this process's copies of the agent's ends, until 'O' */
  int nheld;
  int task; /* an 'N', 'A' or 'L': the read end of its reason pipe; -1 for a command */
};

static struct child *children = NULL;
static size_t nchildren = 0, capchildren = 0;
static pid_t self;
/* The agent (this process's parent), for 'P': its descriptors are taken through this pidfd. */
static int agent_pidfd = -1;

static void die(const char *why) {
  fprintf(stderr, "svc-spawner: %s\n", why);
  _exit(2);
}

static void answer(const char *line, size_t len) {
  while (len > 0) {
    ssize_t n = write(1, line, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      _exit(0); /* the agent is gone */
    }
    line += n;
    len -= (size_t) n;
  }
}

static struct child *find(uint32_t id) {
  for (size_t i = 0; i < nchildren; i++)
    if (children[i].id == id) return &children[i];
  return NULL;
}

static void forget(struct child *c) {
  for (int i = 0; i < c->nheld; i++) close(c->held[i]);
  if (c->task >= 0) close(c->task);
  *c = children[--nchildren];
}

static struct child *track(uint32_t id, pid_t pid) {
  if (nchildren == capchildren) {
    capchildren = capchildren ? capchildren * 2 : 64;
    children = realloc(children, capchildren * sizeof *children);
    if (children == NULL) die("out of memory");
  }
  struct child *c = &children[nchildren++];
  c->id = id;
  c->pid = pid;
  c->reaped = 0;
  c->nheld = 0;
  c->task = -1;
  return c;
}

/* A cursor over one request's body. */
struct reader {
  const unsigned char *p, *end;
};

static uint32_t u32(struct reader *r) {
  if (r->end - r->p < 4) die("short request");
  uint32_t v = (uint32_t) r->p[0] | (uint32_t) r->p[1] << 8 | (uint32_t) r->p[2] << 16 | (uint32_t) r->p[3] << 24;
  r->p += 4;
  return v;
}

/* A string of the request, NUL-terminated in place of the next field's first byte is not
 * possible, so copied. */
static char *str(struct reader *r, uint32_t *len_out) {
  uint32_t len = u32(r);
  if ((uint32_t) (r->end - r->p) < len) die("short string");
  char *s = malloc((size_t) len + 1);
  if (s == NULL) die("out of memory");
  memcpy(s, r->p, len);
  s[len] = 0;
  r->p += len;
  if (len_out) *len_out = len;
  return s;
}

/* Child side: reports errno on the status pipe and ends. */
static void child_fail(int status_fd, const char *what) {
  int e = errno;
  char line[256];
  int n = snprintf(line, sizeof line, "%d %s: %s", e, what, strerror(e));
  if (n > 0) (void) !write(status_fd, line, (size_t) n);
  _exit(127);
}

/* execve with a PATH search in the command's own environment, as execvpe would in ours. */
static void exec_search(const char *file, char **argv, char **envp) {
  if (strchr(file, '/') != NULL) {
    execve(file, argv, envp);
    return;
  }
  const char *path = "/usr/sbin:/usr/bin:/sbin:/bin";
  for (char **e = envp; *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  char full[PATH_MAX];
  int saved = ENOENT;
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t dlen = colon ? (size_t) (colon - path) : strlen(path);
    if (dlen > 0 && dlen + strlen(file) + 2 < sizeof full) {
      memcpy(full, path, dlen);
      full[dlen] = '/';
      strcpy(full + dlen + 1, file);
      execve(full, argv, envp);
      if (errno != ENOENT) saved = errno;
    }
    path += dlen;
    if (*path == ':') path++;
  }
  errno = saved;
}

static void spawn(struct reader *r) {
  uint32_t id = u32(r), flags = u32(r);
  char *file = str(r, NULL);
  uint32_t argc = u32(r);
  if (argc == 0 || argc > MAX_ARGS) die("argc");
  char **argv = calloc(argc + 1, sizeof *argv);
  for (uint32_t i = 0; i < argc; i++) argv[i] = str(r, NULL);
  uint32_t envc = u32(r);
  if (envc > MAX_ARGS) die("envc");
  char **envp = calloc(envc + 1, sizeof *envp);
  for (uint32_t i = 0; i < envc; i++) envp[i] = str(r, NULL);
  uint32_t nfds = u32(r);
  if (nfds > MAX_FDS) die("nfds");

  /* theirs[i]: what becomes the command's fd i (-1: closed); ours: the agent's ends. */
  int theirs[MAX_FDS], ours[MAX_FDS], error = 0;
  char what[128] = "";
  for (uint32_t i = 0; i < MAX_FDS; i++) theirs[i] = ours[i] = -1;
  for (uint32_t i = 0; i < nfds; i++) {
    if (r->p >= r->end) die("short fd");
    unsigned char kind = *r->p++;
    uint32_t alen;
    char *arg = str(r, &alen);
    int p[2];
    if (error) {
      free(arg);
      continue;
    }
    switch (kind) {
      case 'n':
        if (i <= 2 && (theirs[i] = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) error = errno;
        break;
      case 'i':
      case 'o':
        if (pipe2(p, O_CLOEXEC) != 0) {
          error = errno;
          break;
        }
        theirs[i] = kind == 'i' ? p[0] : p[1];
        ours[i] = kind == 'i' ? p[1] : p[0];
        break;
      case 'd':
        if (pipe2(p, O_CLOEXEC) != 0) {
          error = errno;
          break;
        }
        /* The bytes wait in the pipe: it is made as large as they need (root may pass the
         * system's pipe-max-size). */
        if (alen > 65536 && fcntl(p[1], F_SETPIPE_SZ, (int) alen) < 0) error = errno;
        else if (alen > 0 && write(p[1], arg, alen) != (ssize_t) alen) error = errno ? errno : EIO;
        close(p[1]);
        theirs[i] = p[0];
        break;
      case 'a':
      case 't':
        theirs[i] = open(arg, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | (kind == 'a' ? O_APPEND : O_TRUNC), 0600);
        if (theirs[i] < 0) error = errno;
        break;
      case 's': {
        long j = strtol(arg, NULL, 10);
        if (j < 0 || (uint32_t) j >= i || theirs[j] < 0 || (theirs[i] = fcntl(theirs[j], F_DUPFD_CLOEXEC, 0)) < 0)
          error = errno ? errno : EINVAL;
        break;
      }
      default:
        die("fd kind");
    }
    if (error) snprintf(what, sizeof what, "descriptor %u", i);
    free(arg);
  }

  int status[2] = {-1, -1};
  pid_t pid = -1;
  if (!error && pipe2(status, O_CLOEXEC) != 0) error = errno;
  if (!error) {
    pid = fork();
    if (pid < 0) error = errno;
  }
  if (pid == 0) {
    close(status[0]);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (!(flags & 1)) {
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(status[1], "PR_SET_PDEATHSIG");
      if (getppid() != self) _exit(127);
    }
    if (setsid() < 0) child_fail(status[1], "setsid");
    /* Every source above the targets first, then into place (dup2 clears close-on-exec). */
    for (uint32_t i = 0; i < nfds; i++)
      if (theirs[i] >= 0 && (theirs[i] = fcntl(theirs[i], F_DUPFD_CLOEXEC, MAX_FDS + 8)) < 0)
        child_fail(status[1], "dup");
    for (uint32_t i = 0; i < nfds; i++) {
      if (theirs[i] >= 0) {
        if (dup2(theirs[i], (int) i) < 0) child_fail(status[1], "dup2");
      } else {
        close((int) i);
      }
    }
    /* Nothing else of this process reaches the command (the status pipe closes at exec). */
    if (syscall(SYS_close_range, nfds, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) != 0)
      for (int fd = (int) nfds; fd < 1024; fd++)
        if (fd != status[1]) close(fd);
    exec_search(file, argv, envp);
    child_fail(status[1], file);
  }

  for (uint32_t i = 0; i < nfds; i++)
    if (theirs[i] >= 0) close(theirs[i]);
  char line[512];
  int n;
  if (!error) {
    close(status[1]);
    /* Empty at exec (close-on-exec), or the child's reason. */
    char reason[256];
    ssize_t got;
    do got = read(status[0], reason, sizeof reason - 1);
    while (got < 0 && errno == EINTR);
    close(status[0]);
    if (got > 0) {
      reason[got] = 0;
      /* It ends (127) and is reaped below; nothing of it reaches the agent but this answer. */
      int e = atoi(reason);
      char *text = strchr(reason, ' ');
      for (char *c = reason; *c; c++)
        if (*c == '\n') *c = ' ';
      for (uint32_t i = 0; i < nfds; i++)
        if (ours[i] >= 0) close(ours[i]);
      n = snprintf(line, sizeof line, "E %u %d %s\n", id, e, text ? text + 1 : "exec");
      answer(line, (size_t) n);
      /* Reaped here, so no X follows an E. */
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
      goto done;
    }
    struct child *c = track(id, pid);
    n = snprintf(line, sizeof line, "S %u %d", id, (int) pid);
    for (uint32_t i = 0; i < nfds; i++) {
      if (ours[i] >= 0) c->held[c->nheld++] = ours[i];
      n += snprintf(line + n, sizeof line - (size_t) n, " %d", ours[i]);
    }
    line[n++] = '\n';
    answer(line, (size_t) n);
  } else {
    if (status[0] >= 0) close(status[0]);
    if (status[1] >= 0) close(status[1]);
    for (uint32_t i = 0; i < nfds; i++)
      if (ours[i] >= 0) close(ours[i]);
    n = snprintf(line, sizeof line, "E %u %d %s: %s\n", id, error, what[0] ? what : "fork", strerror(error));
    answer(line, (size_t) n);
  }
done:
  free(file);
  for (uint32_t i = 0; i < argc; i++) free(argv[i]);
  for (uint32_t i = 0; i < envc; i++) free(envp[i]);
  free(argv);
  free(envp);
}

/* ------------------------------------------------------------------------------------------
 * Tasks ('N', 'A', 'L'): work of this process's own, done by a forked child that never execs. The
 * fork copies this small process (~0.1 ms, as for a command); the child may join a sandbox's
 * namespaces, which this process must never do. Its reason, if it fails, comes back on a pipe
 * read once it has been reaped (then `E`), else `D`.
 */

/* Child side: "errno what: detail" (detail: the kernel's words if any, else strerror). */
static int task_error(char *why, size_t len, int e, const char *what, const char *detail) {
  snprintf(why, len, "%s: %s", what, detail != NULL && detail[0] ? detail : strerror(e));
  return e ? e : EIO;
}

/* The namespace file `kind` of a sandbox's init, checked against its start time once open. */
static int init_ns(pid_t pid, unsigned long long ticks, const char *kind, int flags) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, kind);
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0) return -1;
  if (ticks == 0 || start_ticks(pid) != ticks) {
    close(fd);
    errno = ESRCH;
    return -1;
  }
  return fd;
}

typedef int (*task_work)(const void *arg, char *why, size_t len);

/* keep: descriptors of this process the child gets as 4, 5, ... (nkeep of them). */
static void task(uint32_t id, task_work work, const void *arg, const int *keep, int nkeep) {
  int status[2];
  pid_t pid = -1;
  int error = 0;
  if (pipe2(status, O_CLOEXEC) != 0) error = errno;
  else if ((pid = fork()) < 0) {
    error = errno;
    close(status[0]);
    close(status[1]);
  }
  if (pid == 0) {
    /* Nothing of this process but the reason pipe (and stderr) stays with the child. */
    if (dup2(status[1], 3) != 3) _exit(126);
    /* Above every descriptor first, then down into place: a keep[i] may be 4 + j of another. */
    int high[8];
    for (int i = 0; i < nkeep; i++)
      if ((high[i] = fcntl(keep[i], F_DUPFD_CLOEXEC, 64)) < 0) _exit(126);
    for (int i = 0; i < nkeep; i++)
      if (dup2(high[i], 4 + i) != 4 + i) _exit(126);
    if (syscall(SYS_close_range, 4 + nkeep, ~0U, 0) != 0)
      for (int fd = 4 + nkeep; fd < 1024; fd++) close(fd);
    close(0);
    close(1);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != self) _exit(126);
    char why[400];
    why[0] = 0;
    int e = work(arg, why, sizeof why);
    if (e == 0) {
      /* A result to report with D (a 'P' moved this many bytes). */
      if (why[0]) (void) !write(3, why, strlen(why));
      _exit(0);
    }
    char line[420];
    int n = snprintf(line, sizeof line, "%d %s", e, why);
    if (n > 0) (void) !write(3, line, (size_t) n);
    _exit(1);
  }
  if (error) {
    char line[160];
    int n = snprintf(line, sizeof line, "E %u %d fork: %s\n", id, error, strerror(error));
    answer(line, (size_t) n);
    return;
  }
  close(status[1]);
  track(id, pid)->task = status[0];
}

/* Parent side, once reaped: its answer. */
static void task_done(struct child *c, int status) {
  char reason[420] = "", line[480];
  ssize_t got = 0;
  do got = read(c->task, reason, sizeof reason - 1);
  while (got < 0 && errno == EINTR);
  int n;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    if (got > 0) {
      reason[got] = 0;
      for (char *p = reason; *p; p++)
        if (*p == '\n' || *p == ' ') *p = '_';
      n = snprintf(line, sizeof line, "D %u %s\n", c->id, reason);
    } else {
      n = snprintf(line, sizeof line, "D %u\n", c->id);
    }
  } else if (got > 0) {
    reason[got] = 0;
    for (char *p = reason; *p; p++)
      if (*p == '\n') *p = ' ';
    char *text = strchr(reason, ' ');
    n = snprintf(line, sizeof line, "E %u %d %s\n", c->id, atoi(reason), text ? text + 1 : "failed");
  } else if (WIFSIGNALED(status)) {
    n = snprintf(line, sizeof line, "E %u %d killed by signal %d\n", c->id, EINTR, WTERMSIG(status));
  } else {
    n = snprintf(line, sizeof line, "E %u %d ended with %d\n", c->id, EIO, WEXITSTATUS(status));
  }
  answer(line, (size_t) n);
}

struct veth_request {
  pid_t pid;
  unsigned long long ticks;
  char bridge[IF_NAMESIZE], host[IF_NAMESIZE];
  unsigned char mac[6];
  struct in_addr ip, gateway;
  int route;
  unsigned char prefix;
};

/* The steps of Network.ts's former `ip -batch` scripts, one rtnetlink request each, in their order. */
static int veth_work(const void *arg, char *why, size_t len) {
  const struct veth_request *q = arg;
  char detail[256];
  int e;
  struct rtnl_msg m;
  struct ifinfomsg none = {.ifi_family = AF_UNSPEC};

  int ns = init_ns(q->pid, q->ticks, "ns/net", O_RDONLY);
  if (ns < 0) return task_error(why, len, errno, "the sandbox's network namespace", NULL);
  int host = rtnl_open();
  if (host < 0) return task_error(why, len, errno, "netlink", NULL);
  uint32_t bridge = if_nametoindex(q->bridge);
  if (bridge == 0) return task_error(why, len, errno, q->bridge, NULL);

  /* link add HOST master BRIDGE type veth peer name eth0 address MAC netns (the init's):
   * the inner end is born in the sandbox's namespace (moving one there costs ~8 times more). */
  rtnl_start(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &none, sizeof none);
  rtnl_put(&m, IFLA_MASTER, &bridge, sizeof bridge);
  rtnl_put_str(&m, IFLA_IFNAME, q->host);
  struct rtattr *info = rtnl_nest(&m, IFLA_LINKINFO);
  rtnl_put(&m, IFLA_INFO_KIND, "veth", 4);
  struct rtattr *data = rtnl_nest(&m, IFLA_INFO_DATA);
  struct rtattr *peer = rtnl_nest(&m, VETH_INFO_PEER);
  rtnl_raw(&m, &none, sizeof none);
  rtnl_put(&m, IFLA_ADDRESS, q->mac, sizeof q->mac);
  uint32_t nsfd = (uint32_t) ns;
  rtnl_put(&m, IFLA_NET_NS_FD, &nsfd, sizeof nsfd);
  rtnl_put_str(&m, IFLA_IFNAME, "eth0");
  rtnl_end(&m, peer);
  rtnl_end(&m, data);
  rtnl_end(&m, info);
  if ((e = rtnl_talk(host, &m, detail, sizeof detail))) return task_error(why, len, e, "creating the veth pair", detail);

  struct ifinfomsg end = {.ifi_family = AF_UNSPEC, .ifi_index = (int) if_nametoindex(q->host)};
  if (end.ifi_index == 0) return task_error(why, len, errno, q->host, NULL);
  /* link set dev HOST type bridge_slave isolated on: isolated ports reach the bridge (the
   * host) only, never each other. Before the link is up. */
  rtnl_start(&m, RTM_NEWLINK, 0, &end, sizeof end);
  info = rtnl_nest(&m, IFLA_LINKINFO);
  data = rtnl_nest(&m, IFLA_INFO_SLAVE_DATA);
  unsigned char on = 1;
  rtnl_put(&m, IFLA_BRPORT_ISOLATED, &on, 1);
  rtnl_end(&m, data);
  rtnl_end(&m, info);
  if ((e = rtnl_talk(host, &m, detail, sizeof detail))) return task_error(why, len, e, "isolating the bridge port", detail);

  /* link set HOST up */
  end.ifi_flags = end.ifi_change = IFF_UP;
  rtnl_start(&m, RTM_NEWLINK, 0, &end, sizeof end);
  if ((e = rtnl_talk(host, &m, detail, sizeof detail))) return task_error(why, len, e, "the host end up", detail);

  /* neigh replace IP lladdr MAC dev BRIDGE nud stale: whatever the host remembers of the address. */
  struct ndmsg nd = {.ndm_family = AF_INET, .ndm_ifindex = (int) bridge, .ndm_state = NUD_STALE};
  rtnl_start(&m, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof nd);
  rtnl_put(&m, NDA_DST, &q->ip, sizeof q->ip);
  rtnl_put(&m, NDA_LLADDR, q->mac, sizeof q->mac);
  if ((e = rtnl_talk(host, &m, detail, sizeof detail))) return task_error(why, len, e, "the host's neighbour entry", detail);
  close(host);

  /* Inside: this child joins the sandbox's network namespace (only this child: it ends next). */
  if (setns(ns, CLONE_NEWNET) != 0) return task_error(why, len, errno, "joining the sandbox's network namespace", NULL);
  close(ns);
  int inner = rtnl_open();
  if (inner < 0) return task_error(why, len, errno, "netlink in the sandbox", NULL);
  struct ifinfomsg eth0 = {.ifi_family = AF_UNSPEC, .ifi_index = (int) if_nametoindex("eth0")};
  struct ifinfomsg lo = {.ifi_family = AF_UNSPEC, .ifi_index = (int) if_nametoindex("lo")};
  if (eth0.ifi_index == 0 || lo.ifi_index == 0) return task_error(why, len, errno, "eth0 or lo in the sandbox", NULL);

  /* link set eth0 addrgenmode none: no IPv6 address at all, not even a link-local one
   * (before the link comes up). */
  rtnl_start(&m, RTM_NEWLINK, 0, &eth0, sizeof eth0);
  struct rtattr *spec = rtnl_nest(&m, IFLA_AF_SPEC);
  struct rtattr *inet6 = rtnl_nest(&m, AF_INET6);
  unsigned char mode = IN6_ADDR_GEN_MODE_NONE;
  rtnl_put(&m, IFLA_INET6_ADDR_GEN_MODE, &mode, 1);
  rtnl_end(&m, inet6);
  rtnl_end(&m, spec);
  if ((e = rtnl_talk(inner, &m, detail, sizeof detail))) return task_error(why, len, e, "eth0 addrgenmode none", detail);

  /* addr add IP/PREFIX dev eth0 */
  struct ifaddrmsg ifa = {
    .ifa_family = AF_INET, .ifa_prefixlen = q->prefix, .ifa_scope = RT_SCOPE_UNIVERSE, .ifa_index = (uint32_t) eth0.ifi_index
  };
  rtnl_start(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
  rtnl_put(&m, IFA_LOCAL, &q->ip, sizeof q->ip);
  rtnl_put(&m, IFA_ADDRESS, &q->ip, sizeof q->ip);
  if ((e = rtnl_talk(inner, &m, detail, sizeof detail))) return task_error(why, len, e, "eth0's address", detail);

  /* link set eth0 up, link set lo up */
  eth0.ifi_flags = eth0.ifi_change = IFF_UP;
  rtnl_start(&m, RTM_NEWLINK, 0, &eth0, sizeof eth0);
  if ((e = rtnl_talk(inner, &m, detail, sizeof detail))) return task_error(why, len, e, "eth0 up", detail);
  lo.ifi_flags = lo.ifi_change = IFF_UP;
  rtnl_start(&m, RTM_NEWLINK, 0, &lo, sizeof lo);
  if ((e = rtnl_talk(inner, &m, detail, sizeof detail))) return task_error(why, len, e, "lo up", detail);

  /* route add default via GATEWAY dev eth0 (egress only) */
  if (q->route) {
    struct rtmsg rt = {
      .rtm_family = AF_INET,
      .rtm_table = RT_TABLE_MAIN,
      .rtm_protocol = RTPROT_BOOT,
      .rtm_scope = RT_SCOPE_UNIVERSE,
      .rtm_type = RTN_UNICAST
    };
    rtnl_start(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
    rtnl_put(&m, RTA_GATEWAY, &q->gateway, sizeof q->gateway);
    uint32_t oif = (uint32_t) eth0.ifi_index;
    rtnl_put(&m, RTA_OIF, &oif, sizeof oif);
    if ((e = rtnl_talk(inner, &m, detail, sizeof detail))) return task_error(why, len, e, "the default route", detail);
  }
  return 0;
}

struct adopt_request {
  pid_t pid;
  unsigned long long ticks;
  char hostname[HOST_NAME_MAX + 1];
  unsigned long long shm;
};

/*
 * In the sandbox's UTS and mount namespaces and its root, as host root (not its user namespace:
 * as `nsenter -u -m -r` did): the hostname, then /dev/shm's size. Nothing of the sandbox runs:
 * no program of its own, and /dev/shm is resolved inside its root without following a symlink,
 * and must be a tmpfs mount's root.
 */
static int adopt_work(const void *arg, char *why, size_t len) {
  const struct adopt_request *q = arg;
  int uts = init_ns(q->pid, q->ticks, "ns/uts", O_RDONLY);
  int mnt = uts < 0 ? -1 : init_ns(q->pid, q->ticks, "ns/mnt", O_RDONLY);
  int root = mnt < 0 ? -1 : init_ns(q->pid, q->ticks, "root", O_PATH | O_DIRECTORY);
  if (root < 0) return task_error(why, len, errno, "the sandbox's namespaces", NULL);
  if (setns(uts, CLONE_NEWUTS) != 0) return task_error(why, len, errno, "joining the sandbox's UTS namespace", NULL);
  if (setns(mnt, CLONE_NEWNS) != 0) return task_error(why, len, errno, "joining the sandbox's mount namespace", NULL);
  if (fchdir(root) != 0 || chroot(".") != 0 || chdir("/") != 0) return task_error(why, len, errno, "the sandbox's root", NULL);
  if (sethostname(q->hostname, strlen(q->hostname)) != 0) return task_error(why, len, errno, "sethostname", NULL);

  struct open_how how = {
    .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
  };
  int shm = (int) syscall(SYS_openat2, AT_FDCWD, "/dev/shm", &how, sizeof how);
  if (shm < 0) return task_error(why, len, errno, "/dev/shm", NULL);
  struct statfs fs;
  if (fstatfs(shm, &fs) != 0) return task_error(why, len, errno, "/dev/shm", NULL);
  if (fs.f_type != TMPFS_MAGIC) return task_error(why, len, EINVAL, "/dev/shm", "not a tmpfs");
  /* Remounted where it was found ("." names that mount): what `mount -o
   * remount,nosuid,nodev,size=N` asked of the kernel (the mount's own flags, kept). */
  if (fchdir(shm) != 0) return task_error(why, len, errno, "/dev/shm", NULL);
  char data[64];
  snprintf(data, sizeof data, "size=%llu", q->shm);
  if (mount("tmpfs", ".", "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_SILENT | MS_RELATIME, data) != 0)
    return task_error(why, len, errno, "remounting /dev/shm", NULL);
  return 0;
}

struct unlink_request {
  char name[IF_NAMESIZE];
};

/* link del NAME, in the host's namespace (this process's, which the child never leaves). */
static int unlink_work(const void *arg, char *why, size_t len) {
  const struct unlink_request *q = arg;
  char detail[256];
  struct rtnl_msg m;
  struct ifinfomsg none = {.ifi_family = AF_UNSPEC};
  int host = rtnl_open();
  if (host < 0) return task_error(why, len, errno, "rtnetlink", NULL);
  rtnl_start(&m, RTM_DELLINK, 0, &none, sizeof none);
  rtnl_put_str(&m, IFLA_IFNAME, q->name);
  int e = rtnl_talk(host, &m, detail, sizeof detail);
  /* Gone already (the kernel removes a veth with its peer's namespace): what was asked. */
  if (e == ENODEV) return 0;
  if (e) return task_error(why, len, e, "removing the link", detail);
  return 0;
}

static int parse_mac(const char *text, unsigned char mac[6]) {
  unsigned int b[6];
  char end;
  if (sscanf(text, "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &end) != 6) return -1;
  for (int i = 0; i < 6; i++) mac[i] = (unsigned char) b[i];
  return 0;
}

/* A request's field that does not fit is a bug of the agent's: an E, never a task. */
static void refuse(uint32_t id, const char *what) {
  char line[160];
  int n = snprintf(line, sizeof line, "E %u %d %s\n", id, EINVAL, what);
  answer(line, (size_t) n);
}

static void veth(struct reader *r) {
  uint32_t id = u32(r);
  struct veth_request q = {.pid = (pid_t) u32(r)};
  char *ticks = str(r, NULL), *bridge = str(r, NULL), *host = str(r, NULL), *mac = str(r, NULL);
  char *ip = str(r, NULL);
  uint32_t prefix = u32(r);
  char *gateway = str(r, NULL);
  q.ticks = strtoull(ticks, NULL, 10);
  q.route = gateway[0] != 0;
  q.prefix = (unsigned char) prefix;
  if (strlen(bridge) >= IF_NAMESIZE || strlen(host) >= IF_NAMESIZE) refuse(id, "an interface name is too long");
  else if (parse_mac(mac, q.mac) != 0) refuse(id, "a MAC address as 02:53:0a:d5:00:02");
  else if (inet_pton(AF_INET, ip, &q.ip) != 1 || (q.route && inet_pton(AF_INET, gateway, &q.gateway) != 1))
    refuse(id, "an IPv4 address");
  else if (prefix > 32) refuse(id, "a prefix length");
  else {
    strcpy(q.bridge, bridge);
    strcpy(q.host, host);
    task(id, veth_work, &q, NULL, 0);
  }
  free(ticks);
  free(bridge);
  free(host);
  free(mac);
  free(ip);
  free(gateway);
}

static void adopt(struct reader *r) {
  uint32_t id = u32(r);
  struct adopt_request q = {.pid = (pid_t) u32(r)};
  char *ticks = str(r, NULL), *hostname = str(r, NULL), *shm = str(r, NULL);
  q.ticks = strtoull(ticks, NULL, 10);
  q.shm = strtoull(shm, NULL, 10);
  if (strlen(hostname) == 0 || strlen(hostname) > HOST_NAME_MAX) refuse(id, "a hostname of 1 to 64 bytes");
  else if (q.shm == 0) refuse(id, "a size for /dev/shm");
  else {
    strcpy(q.hostname, hostname);
    task(id, adopt_work, &q, NULL, 0);
  }
  free(ticks);
  free(hostname);
  free(shm);
}

static void unlink_link(struct reader *r) {
  uint32_t id = u32(r);
  struct unlink_request q;
  char *name = str(r, NULL);
  if (strlen(name) == 0 || strlen(name) >= IF_NAMESIZE) refuse(id, "an interface name of 1 to 15 bytes");
  else {
    strcpy(q.name, name);
    task(id, unlink_work, &q, NULL, 0);
  }
  free(name);
}

struct splice_request {
  unsigned idle_ms;
};

/* Waits until fd is ready for `events` (or hung up), at most idle_ms (0: no bound): 0, or ETIMEDOUT. */
static int await_fd(int fd, short events, unsigned idle_ms) {
  struct pollfd p = {fd, events, 0};
  for (;;) {
    int n = poll(&p, 1, idle_ms ? (int) idle_ms : -1);
    if (n > 0) return 0;
    if (n == 0) return ETIMEDOUT;
    if (errno != EINTR) return errno;
  }
}

/* Child side of 'P': descriptors 4 (from) and 5 (to). The kernel moves the bytes (splice: one of
 * the two is a pipe), at most 1 MiB per call; nonblocking on both sides, so a stalled side is
 * waited for with poll, where the idle bound is kept. */
static int splice_work(const void *arg, char *why, size_t len) {
  const struct splice_request *q = arg;
  /* A pipe of 1 MiB (the unprivileged maximum): fewer wake-ups of the command and of this child. */
  if (fcntl(4, F_SETPIPE_SZ, 1 << 20) < 0) (void) fcntl(5, F_SETPIPE_SZ, 1 << 20);
  /* Nothing of this child needs root any more: the descriptors are open. */
  if (geteuid() == 0) {
    if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
      return task_error(why, len, errno, "dropping privileges", NULL);
  }
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  unsigned long long moved = 0;
  for (;;) {
    ssize_t n = splice(4, NULL, 5, NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      moved += (unsigned long long) n;
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      int e = errno;
      char detail[96];
      snprintf(detail, sizeof detail, "%s after %llu bytes", strerror(e), moved);
      return task_error(why, len, e, "splice", detail);
    }
    /* Either side may be the one not ready: the source first, then the destination. */
    int e = await_fd(4, POLLIN, q->idle_ms);
    if (e == 0) e = await_fd(5, POLLOUT, q->idle_ms);
    if (e != 0) {
      char detail[96];
      snprintf(detail, sizeof detail, "nothing moved for %u ms after %llu bytes", q->idle_ms, moved);
      return task_error(why, len, e, "splice", e == ETIMEDOUT ? detail : NULL);
    }
  }
  snprintf(why, len, "%llu", moved);
  return 0;
}

static void splice_fds(struct reader *r) {
  uint32_t id = u32(r), from = u32(r), to = u32(r);
  struct splice_request q = {.idle_ms = u32(r)};
  if (agent_pidfd < 0) {
    refuse(id, "no pidfd of the agent");
    return;
  }
  int fds[2];
  fds[0] = (int) syscall(SYS_pidfd_getfd, agent_pidfd, (int) from, 0);
  fds[1] = fds[0] < 0 ? -1 : (int) syscall(SYS_pidfd_getfd, agent_pidfd, (int) to, 0);
  if (fds[0] < 0 || fds[1] < 0) {
    int e = errno;
    char line[200];
    int n = snprintf(line, sizeof line, "E %u %d the agent's descriptor %u: %s\n", id, e, fds[0] < 0 ? from : to, strerror(e));
    answer(line, (size_t) n);
  } else {
    task(id, splice_work, &q, fds, 2);
  }
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
}

static void request(const unsigned char *body, size_t len) {
  struct reader r = {body + 1, body + len};
  if (len < 1) die("empty request");
  switch (body[0]) {
    case 'S':
      spawn(&r);
      break;
    case 'N':
      veth(&r);
      break;
    case 'A':
      adopt(&r);
      break;
    case 'L':
      unlink_link(&r);
      break;
    case 'P':
      splice_fds(&r);
      break;
    case 'O': {
      struct child *c = find(u32(&r));
      if (c == NULL) break;
      for (int i = 0; i < c->nheld; i++) close(c->held[i]);
      c->nheld = 0;
      if (c->reaped) forget(c);
      break;
    }
    case 'K': {
      uint32_t id = u32(&r), sig = u32(&r), group = u32(&r);
      struct child *c = find(id);
      if (c != NULL && !c->reaped && sig < 65) kill(group ? -c->pid : c->pid, (int) sig);
      break;
    }
    default:
      die("unknown request");
  }
}

static void reap(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (size_t i = 0; i < nchildren; i++) {
      if (children[i].pid != pid || children[i].reaped) continue;
      if (children[i].task >= 0) {
        task_done(&children[i], status);
        forget(&children[i]);
        break;
      }
      char line[64];
      int n = snprintf(line, sizeof line, "X %u %d\n", children[i].id, status);
      answer(line, (size_t) n);
      children[i].reaped = 1;
      if (children[i].nheld == 0) forget(&children[i]);
      break;
    }
  }
}

int main(void) {
  self = getpid();
  agent_pidfd = (int) syscall(SYS_pidfd_open, getppid(), 0);
  if (agent_pidfd >= 0) fcntl(agent_pidfd, F_SETFD, FD_CLOEXEC);
  /* Its descriptors hold the agent's pipe ends: only root may open them through /proc. */
  prctl(PR_SET_DUMPABLE, 0);
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  fcntl(0, F_SETFD, FD_CLOEXEC);
  fcntl(1, F_SETFD, FD_CLOEXEC);
  fcntl(2, F_SETFD, FD_CLOEXEC);

  unsigned char *buf = malloc(MAX_REQUEST + 4);
  size_t have = 0;
  if (buf == NULL) die("out of memory");
  for (;;) {
    struct pollfd fds[2] = {{0, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (fds[1].revents) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof info) > 0) {}
      reap();
    }
    if (fds[0].revents) {
      ssize_t got = read(0, buf + have, MAX_REQUEST + 4 - have);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) _exit(0); /* the agent is gone */
      have += (size_t) got;
      while (have >= 4) {
        uint32_t len = (uint32_t) buf[0] | (uint32_t) buf[1] << 8 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 24;
        if (len > MAX_REQUEST) die("request too long");
        if (have < 4 + (size_t) len) break;
        request(buf + 4, len);
        memmove(buf, buf + 4 + len, have - 4 - len);
        have -= 4 + (size_t) len;
      }
      /* A request may have started a child that ended at once: reap before the next poll. */
      reap();
    }
  }
}
