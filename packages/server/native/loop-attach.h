/*
 * loop-attach.h: attaches a file to a free loop device, for idmap-mount.c and
 * snapshot-apply.c (which include it after die.h).
 *
 * LOOP_CTL_GET_FREE hands every caller the same lowest free device until one of them
 * configures it; the losers see EBUSY and ask again. A burst of creates (100 at once) made
 * dozens of helpers race for each device, and some lost 64 times in a row. So the helpers of
 * this host take turns: an exclusive flock on /dev/loop-control is held from GET_FREE to
 * LOOP_CONFIGURE (well under a millisecond), and the bounded retry only covers other programs
 * on the host taking the device in between.
 */
#ifndef SANDBOXD_LOOP_ATTACH_H
#define SANDBOXD_LOOP_ATTACH_H

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <unistd.h>

/*
 * Attaches `image` (opened read-only when `readonly`) to a free loop device with autoclear
 * and `flags` (LO_FLAGS_*); writes the device's path to `dev` and returns its open fd. With
 * LO_FLAGS_DIRECT_IO on a file system that refuses direct I/O, retries buffered.
 */
static int loop_attach(const char *image, int readonly, unsigned flags, char *dev, size_t devlen) {
  int img = open(image, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (img < 0) die("open %s", image);
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) die("open /dev/loop-control");
  while (flock(ctl, LOCK_EX) && errno == EINTR) {}
  for (int attempt = 0; attempt < 64; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) die("LOOP_CTL_GET_FREE");
    snprintf(dev, devlen, "/dev/loop%d", n);
    int lfd = open(dev, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (lfd < 0) { if (errno == ENOENT || errno == ENXIO) continue; die("open %s", dev); }
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (unsigned)img;
    cfg.block_size = 4096;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | flags | (readonly ? LO_FLAGS_READ_ONLY : 0);
    strncpy((char *)cfg.info.lo_file_name, image, LO_NAME_SIZE - 1);
    int ok = ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0;
    if (!ok && errno == EINVAL && (flags & LO_FLAGS_DIRECT_IO)) {
      /* no direct I/O on this backing file system: buffered */
      cfg.info.lo_flags &= ~(unsigned)LO_FLAGS_DIRECT_IO;
      ok = ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0;
    }
    if (ok) {
      close(img);
      close(ctl); /* and the lock with it */
      return lfd;
    }
    int e = errno;
    close(lfd);
    if (e == EBUSY) continue; /* another program on the host took it first */
    errno = e;
    die("LOOP_CONFIGURE %s", dev);
  }
  errno = 0;
  die("no free loop device after 64 attempts");
  return -1;
}

#endif
