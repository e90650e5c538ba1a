/*
 * start-ticks.h: the start time of a process, how the driver names a sandbox's init beside its
 * pid (`run.json`'s startTicks): a pid reused by another process has another start time. Checked
 * after the init's pidfd or namespace files are open, it proves they are the init's (a pid is
 * not reused while its process lives). svc-enter and svc-spawner.
 */
#ifndef SVC_START_TICKS_H
#define SVC_START_TICKS_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Field 22 of /proc/PID/stat in clock ticks (the command may contain spaces); 0 when the
 * process is gone or a zombie (which has no namespaces left to join). */
static unsigned long long start_ticks(pid_t pid) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t) n;
    if (got == sizeof buf - 1) break;
  }
  close(fd);
  if (got == 0) return 0;
  buf[got] = 0;
  char *p = strrchr(buf, ')');
  if (p == NULL || p[1] == 0) return 0;
  char state = p[2];
  if (state == 'Z' || state == 'X') return 0;
  p++;
  /* After ')': field 3 (state) onwards; field 22 is the 20th token from here. */
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (p == NULL) return 0;
  }
  return strtoull(p + 1, NULL, 10);
}

#endif
