/*
 * svc-start: the host side of a sandbox's start, run as host root by the driver (Run.ts), that
 * ends by becoming the sandbox's host-side bubblewrap (exec: the pid the driver spawned is the
 * bubblewrap it records as the run's monitor).
 *
 *   svc-start [--cgroup PROCS_FILE]... [--image FILE --image-mount DIR] --lower DIR --upper DIR
 *             --work DIR --root DIR --seccomp FILE --uid UID [--file-uid UID] [--nofile N]
 *             [--volume image|dir SOURCE MOUNT SUBPATH TARGET rw|ro]... [--shared-volumes DIR]
 *             -- BWRAP ARGS...
 *
 * In order, in this one process:
 *   1. a private mount namespace of its own (unshare, / made private recursively): what is
 *      mounted below is seen by this sandbox only, and goes when its last process ends;
 *   2. into each of the sandbox's cgroups (`cgroup-join.h`; everything after is charged to it);
 *   3. the disk image through a loop device at DIR (`loop-mount.h`; autoclear: detached with
 *      the namespace), when the sandbox has one;
 *   4. the overlay (lower: the template, upper and work: on the image) at --root, its layers
 *      given as /proc/self/fd/N (the sandbox's mountinfo shows no host path); with --file-uid,
 *      each layer is an idmapped clone (`idmap.h`): files on disk are owned by --file-uid+n,
 *      the sandbox (--uid+n) sees and writes them as its own;
 *   4b. the volumes (`volume-mount.h`): a local volume's image loop-mounted at MOUNT (`image`),
 *      a shared volume's file system already mounted at SOURCE by the agent (`dir`); SUBPATH
 *      of it bound at TARGET in the root, read-only for `ro`, idmapped like the layers; then
 *      every other shared volume's mount (under --shared-volumes) detached from this namespace;
 *   5. the seccomp filter opened on fd 6, where bubblewrap's `--seccomp 6` reads it;
 *   5b. RLIMIT_NOFILE N, soft and hard (--nofile): set as root, it can never be raised from
 *      inside (raising a hard limit takes CAP_SYS_RESOURCE in the host's user namespace);
 *   6. no supplementary groups, gid and uid the sandbox's unprivileged host uid --uid (real,
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
 * bubblewrap could not be run, 127 bubblewrap not found, 119 a volume.
 */
#include "cgroup-join.h"
#include "idmap.h"
#include "loop-mount.h"
#include "volume-mount.h"

#include <grp.h>
#include <sys/resource.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/types.h>

#define MAX_CGROUPS 16
#define MAX_VOLUMES 16
#define MAX_LAYERS 128

