/*
 * frames.h: the framing shared by sandboxd's channel helpers (exec-agent.c, spawner.c;
 * the server's side is src/runtime/local/commands/frames.ts). Both directions carry frames of
 *   u32 len (bytes after this field, little-endian) | u8 type | u32 id | payload
 * Everything here is static inline: each helper is still built from its one .c file.
 */
#ifndef SANDBOXD_FRAMES_H
#define SANDBOXD_FRAMES_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Most payload parts frame_write takes. */
#define FRAME_MAX_PARTS 3

/* Milliseconds on the monotonic clock. */
static inline int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void put32(unsigned char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static inline uint32_t get32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/*
 * Writes one frame to `fd`: the header, then the `nparts` (at most FRAME_MAX_PARTS, each may
 * be empty) payload parts. One writev when the fd takes it all: every write wakes the
 * server, so a frame is never split needlessly. A non-blocking fd that is full is waited on
 * with poll (with one socket on both fds, the reads' O_NONBLOCK applies to the writes too).
 * Returns 0, or -1 when the fd is broken.
 */
static inline int frame_write(int fd, int type, uint32_t id, const struct iovec *parts, int nparts) {
  unsigned char h[9];
  struct iovec iov[1 + FRAME_MAX_PARTS] = { { h, 9 } };
  size_t len = 5;
  for (int i = 0; i < nparts; i++) { iov[1 + i] = parts[i]; len += parts[i].iov_len; }
  put32(h, (uint32_t)len); h[4] = (unsigned char)type; put32(h + 5, id);
  struct iovec *v = iov;
  int n = 1 + nparts;
  while (n > 0) {
    ssize_t w = writev(fd, v, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd p = { .fd = fd, .events = POLLOUT };
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
      continue;
    }
    if (w <= 0) return -1;
    while (n > 0 && (size_t)w >= v->iov_len) { w -= (ssize_t)v->iov_len; v++; n--; }
    if (n > 0) { v->iov_base = (char *)v->iov_base + w; v->iov_len -= (size_t)w; }
  }
  return 0;
}

#endif
