/*
 * svc-disk-mount: attaches a sandbox's disk image to a free loop device and mounts its ext4 file
 * system, in the caller's mount namespace (`loop-mount.h`). The driver's probe runs it once at
 * start to learn whether this host can give sandboxes a disk image; every sandbox start mounts
 * its image the same way inside svc-start.
 *
 *   svc-disk-mount IMAGE MOUNTPOINT
 *
 * Exit codes: 0 mounted, 1 a step failed (the reason on stderr), 2 usage.
 */
#include "loop-mount.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: svc-disk-mount IMAGE MOUNTPOINT\n");
    return 2;
  }
  return loop_mount("svc-disk-mount", argv[1], argv[2]) == 0 ? 0 : 1;
}
