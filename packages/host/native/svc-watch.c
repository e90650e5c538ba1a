/*
 * svc-watch: the watcher of GET /v1/sandboxes/{id}/files/watch, run inside the sandbox (through
 * svc-enter, as its root, from the helper folder bound read-only at /dev/.svc; built static: a
 * template may have no libc). Its inotify instance, its watches and its memory are the
 * sandbox's own: counted against the sandbox's user namespace and memory cgroup, never the
 * agent's. It never follows a link (the walk uses lstat; a link is watched as an entry of its
 * folder, not as what it points to).
 *
 *   svc-watch PATH RECURSIVE(0|1)
 *
 * Writes one record per event to stdout: "<type> <is_dir> <path>\0<from>\0", type one of
 * create, modify, delete, move (`from`: the old path of a move inside the watched tree, else
 * empty). A move out of the tree is a delete, a move into it a create (its folders then
 * watched). Coalesced: within one burst (one read of the kernel's queue), a modify of the path
 * the previous record named is dropped. Ends (exit 0)
 * when PATH itself goes; on the kernel's queue overflowing, writes "overflow 0 \0\0" and exits 3.
 * Exit codes: 2 PATH is missing or not watchable, 1 anything else.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define MASK (IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | \
              IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

static int fd;
static int recursive;
static char **paths; /* by watch descriptor */
static int npaths;
static int root_wd = -1;
static char last[PATH_MAX + 16];

static void emit(const char *type, int is_dir, const char *path, const char *from) {
  /* Coalesce: a modify right after a record of the same path adds nothing. */
  if (strcmp(type, "modify") == 0 && strcmp(last, path) == 0) return;
  snprintf(last, sizeof last, "%s", path);
  printf("%s %d %s%c%s%c", type, is_dir, path, 0, from != NULL ? from : "", 0);
}

static void remember(int wd, const char *path) {
  if (wd >= npaths) {
    int n = wd * 2 + 16;
    char **grown = realloc(paths, sizeof(char *) * (size_t)n);
    if (grown == NULL) exit(1);
    for (int i = npaths; i < n; i++) grown[i] = NULL;
    paths = grown;
    npaths = n;
  }
  free(paths[wd]);
  paths[wd] = strdup(path);
}

/* Watches `path` and, when recursive, every folder under it (links not followed). */
static void watch_tree(const char *path, int top) {
  int wd = inotify_add_watch(fd, path, MASK);
  if (wd < 0) {
    if (top) exit(2);
    return;
  }
  remember(wd, path);
  if (top) root_wd = wd;
  if (!recursive) return;
  DIR *dir = opendir(path);
  if (dir == NULL) return;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    char child[PATH_MAX];
    if (snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") == 0 ? "" : path, entry->d_name) >= PATH_MAX) continue;
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) watch_tree(child, 0);
  }
  closedir(dir);
}

int main(int argc, char **argv) {
  if (argc != 3) return 1;
  recursive = strcmp(argv[2], "1") == 0;
  setvbuf(stdout, NULL, _IOFBF, 64 * 1024);
  fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0) return 1;
  struct stat st;
  if (lstat(argv[1], &st) != 0) return 2;
  watch_tree(argv[1], 1);
  /* Ready: the agent answers the client once this is read. */
  printf("ready 0 %c%c", 0, 0);
  fflush(stdout);

  char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  char pending[PATH_MAX] = "";
  uint32_t pending_cookie = 0;
  int pending_dir = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return 1;
    }
    for (char *at = buf; at < buf + n;) {
      struct inotify_event *ev = (struct inotify_event *)at;
      at += sizeof(struct inotify_event) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        printf("overflow 0 %c%c", 0, 0);
        fflush(stdout);
        return 3;
      }
      if (ev->wd < 0 || ev->wd >= npaths || paths[ev->wd] == NULL) continue;
      const char *base = paths[ev->wd];
      char path[PATH_MAX];
      if (ev->len > 0) {
        if (snprintf(path, sizeof path, "%s/%s", strcmp(base, "/") == 0 ? "" : base, ev->name) >= PATH_MAX) continue;
      } else {
        snprintf(path, sizeof path, "%s", base);
      }
      int is_dir = (ev->mask & IN_ISDIR) != 0;
      /* A move's two halves come one after the other, paired by their cookie. */
      if (pending[0] != 0 && !((ev->mask & IN_MOVED_TO) && ev->cookie == pending_cookie)) {
        emit("delete", pending_dir, pending, NULL);
        pending[0] = 0;
      }
      if (ev->mask & IN_MOVED_FROM) {
        snprintf(pending, sizeof pending, "%s", path);
        pending_cookie = ev->cookie;
        pending_dir = is_dir;
        continue;
      }
      if (ev->mask & IN_MOVED_TO) {
        if (pending[0] != 0) {
          emit("move", is_dir, path, pending);
          pending[0] = 0;
        } else {
          emit("create", is_dir, path, NULL);
        }
        if (is_dir && recursive) watch_tree(path, 0);
        continue;
      }
      if (ev->mask & IN_CREATE) {
        emit("create", is_dir, path, NULL);
        if (is_dir && recursive) watch_tree(path, 0);
      } else if (ev->mask & IN_DELETE) {
        emit("delete", is_dir, path, NULL);
      } else if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB)) {
        if (ev->len > 0 || ev->wd == root_wd) emit("modify", is_dir, path, NULL);
      } else if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        if (ev->wd == root_wd) {
          if (pending[0] != 0) emit("delete", pending_dir, pending, NULL);
          fflush(stdout);
          return 0;
        }
      } else if (ev->mask & IN_IGNORED) {
        free(paths[ev->wd]);
        paths[ev->wd] = NULL;
      }
    }
    if (pending[0] != 0) {
      /* The other half did not follow in this read: moved out of the tree. */
      emit("delete", pending_dir, pending, NULL);
      pending[0] = 0;
    }
    if (fflush(stdout) != 0) return 1;
    /* Coalescing stays within one burst (one read): a later write is news again. */
    last[0] = 0;
  }
}
