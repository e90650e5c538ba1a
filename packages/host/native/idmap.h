/*
 * idmap.h: the idmapped mounts through which a sandbox sees the files of its layers, disk and
 * volumes (svc-start, as host root, before bubblewrap).
 *
 * Files on disk keep the canonical ids (`--file-uid` F: uid n inside is F+n on disk) whatever
 * sandbox made them, so that templates, snapshots and shared volumes mean the same to every
 * sandbox; each sandbox runs as a uid range of its own (`--uid` S: n inside is S+n on the host),
 * so that no per-user kernel limit (inotify instances, RLIMIT_NPROC, pipe buffers, keys) is shared
 * by two sandboxes. Each layer is a detached clone (open_tree) given MOUNT_ATTR_IDMAP with a user
 * namespace whose map is `0 0 1` and `F S 65536`: on-disk F+n is seen (and written) as S+n.
 * On-disk 0 stays 0 (overlayfs makes its work folders as the mounter, host root; a file of the
 * host's root in a layer is nobody inside, as without the idmap). No other id is mapped: a file
 * of any other host id is nobody, and cannot be made.
 */
#ifndef SVC_IDMAP_H
#define SVC_IDMAP_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A user namespace (its descriptor) mapping on-disk `file_uid`+n to `uid`+n, and 0 to 0; -1 on failure. */
static int idmap_userns(unsigned long file_uid, unsigned long uid) {
  /* ready: the child has its namespace; go: the parent has mapped and opened it. */
  int ready[2], go[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  if (pipe2(go, O_CLOEXEC) != 0) {
    close(ready[0]);
    close(ready[1]);
    return -1;
  }
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    /* Only a holder of the namespace, for as long as the parent needs it. */
    char byte = 1;
    close(ready[0]);
    close(go[1]);
    if (unshare(CLONE_NEWUSER) != 0 || write(ready[1], &byte, 1) != 1) _exit(1);
    _exit(read(go[0], &byte, 1) < 0 ? 1 : 0);
  }
  close(ready[1]);
  close(go[0]);
  char path[64], map[96], byte;
  int len = snprintf(map, sizeof map, "0 0 1\n%lu %lu 65536\n", file_uid, uid), ns = -1;
  if (read(ready[0], &byte, 1) != 1) {
    errno = ECHILD;
    goto out;
  }
  for (int m = 0; m < 2; m++) {
    snprintf(path, sizeof path, "/proc/%d/%s", (int) child, m ? "gid_map" : "uid_map");
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) goto out;
    ssize_t n = write(fd, map, (size_t) len);
    close(fd);
    if (n != len) goto out;
  }
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int) child);
  ns = open(path, O_RDONLY | O_CLOEXEC);
out:;
  int saved = errno;
  close(ready[0]);
  close(go[1]);
  waitpid(child, NULL, 0);
  errno = saved;
  return ns;
}

/* A detached clone of the folder `dir` (a descriptor) seen through `userns`; -1 on failure. */
static int idmap_clone(int dir, int userns) {
  int tree = (int) syscall(SYS_open_tree, dir, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
  if (tree < 0) return -1;
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_IDMAP;
  attr.userns_fd = (unsigned long long) userns;
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    int saved = errno;
    close(tree);
    errno = saved;
    return -1;
  }
  return tree;
}

#endif