struct volume {
  int image;
  const char *source, *mount, *subpath, *target;
  int ro;
};

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
  const char *seccomp = NULL, *uid_text = NULL, *file_uid_text = NULL, *shared_volumes = NULL, *nofile_text = NULL;
  struct volume volumes[MAX_VOLUMES];
  int nvolumes = 0;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) { i++; break; }
    if (strcmp(a, "--volume") == 0) {
      if (i + 6 >= argc) failx(120, "--volume takes 6 values");
      if (nvolumes == MAX_VOLUMES) failx(120, "too many volumes");
      struct volume *v = &volumes[nvolumes++];
      v->image = strcmp(argv[i + 1], "image") == 0;
      if (!v->image && strcmp(argv[i + 1], "dir") != 0) failx(120, "--volume: image or dir");
      v->source = argv[i + 2];
      v->mount = argv[i + 3];
      v->subpath = argv[i + 4];
      v->target = argv[i + 5];
      if (v->target[0] != '/') failx(120, "--volume: the target is absolute");
      if (strcmp(argv[i + 6], "ro") == 0) v->ro = 1;
      else if (strcmp(argv[i + 6], "rw") == 0) v->ro = 0;
      else failx(120, "--volume: rw or ro");
      i += 6;
      continue;
    }
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
    else if (strcmp(a, "--file-uid") == 0) file_uid_text = v;
    else if (strcmp(a, "--shared-volumes") == 0) shared_volumes = v;
    else if (strcmp(a, "--nofile") == 0) nofile_text = v;
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
  if (errno != 0 || *end != 0 || uid == 0 || uid > 0xfffeffffUL) failx(120, "bad --uid");
  /* The owner of the files on disk (their uid 0), when the sandbox runs as another range. */
  unsigned long file_uid = uid;
  if (file_uid_text != NULL) {
    errno = 0;
    file_uid = strtoul(file_uid_text, &end, 10);
    if (errno != 0 || *end != 0 || file_uid == 0 || file_uid > 0xfffeffffUL) failx(120, "bad --file-uid");
  }
  int userns = -1;
  if (file_uid != uid && (userns = idmap_userns(file_uid, uid)) < 0) fail(124, "the id mapping's user namespace", NULL);
  char **program = argv + i;

  if (unshare(CLONE_NEWNS) != 0) fail(120, "unshare", "(mount namespace)");
  if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail(120, "making / private", NULL);

  for (int c = 0; c < ncgroups; c++) {
    if (cgroup_join(cgroups[c]) != 0) fail(125, "joining the cgroup of", cgroups[c]);
  }

  if (image != NULL && loop_mount("svc-start", image, image_mount) != 0) exit(122);

  /* The layers are named by descriptors (/proc/self/fd/N): the options the kernel shows in the
   * sandbox's /proc/self/mountinfo are the strings given here, which then name no host path
   * (data dir, sandbox id). overlayfs parses its options at ',' and ':': the driver refuses a
   * data dir with either. */
  /* --lower may stack several layers, top first, separated by ':' (imported images). */
  static char options[4096];
  int layers[MAX_LAYERS + 2], nlayers = 0;
  size_t len = (size_t) snprintf(options, sizeof options, "lowerdir=");
  char *lowers = strdup(lower), *next = NULL;
  if (lowers == NULL) fail(124, "strdup", NULL);
  for (char *layer = strtok_r(lowers, ":", &next); layer != NULL; layer = strtok_r(NULL, ":", &next)) {
    if (nlayers == MAX_LAYERS) failx(124, "too many lower layers");
    if ((layers[nlayers] = open(layer, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) fail(124, "open", layer);
    if (userns >= 0) {
      int mapped = idmap_clone(layers[nlayers], userns);
      if (mapped < 0) fail(124, "idmapping", layer);
      close(layers[nlayers]);
      layers[nlayers] = mapped;
    }
    len += (size_t) snprintf(options + len, sizeof options - len, "%s/proc/self/fd/%d", nlayers ? ":" : "", layers[nlayers]);
    nlayers++;
    if (len >= sizeof options) failx(124, "overlay options too long");
  }
  free(lowers);
  if (nlayers == 0) failx(124, "no lower layer");
  const char *rw[2] = {upper, work};
  /* overlayfs wants upper and work on one mount: with the idmap, both are opened beneath one
   * idmapped clone of the folder that holds them (the image's root, or the sandbox's folder). */
  int rw_parent = -1;
  const char *rw_name[2] = {NULL, NULL};
  if (userns >= 0) {
    const char *slash[2] = {strrchr(upper, '/'), strrchr(work, '/')};
    if (slash[0] == NULL || slash[1] == NULL || slash[0] - upper != slash[1] - work ||
        strncmp(upper, work, (size_t) (slash[0] - upper)) != 0) {
      failx(124, "--upper and --work are not in one folder");
    }
    char *parent = strndup(upper, (size_t) (slash[0] - upper));
    if (parent == NULL) fail(124, "strndup", NULL);
    int dir = open(parent[0] ? parent : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) fail(124, "open", parent);
    if ((rw_parent = idmap_clone(dir, userns)) < 0) fail(124, "idmapping", parent);
    close(dir);
    free(parent);
    rw_name[0] = slash[0] + 1;
    rw_name[1] = slash[1] + 1;
  }
  for (int l = 0; l < 2; l++) {
    layers[nlayers] = rw_parent >= 0 ? openat(rw_parent, rw_name[l], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                                     : open(rw[l], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (layers[nlayers] < 0) fail(124, "open", rw[l]);
    len += (size_t) snprintf(options + len, sizeof options - len, ",%s=/proc/self/fd/%d", l ? "workdir" : "upperdir",
                             layers[nlayers]);
    nlayers++;
    if (len >= sizeof options) failx(124, "overlay options too long");
  }
  if (mount("overlay", root, "overlay", 0, options) != 0) fail(124, "mounting the overlay on", root);
  for (int l = 0; l < nlayers; l++) close(layers[l]);
  if (rw_parent >= 0) close(rw_parent);

  for (int n = 0; n < nvolumes; n++) {
    const struct volume *v = &volumes[n];
    const char *from = v->source;
    if (v->image) {
      if (loop_mount("svc-start", v->source, v->mount) != 0) exit(119);
      from = v->mount;
    }
    if (volume_bind(from, v->subpath, root, v->target, v->ro, file_uid, uid, userns) != 0) exit(119);
  }
  if (shared_volumes != NULL) detach_under(shared_volumes);

  if (userns >= 0) close(userns);

  int filter = open(seccomp, O_RDONLY);
  if (filter < 0) fail(123, "open", seccomp);
  if (filter != 6) {
    if (dup2(filter, 6) != 6) fail(123, "dup2", seccomp);
    close(filter);
  }

  if (nofile_text != NULL) {
    unsigned long nofile = strtoul(nofile_text, &end, 10);
    if (*end != 0 || nofile < 64) failx(120, "bad --nofile");
    struct rlimit limit = {nofile, nofile};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) fail(120, "setrlimit", "RLIMIT_NOFILE");
  }

  if (setgroups(0, NULL) != 0) fail(121, "setgroups", NULL);
  if (setresgid((gid_t) uid, (gid_t) uid, (gid_t) uid) != 0) fail(121, "setresgid", uid_text);
  if (setresuid((uid_t) uid, (uid_t) uid, (uid_t) uid) != 0) fail(121, "setresuid", uid_text);

  execv(program[0], program);
  int err = errno;
  fprintf(stderr, "svc-start: %s: %s\n", program[0], strerror(err));
  return err == ENOENT ? 127 : 126;
}
