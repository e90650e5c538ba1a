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
 *   'S' id flags netns-pid file argc argv... envc env... nfds {kind u8, arg string}...
 *       starts file with argv and exactly env, in a session of its own; its descriptor i is
 *       kind i: 'n' nothing (0-2: /dev/null), 'i' a pipe it reads (the agent writes),
 *       'o' a pipe it writes (the agent reads), 'd' a pipe holding arg's bytes then end of
 *       file, 'a' arg opened to append (created 0600), 't' arg opened and truncated (created
 *       0600), 's' the same open file as its descriptor number arg. flags: 1 = outlive this
 *       spawner (a sandbox's bubblewrap); otherwise it is killed (SIGKILL) if this process
 *       dies. netns-pid: joins that process's network namespace first (0: stays).
 *   'O' id        the agent opened its ends (/proc/<this pid>/fd/N): this process closes them.
 *   'K' id signal group   signals the command (or its process group), if not reaped yet: a
 *       pid this process has not reaped cannot have been reused.
 * Answers (fd 1), one line each:
 *   S id pid fd0 fd1 ...  started; fdN is this process's descriptor of the agent's end, or -1
 *   E id errno message    could not start (nothing runs)
 *   X id status           ended, with its wait status
 * An unreadable request ends this process (the agent restarts it). End of file on fd 0 ends it
 * too: the commands started with flag 1 go on, the others are killed by the kernel.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
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
};

static struct child *children = NULL;
static size_t nchildren = 0, capchildren = 0;
static pid_t self;

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
  *c = children[--nchildren];
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
  uint32_t id = u32(r), flags = u32(r), netns = u32(r);
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
    if (netns != 0) {
      char path[64];
      snprintf(path, sizeof path, "/proc/%u/ns/net", netns);
      int ns = open(path, O_RDONLY | O_CLOEXEC);
      if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) child_fail(status[1], "the network namespace");
      close(ns);
    }
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

static void request(const unsigned char *body, size_t len) {
  struct reader r = {body + 1, body + len};
  if (len < 1) die("empty request");
  switch (body[0]) {
    case 'S':
      spawn(&r);
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
