/*
 * svc-start: the host side of a sandbox's start, run as host root by the driver (Run.ts), that
 * ends by becoming the sandbox's host-side bubblewrap (exec: the pid the driver spawned is the
 * bubblewrap it records as the run's monitor).
 *
 *   svc-start [--cgroup PROCS_FILE]... [--image FILE --image-mount DIR] --lower DIR --upper DIR
 *             --work DIR --root DIR --seccomp FILE --uid UID -- BWRAP ARGS...
 *
 * In order, in this one process:
 *   1. a private mount namespace of its own (unshare, / made private recursively): what is
 *      mounted below is seen by this sandbox only, and goes when its last process ends;
 *   2. into each of the sandbox's cgroups (`cgroup-join.h`; everything after is charged to it);
 *   3. the disk image through a loop device at DIR (`loop-mount.h`; autoclear: detached with
 *      the namespace), when the sandbox has one;
 *   4. the overlay (lower: the template, upper and work: on the image) at --root;
 *   5. the seccomp filter opened on fd 6, where bubblewrap's `--seccomp 6` reads it;
 *   6. no supplementary groups, gid and uid the sandboxes' unprivileged host uid (real,
 *      effective and saved: the kernel clears every capability): nothing of the sandbox ever
 *      runs as host root;
 *   7. exec bubblewrap, which keeps fds 3 (info), 4 (ready), 5 (args), 6 (seccomp), 7 (user
 *      namespace go-ahead) and 8 (json status) as the driver gave them.
 *
 * Why a native step: it replaces `unshare` + `sh` + `mount(8)` + `svc-disk-mount` + `setpriv`,
 * three execs and two forks on every create and start (about 5 ms here), with one exec.
 *
 * Exit codes of its own, one per step, so that the driver's message says which failed (the
 * reason is on stderr, the sandbox's log): 120 usage or the mount namespace, 121 the sandbox's
 * uid, 122 the disk image, 123 the seccomp filter, 124 the overlay, 125 a cgroup, 126
 * bubblewrap could not be run, 127 bubblewrap not found.
 */
#include "cgroup-join.h"
#include "loop-mount.h"

#include <grp.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/types.h>

#define MAX_CGROUPS 16

static void fail(int code, const char *what, const char *detail) {
  fprintf(stderr, "svc-start: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "", strerror(errno));
  exit(code);
}

static void failx(int code, const char *what) {
  fprintf(stderr, "svc-start: %s\n", what);
  exit(code);
}

int main(int argc, char **argv) {
  const char *cgroups[MAX_CGROUPS];
  int ncgroups = 0, i;
  const char *image = NULL, *image_mount = NULL, *lower = NULL, *upper = NULL, *work = NULL, *root = NULL;
  const char *seccomp = NULL, *uid_text = NULL;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) { i++; break; }
    if (i + 1 >= argc) failx(120, "missing option value");
    const char *v = argv[++i];
    if (strcmp(a, "--cgroup") == 0) {
      if (ncgroups == MAX_CGROUPS) failx(120, "too many cgroups");
      cgroups[ncgroups++] = v;
    } else if (strcmp(a, "--image") == 0) image = v;
    else if (strcmp(a, "--image-mount") == 0) image_mount = v;
    else if (strcmp(a, "--lower") == 0) lower = v;
    else if (strcmp(a, "--upper") == 0) upper = v;
    else if (strcmp(a, "--work") == 0) work = v;
    else if (strcmp(a, "--root") == 0) root = v;
    else if (strcmp(a, "--seccomp") == 0) seccomp = v;
    else if (strcmp(a, "--uid") == 0) uid_text = v;
    else failx(120, "unknown option");
  }
  if (lower == NULL || upper == NULL || work == NULL || root == NULL || seccomp == NULL || uid_text == NULL || i >= argc ||
      (image == NULL) != (image_mount == NULL)) {
    failx(120, "usage");
  }
  char *end;
  errno = 0;
  unsigned long uid = strtoul(uid_text, &end, 10);
  /* Never root: the whole point is that nothing of the sandbox runs as host uid 0. */
  if (errno != 0 || *end != 0 || uid == 0 || uid > 0x7fffffffUL) failx(120, "bad --uid");
  char **program = argv + i;

  if (unshare(CLONE_NEWNS) != 0) fail(120, "unshare", "(mount namespace)");
  if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail(120, "making / private", NULL);

  for (int c = 0; c < ncgroups; c++) {
    if (cgroup_join(cgroups[c]) != 0) fail(125, "joining the cgroup of", cgroups[c]);
  }

  if (image != NULL && loop_mount("svc-start", image, image_mount) != 0) exit(122);

  /* overlayfs parses its options at ',' and ':': the driver refuses a data dir with either. */
  static char options[4096];
  int len = snprintf(options, sizeof options, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
  if (len < 0 || (size_t) len >= sizeof options) failx(124, "overlay options too long");
  if (mount("overlay", root, "overlay", 0, options) != 0) fail(124, "mounting the overlay on", root);

  int filter = open(seccomp, O_RDONLY);
  if (filter < 0) fail(123, "open", seccomp);
  if (filter != 6) {
    if (dup2(filter, 6) != 6) fail(123, "dup2", seccomp);
    close(filter);
  }

  if (setgroups(0, NULL) != 0) fail(121, "setgroups", NULL);
  if (setresgid((gid_t) uid, (gid_t) uid, (gid_t) uid) != 0) fail(121, "setresgid", uid_text);
  if (setresuid((uid_t) uid, (uid_t) uid, (uid_t) uid) != 0) fail(121, "setresuid", uid_text);

  execv(program[0], program);
  int err = errno;
  fprintf(stderr, "svc-start: %s: %s\n", program[0], strerror(err));
  return err == ENOENT ? 127 : 126;
}
