/*
 * volume-mount.h: a sandbox's volumes, mounted by svc-start into its root (the overlay, before
 * bubblewrap binds that root recursively as the sandbox's `/`), in svc-start's private mount
 * namespace, as host root, before any process of the sandbox runs.
 *
 * For each volume: its file system (a local volume's image, loop-mounted here like the disk; a
 * shared volume's, mounted once on the machine by the agent), then `subpath` inside it and
 * `target` inside the root, both opened one component at a time with openat2
 * RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH: the tenant owns both trees (another sandbox may be
 * changing a shared one right now), so no symbolic link, `..` or magic link is ever followed,
 * and nothing outside them is reached. Missing folders are made, owned by the sandbox's root
 * (on the volume: the files' canonical owner; in the root, seen through the idmapped layers:
 * the sandbox's own uid). The bind is made from the two descriptors (open_tree, mount_setattr,
 * move_mount), idmapped like the layers when `userns` is given (`idmap.h`): no path
 * is resolved again between the check and the mount. `ro` is a read-only mount, which
 * bubblewrap's user namespace then locks (the sandbox has no CAP_SYS_ADMIN either).
 *
 * `detach_under` then lazily unmounts, in this namespace only, every mount under the machine's
 * shared-volume folder: what the sandbox needs is bound into its root already, and a copy of
 * every shared volume's mount left here would keep each one's file system (and loop device)
 * alive until this sandbox ends, long after the volume was deleted.
 */
#ifndef SVC_VOLUME_MOUNT_H
#define SVC_VOLUME_MOUNT_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int volume_fail(const char *what, const char *detail) {
  fprintf(stderr, "svc-start: volume: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "", strerror(errno));
  return -1;
}

/* One component under `dir`, never through a link; made (0755, owned by `uid`) when missing. */
static int open_component(int dir, const char *name, int create, unsigned long uid) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = (int) syscall(SYS_openat2, dir, name, &how, sizeof how);
    if (fd >= 0 || errno != ENOENT || !create) return fd;
    if (mkdirat(dir, name, 0755) != 0 && errno != EEXIST) return -1;
    if (fchownat(dir, name, (uid_t) uid, (gid_t) uid, AT_SYMLINK_NOFOLLOW) != 0) return -1;
  }
  return -1;
}

/* The folder at relative `path` under `base` (a descriptor), made as needed; -1 on failure. */
static int open_beneath(int base, const char *path, unsigned long uid) {
  char copy[4097];
  if (strlen(path) >= sizeof copy) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(copy, path);
  int dir = dup(base);
  if (dir < 0) return -1;
  char *save = NULL;
  for (char *name = strtok_r(copy, "/", &save); name != NULL; name = strtok_r(NULL, "/", &save)) {
    if (strcmp(name, ".") == 0) continue;
    if (strcmp(name, "..") == 0) {
      close(dir);
      errno = EINVAL;
      return -1;
    }
    int next = open_component(dir, name, 1, uid);
    int saved = errno;
    close(dir);
    if (next < 0) {
      errno = saved;
      return -1;
    }
    dir = next;
  }
  return dir;
}

/*
 * Binds folder `subpath` of the file system at `source` onto `target` (absolute, inside the
 * sandbox) of the root at `root`; read-only when `ro`. 0, or -1 with the reason on stderr.
 */
static int volume_bind(const char *source, const char *subpath, const char *root, const char *target, int ro,
                       unsigned long file_uid, unsigned long uid, int userns) {
  int base = open(source, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (base < 0) return volume_fail("open", source);
  int from = open_beneath(base, subpath, file_uid);
  close(base);
  if (from < 0) return volume_fail("subpath", subpath);
  int root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    close(from);
    return volume_fail("open", root);
  }
  int to = open_beneath(root_fd, target + 1, uid);
  close(root_fd);
  if (to < 0) {
    close(from);
    return volume_fail("mount path (a folder, not through a symbolic link)", target);
  }
  int result = -1;
  int tree = (int) syscall(SYS_open_tree, from, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
  if (tree < 0) {
    volume_fail("open_tree", subpath);
    goto out;
  }
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | (ro ? MOUNT_ATTR_RDONLY : 0);
  if (userns >= 0) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = (unsigned long long) userns;
  }
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    volume_fail("mount_setattr", target);
  } else if (syscall(SYS_move_mount, tree, "", to, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    volume_fail("move_mount", target);
  } else {
    result = 0;
  }
  close(tree);
out:
  close(from);
  close(to);
  return result;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s) {
  char *out = s;
  for (char *in = s; *in; in++) {
    if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' && in[3] <= '7') {
      *out++ = (char) (((in[1] - '0') << 6) | ((in[2] - '0') << 3) | (in[3] - '0'));
      in += 3;
    } else {
      *out++ = *in;
    }
  }
  *out = 0;
}

/* Lazily unmounts every mount strictly under `dir` in this mount namespace, deepest first. */
static void detach_under(const char *dir) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL) return;
  size_t dir_len = strlen(dir);
  char *points[1024];
  int n = 0;
  char *line = NULL;
  size_t cap = 0;
  while (n < 1024 && getline(&line, &cap, f) > 0) {
    /* Field 5 is the mount point. */
    char *save = NULL, *field = strtok_r(line, " ", &save);
    for (int i = 1; field != NULL && i < 5; i++) field = strtok_r(NULL, " ", &save);
    if (field == NULL) continue;
    unescape(field);
    if (strncmp(field, dir, dir_len) == 0 && field[dir_len] == '/') points[n++] = strdup(field);
  }
  free(line);
  fclose(f);
  for (int i = n - 1; i >= 0; i--) {
    if (points[i] != NULL) umount2(points[i], MNT_DETACH);
    free(points[i]);
  }
}

#endif
