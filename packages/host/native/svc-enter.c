/*
 * svc-enter: runs one command inside a running sandbox, as the sandbox's root and with exactly
 * the restrictions of the sandbox's own init (capability set, no_new_privs, seccomp filter).
 *
 *   svc-enter --pid PID --start-ticks N --caps HEX --seccomp FILE --env-fd FD --cwd DIR
 *             [--cgroup PROCS_FILE]... [--report-fd FD] [--pty COLS,ROWS --control-fd FD]
 *             [--nofile N] -- ARGV...
 *
 * `--nofile`: RLIMIT_NOFILE (soft and hard) of the command, the sandbox init's own (svc-start):
 * set while this process is still host root, so the command cannot raise it.
 *
 * `--report-fd`: the command writes its pid (as the sandbox sees it) and a newline there just
 * before it starts (background processes are named by it).
 * `--pty`: the command runs on a new terminal of the sandbox's own devpts, as its controlling
 * terminal; this process relays between the terminal and its own stdin/stdout (Node has no pty
 * API) and sets the terminal's size from `COLS ROWS\n` lines on the control descriptor. Bytes
 * are copied, never parsed.
 * Either way, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to this process are
 * passed on to the command (how the agent signals a background process).
 *
 * Why a native helper: entering is a sequence of steps that must happen in one single-threaded
 * process, in order, before the command runs (setns into a user namespace, dropping capabilities,
 * loading seccomp). util-linux's nsenter cannot load a seccomp filter and passes the environment
 * on its command line, where every local user can read it in `ps`. Here the environment comes
 * on a file descriptor and never appears in any process's argv.
 *
 * The sandbox is entered through a pidfd of its init, checked against the init's start time
 * after the pidfd is open: a pid reused between the agent's check and this call is refused
 * (a pidfd pins its process, so the namespaces joined are those of the checked process).
 *
 * Exit codes of its own: 124 the sandbox is not running (init gone or replaced), 125 a host
 * step failed, 126 the working directory or the command could not be used, 127 command not found.
 */
#define _GNU_SOURCE
#include "cgroup-join.h"
#include "start-ticks.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

#define MAX_CGROUPS 16
#define MAX_ENV_BYTES (1024 * 1024)
#define MAX_FILTER_BYTES (4096 * 8)

static void fail(int code, const char *what) {
  fprintf(stderr, "svc-enter: %s: %s\n", what, strerror(errno));
  exit(code);
}

static void failx(int code, const char *what) {
  fprintf(stderr, "svc-enter: %s\n", what);
  exit(code);
}

static ssize_t read_all(int fd, char *buf, size_t max) {
  size_t got = 0;
  for (;;) {
    if (got == max) {
      char extra;
      ssize_t n = read(fd, &extra, 1);
      if (n > 0) { errno = EFBIG; return -1; }
      if (n == 0) return (ssize_t) got;
      if (errno == EINTR) continue;
      return -1;
    }
    ssize_t n = read(fd, buf + got, max - got);
    if (n == 0) return (ssize_t) got;
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t) n;
  }
}

/* The command, for the signal handlers of the waiting parent. */
static volatile pid_t command_pid = 0;
static int sigchld_pipe[2] = {-1, -1};

static void forward_signal(int sig) {
  if (command_pid > 0) kill(command_pid, sig);
}

static void on_sigchld(int sig) {
  (void) sig;
  int saved = errno;
  if (sigchld_pipe[1] >= 0) (void) !write(sigchld_pipe[1], "x", 1);
  errno = saved;
}

static void install(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  /* No SA_RESTART: waitpid and poll return EINTR and loop. */
  sigaction(sig, &sa, NULL);
}

static int write_full(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, -1);
        continue;
      }
      return -1;
    }
    buf += n;
    len -= (size_t) n;
  }
  return 0;
}

