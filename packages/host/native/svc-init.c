/*
 * svc-init: a sandbox's pid 1 (bubblewrap `--as-pid-1` execs it, from the helper folder bound
 * read-only at /dev/.svc; built static: a template may have no libc).
 *
 *   svc-init        (fd 4: the start's "ready" pipe; 0, 1, 2 and the rest as bubblewrap left them)
 *
 * In order:
 *   1. not dumpable (PR_SET_DUMPABLE 0). Its memory image was made by an exec inside the
 *      sandbox's user namespace, so only CAP_SYS_PTRACE there would pass the kernel's check
 *      (ptrace_may_access), and no process of a sandbox ever holds it (`Confinement.ts`): root
 *      inside cannot ptrace its init, open /proc/1/mem, read /proc/1/fd links or environ, and so
 *      cannot make it write, leak or hold anything. (bubblewrap's own reaper makes itself
 *      dumpable again, hence a pid 1 of our own.) Nothing of the sandbox runs before step 3;
 *   2. its stdio on /dev/null and every other descriptor closed: it holds nothing of the host
 *      (the start's output pipe, bubblewrap's options, the filter);
 *   3. "ready" on fd 4 (written before the close), then reaps whatever is reparented to it, for
 *      ever. SIGTERM, SIGUSR1 and SIGUSR2 (busybox's reboot, halt and poweroff) end it, with
 *      128 + the signal: root inside may stop its own sandbox, as in a VM. Other signals from
 *      inside are dropped by the kernel (no handler: SIGKILL cannot be sent to it from inside);
 *      SIGKILL from the host ends the sandbox.
 *
 * Exit codes: 1 a step failed (there is no one to tell: the start times out or sees the exit).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void nothing(int signal) {
  (void) signal;
}

int main(void) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return 1;
  /* Blocked and taken by sigwaitinfo below; the stop signals need a handler, or the kernel drops
   * them for a namespace's init before they are queued. */
  sigset_t children;
  sigemptyset(&children);
  sigaddset(&children, SIGCHLD);
  static const int stops[] = {SIGTERM, SIGUSR1, SIGUSR2};
  struct sigaction action = {0};
  action.sa_handler = nothing;
  for (unsigned s = 0; s < sizeof stops / sizeof stops[0]; s++) {
    sigaddset(&children, stops[s]);
    if (sigaction(stops[s], &action, NULL) != 0) return 1;
  }
  if (sigprocmask(SIG_BLOCK, &children, NULL) != 0) return 1;
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return 1;
  for (int fd = 0; fd < 3; fd++) {
    if (dup2(null, fd) != fd) return 1;
  }
  if (write(4, "ready\n", 6) != 6) return 1;
  /* close_range(3, ~0U, 0): every descriptor bubblewrap left open, the ready pipe with them. */
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
  }
  for (;;) {
    siginfo_t info;
    int got = sigwaitinfo(&children, &info);
    if (got < 0 && errno != EINTR) pause();
    if (got > 0 && got != SIGCHLD) return 128 + got;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
  }
}