/* Copies what the master has now to fd 1; -1 once it has nothing more to give (EIO: no slave). */
static int drain_master(int master) {
  char buf[16384];
  for (;;) {
    ssize_t n = read(master, buf, sizeof buf);
    if (n > 0) {
      if (write_full(1, buf, (size_t) n) != 0) return -1;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 0;
    return -1;
  }
}

/*
 * The terminal's relay, until the command has exited and its output is copied: stdin to the
 * master, the master to stdout, `COLS ROWS` lines from the control descriptor to TIOCSWINSZ.
 * Stdin ending (the agent closed the terminal) closes the master: the kernel hangs up the
 * terminal's session.
 */
static int relay(int master, int control, pid_t child) {
  int status = 0, exited = 0, in_open = 1;
  char cbuf[256];
  size_t clen = 0;
  fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
  for (;;) {
    if (!exited) {
      pid_t w = waitpid(child, &status, WNOHANG);
      if (w == child) exited = 1;
    }
    if (exited) {
      /* What the command wrote before it ended is still in the master: copy it, then stop. */
      if (master >= 0) drain_master(master);
      return status;
    }
    struct pollfd fds[4];
    int n = 0, i_in = -1, i_master = -1, i_control = -1, i_chld;
    if (in_open) { i_in = n; fds[n++] = (struct pollfd){0, POLLIN, 0}; }
    if (master >= 0) { i_master = n; fds[n++] = (struct pollfd){master, POLLIN, 0}; }
    if (control >= 0) { i_control = n; fds[n++] = (struct pollfd){control, POLLIN, 0}; }
    i_chld = n;
    fds[n++] = (struct pollfd){sigchld_pipe[0], POLLIN, 0};
    if (poll(fds, (nfds_t) n, -1) < 0) {
      if (errno == EINTR) continue;
      return status;
    }
    if (fds[i_chld].revents & POLLIN) {
      char x[64];
      (void) !read(sigchld_pipe[0], x, sizeof x);
    }
    if (i_master >= 0 && fds[i_master].revents) {
      if (drain_master(master) != 0) {
        /* No slave open any more: nothing more will come; wait for the command. */
        close(master);
        master = -1;
      }
    }
    if (i_in >= 0 && fds[i_in].revents) {
      char buf[16384];
      ssize_t r = read(0, buf, sizeof buf);
      if (r > 0) {
        if (master >= 0) write_full(master, buf, (size_t) r);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        in_open = 0;
        if (master >= 0) {
          close(master);
          master = -1;
        }
        kill(child, SIGHUP);
      }
    }
    if (i_control >= 0 && fds[i_control].revents) {
      ssize_t r = read(control, cbuf + clen, sizeof cbuf - 1 - clen);
      if (r <= 0 && !(r < 0 && errno == EINTR)) {
        close(control);
        control = -1;
      } else if (r > 0) {
        clen += (size_t) r;
        char *nl;
        while ((nl = memchr(cbuf, '\n', clen)) != NULL) {
          *nl = 0;
          unsigned cols = 0, rows = 0;
          if (sscanf(cbuf, "%u %u", &cols, &rows) == 2 && cols > 0 && rows > 0 && cols <= 1000 && rows <= 1000 &&
              master >= 0) {
            struct winsize ws = {(unsigned short) rows, (unsigned short) cols, 0, 0};
            ioctl(master, TIOCSWINSZ, &ws);
          }
          size_t used = (size_t) (nl - cbuf) + 1;
          memmove(cbuf, nl + 1, clen - used);
          clen -= used;
        }
        if (clen == sizeof cbuf - 1) clen = 0;
      }
    }
  }
}

static void write_pid(const char *file) {
  if (cgroup_join(file) != 0) fail(125, file);
}

static void join_namespaces(int pidfd, pid_t pid) {
  int all = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  if (setns(pidfd, all) == 0) return;
  if (errno != EINVAL) fail(125, "setns");
  /* Kernels before 5.8 take namespace files only; the pidfd still pins the pid, so
   * the files in /proc/PID/ns are those of the checked process. The user namespace comes first. */
  static const struct { const char *name; int type; } order[] = {
    {"user", CLONE_NEWUSER}, {"ipc", CLONE_NEWIPC}, {"uts", CLONE_NEWUTS}, {"net", CLONE_NEWNET},
    {"pid", CLONE_NEWPID}, {"cgroup", CLONE_NEWCGROUP}, {"mnt", CLONE_NEWNS},
  };
  int fds[7];
  for (int i = 0; i < 7; i++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/%s", (int) pid, order[i].name);
    fds[i] = open(path, O_RDONLY | O_CLOEXEC);
    if (fds[i] < 0) fail(124, path);
  }
  for (int i = 0; i < 7; i++) {
    if (setns(fds[i], order[i].type) != 0) fail(125, order[i].name);
    close(fds[i]);
  }
}

static void drop_capabilities(unsigned long long keep) {
  for (int cap = 0; cap < 64; cap++) {
    if (keep & (1ULL << cap)) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail(125, "PR_CAPBSET_DROP");
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) fail(125, "ambient");
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  data[0].effective = data[0].permitted = data[0].inheritable = (unsigned int) (keep & 0xffffffffULL);
  data[1].effective = data[1].permitted = data[1].inheritable = (unsigned int) (keep >> 32);
  if (syscall(SYS_capset, &header, data) != 0) fail(125, "capset");
}

int main(int argc, char **argv) {
  pid_t pid = 0;
  unsigned long long ticks = 0, caps = 0;
  const char *seccomp_file = NULL, *cwd = "/";
  const char *cgroups[MAX_CGROUPS];
  int ncgroups = 0, env_fd = -1, report_fd = -1, control_fd = -1, i;
  unsigned pty_cols = 0, pty_rows = 0;
  unsigned long nofile = 0;
  unsigned run_uid = 0, run_gid = 0;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) { i++; break; }
    if (i + 1 >= argc) failx(125, "missing option value");
    const char *v = argv[++i];
    if (strcmp(a, "--pid") == 0) pid = (pid_t) strtol(v, NULL, 10);
    else if (strcmp(a, "--start-ticks") == 0) ticks = strtoull(v, NULL, 10);
    else if (strcmp(a, "--caps") == 0) caps = strtoull(v, NULL, 16);
    else if (strcmp(a, "--seccomp") == 0) seccomp_file = v;
    else if (strcmp(a, "--env-fd") == 0) env_fd = (int) strtol(v, NULL, 10);
    else if (strcmp(a, "--cwd") == 0) cwd = v;
    else if (strcmp(a, "--user") == 0) {
      /* A user inside the sandbox (an image's USER), numeric: uid:gid, both within 0..65535. */
      char tail;
      if (sscanf(v, "%u:%u%c", &run_uid, &run_gid, &tail) != 2 || run_uid > 65535 || run_gid > 65535)
        failx(125, "bad --user");
    }
    else if (strcmp(a, "--report-fd") == 0) report_fd = (int) strtol(v, NULL, 10);
    else if (strcmp(a, "--control-fd") == 0) control_fd = (int) strtol(v, NULL, 10);
    else if (strcmp(a, "--nofile") == 0) {
      char *end;
      nofile = strtoul(v, &end, 10);
      if (*end != 0 || nofile < 64) failx(125, "bad --nofile");
    }
    else if (strcmp(a, "--pty") == 0) {
      if (sscanf(v, "%u,%u", &pty_cols, &pty_rows) != 2 || pty_cols == 0 || pty_rows == 0 || pty_cols > 1000 ||
          pty_rows > 1000) failx(125, "bad --pty size");
    }
    else if (strcmp(a, "--cgroup") == 0) {
      if (ncgroups == MAX_CGROUPS) failx(125, "too many cgroups");
      cgroups[ncgroups++] = v;
    } else failx(125, "unknown option");
  }
  if (pid <= 1 || ticks == 0 || seccomp_file == NULL || env_fd < 0 || i >= argc) failx(125, "usage");
  char **command = argv + i;

  /* Nothing may attach to this process while it still holds host or full namespace powers. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(125, "PR_SET_DUMPABLE");

  for (int c = 0; c < ncgroups; c++) write_pid(cgroups[c]);

  if (nofile != 0) {
    struct rlimit limit = {nofile, nofile};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) fail(125, "setrlimit RLIMIT_NOFILE");
  }

  /* Everything read from the host is read before entering. */
  static char filter_bytes[MAX_FILTER_BYTES];
  int ffd = open(seccomp_file, O_RDONLY | O_CLOEXEC);
  if (ffd < 0) fail(125, seccomp_file);
  ssize_t flen = read_all(ffd, filter_bytes, sizeof filter_bytes);
  close(ffd);
  if (flen <= 0 || flen % sizeof(struct sock_filter) != 0) failx(125, "bad seccomp filter");

  char *env = malloc(MAX_ENV_BYTES + 1);
  if (env == NULL) fail(125, "malloc");
  ssize_t elen = read_all(env_fd, env, MAX_ENV_BYTES);
  if (elen < 0) fail(125, "environment");
  close(env_fd);
  env[elen] = 0;
  size_t nenv = 0;
  for (ssize_t k = 0; k < elen; k++) if (env[k] == 0) nenv++;
  char **envp = calloc(nenv + 2, sizeof(char *));
  if (envp == NULL) fail(125, "calloc");
  size_t e = 0;
  for (ssize_t k = 0; k < elen; k += (ssize_t) strlen(env + k) + 1) {
    if (strchr(env + k, '=') == NULL) failx(125, "bad environment entry");
    envp[e++] = env + k;
  }
  envp[e] = NULL;

  int pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    if (errno == ESRCH) failx(124, "sandbox not running");
    fail(125, "pidfd_open");
  }
  if (start_ticks(pid) != ticks) failx(124, "sandbox not running");

  char root_path[64];
  snprintf(root_path, sizeof root_path, "/proc/%d/root", (int) pid);
  int root_fd = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) fail(124, "sandbox root");

  join_namespaces(pidfd, pid);
  if (fchdir(root_fd) != 0 || chroot(".") != 0 || chdir("/") != 0) fail(125, "entering the root");
  close(root_fd);
  close(pidfd);

  /* The terminal comes from the sandbox's own devpts (its /dev/ptmx, now that its root is ours). */
  int master = -1;
  char slave_name[128];
  if (pty_cols > 0) {
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) fail(125, "posix_openpt");
    if (unlockpt(master) != 0) fail(125, "unlockpt");
    if (ptsname_r(master, slave_name, sizeof slave_name) != 0) fail(125, "ptsname");
    struct winsize ws = {(unsigned short) pty_rows, (unsigned short) pty_cols, 0, 0};
    if (ioctl(master, TIOCSWINSZ, &ws) != 0) fail(125, "TIOCSWINSZ");
    if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK) != 0) fail(125, "pipe");
    install(SIGCHLD, on_sigchld);
  }

  /* The pid namespace applies to children: the command runs in one, this process waits. */
  pid_t child = fork();
  if (child < 0) fail(125, "fork");
  if (child > 0) {
    command_pid = child;
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++) install(forwarded[k], forward_signal);
    if (report_fd >= 0) close(report_fd);
    int status = 0;
    if (master >= 0) {
      /* A write to a relay that is gone must not kill this process before it reports. */
      signal(SIGPIPE, SIG_IGN);
      status = relay(master, control_fd, child);
      close(0);
      close(1);
      close(2);
      while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) break;
      }
    } else {
      close(0);
      close(1);
      close(2);
      while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) _exit(125);
      }
    }
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    kill(getpid(), sig);
    _exit(128 + sig);
  }

  /* A session of its own: no controlling terminal of the agent to inject input into. */
  if (setsid() < 0) fail(125, "setsid");
  if (master >= 0) {
    /* The sandbox's terminal becomes this session's controlling terminal and its stdio. */
    close(master);
    int slave = open(slave_name, O_RDWR);
    if (slave < 0) fail(125, "opening the terminal");
    if (ioctl(slave, TIOCSCTTY, 0) != 0) fail(125, "TIOCSCTTY");
    if (dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) fail(125, "dup2");
    if (slave > 2) close(slave);
  }
  if (control_fd >= 0) close(control_fd);
  if (setgroups(0, NULL) != 0) fail(125, "setgroups");
  if (setresgid(run_gid, run_gid, run_gid) != 0) fail(125, "setresgid");
  if (run_uid == 0) {
    if (setresuid(0, 0, 0) != 0) fail(125, "setresuid");
    drop_capabilities(caps);
  } else {
    /* Bounded first, while it may; leaving uid 0 then clears every capability it still held. */
    drop_capabilities(caps);
    if (setresuid(run_uid, run_uid, run_uid) != 0) fail(125, "setresuid");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(125, "PR_SET_NO_NEW_PRIVS");
  struct sock_fprog prog = {(unsigned short) (flen / sizeof(struct sock_filter)), (struct sock_filter *) filter_bytes};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) fail(125, "seccomp");

  if (clearenv() != 0) fail(125, "clearenv");
  for (size_t k = 0; envp[k] != NULL; k++) putenv(envp[k]);
  if (chdir(cwd) != 0) {
    fprintf(stderr, "cannot cd to %s: %s\n", cwd, strerror(errno));
    _exit(126);
  }
  if (report_fd >= 0) {
    char line[32];
    int len = snprintf(line, sizeof line, "%d\n", (int) getpid());
    (void) !write(report_fd, line, (size_t) len);
  }
  syscall(SYS_close_range, 3, ~0U, 0);
  execvp(command[0], command);
  int err = errno;
  fprintf(stderr, "%s: %s\n", command[0], strerror(err));
  _exit(err == ENOENT ? 127 : 126);
}
