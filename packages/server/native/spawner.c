/* libc: musl */
/*
 * spawner: starts host programs (ip, nft, crun, the mount helper) for the server, and sets
 * the hostname of a sandbox's UTS namespace without starting one.
 *
 * Node starts a program by forking its whole address space (libuv's uv_spawn on Linux):
 * at the server's ~170 MB that blocks the event loop ~5 ms per program and takes ~10 ms in
 * all, growing with the server's memory; ten creates at once queue behind it. This process
 * is small and starts programs with vfork + exec, which costs the same
 * ~0.1 ms whatever the server's size. One per server process, started once, on a pipe pair.
 *
 * Every fd of its own is close-on-exec; a program gets exactly fds 0-2, default signal
 * dispositions and an empty signal mask, the spawner's environment and working directory
 * (the server's, at start). EOF on the channel (the server went away) ends the spawner;
 * programs it started go on.
 *
 * Wire format, both directions: frames of
 *   u32 len (bytes after this field, little-endian) | u8 type | u32 id | payload
 * server -> spawner
 *   SPAWN (1): u32 flags | u32 timeoutMs (0 = none) | u32 maxOutputBytes | u32 inputLen
 *              | u32 argc | u32 channelLen | input | channel | argv[0]\0 argv[1]\0 ..
 *     flags 1 = QUIET: stdout and stderr on /dev/null.
 *     flags 2 = CHANNEL: stdin and stdout are one connection to the abstract unix socket
 *               named by the channel bytes (without the leading NUL); the first 16 input
 *               bytes are written on it before the program starts (the server's token that
 *               says which spawn the connection belongs to); stderr on /dev/null.
 *     Otherwise stdin gets the input bytes (then EOF; /dev/null when there are none) and
 *     stdout and stderr are collected, each up to maxOutputBytes (the rest is dropped).
 *     On timeout the program gets SIGKILL; its result comes once it exited and its output
 *     pipes closed (a timed-out program's pipes are closed by the spawner).
 *   HOSTNAME (2): u32 pid | name: sets the hostname of the UTS namespace of process `pid` (a
 *     sandbox's init, whose own root lacks CAP_SYS_ADMIN): the spawner enters it, sets the
 *     name and goes back to its own namespace before anything else (and dies if it cannot).
 *     Answered EXIT with code 0 and no output, or FAILED.
 * spawner -> server
 *   HELLO (0, id 0): u32 protocol version, sent once at start.
 *   EXIT (1): i32 exit code (-1 when killed by a signal) | i32 signal | u32 flags
 *             (1 = timed out, 2 = output truncated) | u32 stdoutLen | stdout | stderr
 *   FAILED (2): i32 errno | message. Nothing was started.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "frames.h"

#define PROTOCOL_VERSION 2
#define MAX_FRAME (16u << 20)
#define MAX_OUTPUT (4u << 20)
#define MAX_CHILDREN 512
#define TOKEN_LEN 16

extern char **environ;

enum { T_SPAWN = 1, T_HOSTNAME = 2 };
enum { R_HELLO = 0, R_EXIT = 1, R_FAILED = 2 };
enum { F_QUIET = 1, F_CHANNEL = 2 };

struct child {
  int used;
  uint32_t id;
  pid_t pid;
  int exited, status, timed_out, truncated;
  int64_t deadline_ms;       /* 0 = none */
  int in_fd;                 /* stdin write end while input is left; -1 after */
  unsigned char *in; size_t in_len, in_off;
  int fd[2];                 /* stdout, stderr read ends; -1 when closed */
  unsigned char *buf[2]; size_t len[2], cap[2];
  uint32_t max_out;
};

static int ctl_in = -1, ctl_out = -1;
/* The spawner's own UTS namespace, to come back to after a HOSTNAME. */
static int own_uts = -1;
static struct child kids[MAX_CHILDREN];

/* One frame to the server (see frames.h). A broken channel ends us. */
static void send_frame(int type, uint32_t id, const void *a, size_t alen, const void *b, size_t blen, const void *c, size_t clen) {
  struct iovec parts[3] = { { (void *)a, alen }, { (void *)b, blen }, { (void *)c, clen } };
  if (frame_write(ctl_out, type, id, parts, 3) < 0) _exit(0);
}

static void send_failed(uint32_t id, int err, const char *what) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  unsigned char p[4]; put32(p, (uint32_t)err);
  send_frame(R_FAILED, id, p, 4, msg, n < 0 ? 0 : (size_t)n, NULL, 0);
}

static void close_in(struct child *k) {
  if (k->in_fd >= 0) { close(k->in_fd); k->in_fd = -1; }
  free(k->in); k->in = NULL;
}

static void close_out(struct child *k, int i) {
  if (k->fd[i] >= 0) { close(k->fd[i]); k->fd[i] = -1; }
}

static void finish_if_done(struct child *k) {
  if (!k->used || !k->exited || k->fd[0] >= 0 || k->fd[1] >= 0) return;
  close_in(k);
  int code = -1, sig = 0;
  if (WIFEXITED(k->status)) code = WEXITSTATUS(k->status);
  else if (WIFSIGNALED(k->status)) sig = WTERMSIG(k->status);
  unsigned char p[16];
  put32(p, (uint32_t)code); put32(p + 4, (uint32_t)sig);
  put32(p + 8, (k->timed_out ? 1u : 0u) | (k->truncated ? 2u : 0u)); put32(p + 12, (uint32_t)k->len[0]);
  send_frame(R_EXIT, k->id, p, 16, k->buf[0], k->len[0], k->buf[1], k->len[1]);
  free(k->buf[0]); free(k->buf[1]);
  memset(k, 0, sizeof *k);
}

/* A connection to the server's abstract socket `name`, the token already written on it. */
static int open_channel(const unsigned char *name, uint32_t name_len, const unsigned char *token) {
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (name_len == 0 || name_len >= sizeof sa.sun_path) { errno = EINVAL; return -1; }
  memcpy(sa.sun_path + 1, name, name_len);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  /* An abstract name is its exact bytes: Node 24 binds `\0name` as it is, Node 20 padded it with
   * NULs to the whole sun_path. The exact name first, the padded one for a server on Node 20. */
  socklen_t exact = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name_len);
  if (connect(s, (struct sockaddr *)&sa, exact) < 0 &&
      (errno != ECONNREFUSED || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0))
    goto fail;
  for (size_t off = 0; off < TOKEN_LEN;) {
    ssize_t w = write(s, token + off, TOKEN_LEN - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) goto fail;
    off += (size_t)w;
  }
  return s;
fail:;
  int e = errno;
  close(s);
  errno = e;
  return -1;
}

static void spawn_one(uint32_t id, const unsigned char *p, uint32_t n) {
  if (n < 24) { send_failed(id, EINVAL, "short spawn request"); return; }
  uint32_t flags = get32(p), timeout = get32(p + 4), max_out = get32(p + 8), in_len = get32(p + 12), argc = get32(p + 16), ch_len = get32(p + 20);
  p += 24; n -= 24;
  if (in_len > n || ch_len > n - in_len || argc == 0 || argc > 65536) { send_failed(id, EINVAL, "malformed spawn request"); return; }
  const unsigned char *input = p, *channel = p + in_len;
  const char *s = (const char *)(p + in_len + ch_len), *end = (const char *)(p + n);
  if ((flags & F_CHANNEL) && in_len < TOKEN_LEN) { send_failed(id, EINVAL, "channel without a token"); return; }
  char **argv = calloc(argc + 1, sizeof *argv);
  if (!argv) { send_failed(id, ENOMEM, "spawn"); return; }
  for (uint32_t i = 0; i < argc; i++) {
    const char *z = memchr(s, 0, (size_t)(end - s));
    if (!z) { free(argv); send_failed(id, EINVAL, "argv not NUL-terminated"); return; }
    argv[i] = (char *)s; s = z + 1;
  }
  struct child *k = NULL;
  for (int i = 0; i < MAX_CHILDREN; i++) if (!kids[i].used) { k = &kids[i]; break; }
  if (!k) { free(argv); send_failed(id, EAGAIN, "too many programs running"); return; }

  int in_p[2] = { -1, -1 }, out_p[2] = { -1, -1 }, err_p[2] = { -1, -1 }, chan = -1;
  int quiet = (flags & (F_QUIET | F_CHANNEL)) != 0;
  const char *what = "pipe";
  if (flags & F_CHANNEL) {
    what = "channel";
    if ((chan = open_channel(channel, ch_len, input)) < 0) goto failed;
  } else if (in_len && pipe2(in_p, O_CLOEXEC) < 0) goto failed;
  if (!quiet && (pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0)) goto failed;

  /* vfork: no copy of this process; the child only sets up fds and signals, then execs. */
  static volatile int exec_errno;
  exec_errno = 0;
  int in0 = chan >= 0 ? chan : in_p[0], out1 = chan >= 0 ? chan : out_p[1], err2 = quiet ? -1 : err_p[1];
  pid_t pid = vfork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || dup2(in0 >= 0 ? in0 : null, 0) < 0 || dup2(out1 >= 0 ? out1 : null, 1) < 0 || dup2(err2 >= 0 ? err2 : null, 2) < 0) {
      exec_errno = errno ? errno : EBADF;
      _exit(127);
    }
    /* Handlers reset at exec by themselves; what we ignore or block must be undone here. */
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(argv[0], argv);
    exec_errno = errno;
    _exit(127);
  }
  if (pid < 0 || exec_errno) {
    if (pid > 0) waitpid(pid, NULL, 0);
    errno = pid < 0 ? errno : exec_errno;
    what = pid < 0 ? "fork" : argv[0];
    goto failed;
  }
  free(argv); argv = NULL;
  if (chan >= 0) close(chan);
  if (in_p[0] >= 0) close(in_p[0]);
  if (out_p[1] >= 0) close(out_p[1]);
  if (err_p[1] >= 0) close(err_p[1]);

  memset(k, 0, sizeof *k);
  k->used = 1; k->id = id; k->pid = pid;
  k->deadline_ms = timeout ? now_ms() + timeout : 0;
  k->max_out = max_out > MAX_OUTPUT ? MAX_OUTPUT : max_out;
  k->fd[0] = out_p[0]; k->fd[1] = err_p[0];
  k->in_fd = in_p[1];
  if (k->in_fd >= 0) {
    fcntl(k->in_fd, F_SETFL, O_NONBLOCK);
    k->in = malloc(in_len);
    if (!k->in) close_in(k);
    else { memcpy(k->in, input, in_len); k->in_len = in_len; }
  }
  return;
failed:;
  int e = errno;
  free(argv);
  int fds[] = { chan, in_p[0], in_p[1], out_p[0], out_p[1], err_p[0], err_p[1] };
  for (size_t i = 0; i < sizeof fds / sizeof *fds; i++) if (fds[i] >= 0) close(fds[i]);
  send_failed(id, e, what);
}

static void set_hostname(uint32_t id, const unsigned char *p, uint32_t n) {
  if (n < 5 || n - 4 > 64) { send_failed(id, EINVAL, "malformed hostname request"); return; }
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/ns/uts", get32(p));
  int uts = open(path, O_RDONLY | O_CLOEXEC);
  if (uts < 0) { send_failed(id, errno, path); return; }
  int failed = own_uts < 0 || setns(uts, CLONE_NEWUTS) < 0;
  int e = errno;
  close(uts);
  if (failed) { send_failed(id, e, "setns"); return; }
  failed = sethostname((const char *)p + 4, n - 4) < 0;
  e = errno;
  if (setns(own_uts, CLONE_NEWUTS) < 0) _exit(1); /* never start a program in a sandbox's namespace */
  if (failed) { send_failed(id, e, "sethostname"); return; }
  unsigned char r[16] = {0};
  send_frame(R_EXIT, id, r, 16, NULL, 0, NULL, 0);
}

static void handle_frame(const unsigned char *f, uint32_t len) {
  if (len < 5) return;
  uint32_t id = get32(f + 1);
  if (f[0] == T_SPAWN) spawn_one(id, f + 5, len - 5);
  else if (f[0] == T_HOSTNAME) set_hostname(id, f + 5, len - 5);
}

/* Reads what the server sent and runs every complete frame; EOF or nonsense ends us. */
static void read_ctl(void) {
  static unsigned char *buf;
  static size_t len, cap;
  if (cap - len < 65536) {
    size_t ncap = cap ? cap * 2 : 1 << 17;
    if (ncap > MAX_FRAME + 65536 + 9) ncap = MAX_FRAME + 65536 + 9;
    if (ncap <= len) _exit(1);
    unsigned char *nb = realloc(buf, ncap);
    if (!nb) _exit(1);
    buf = nb; cap = ncap;
  }
  ssize_t r = read(ctl_in, buf + len, cap - len);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (r <= 0) _exit(0);
  len += (size_t)r;
  size_t off = 0;
  while (len - off >= 4) {
    uint32_t flen = get32(buf + off);
    if (flen > MAX_FRAME) _exit(1);
    if (len - off - 4 < flen) break;
    handle_frame(buf + off + 4, flen);
    off += 4 + flen;
  }
  memmove(buf, buf + off, len - off);
  len -= off;
}

static void read_out(struct child *k, int i) {
  unsigned char chunk[65536];
  ssize_t r = read(k->fd[i], chunk, sizeof chunk);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (r <= 0) { close_out(k, i); finish_if_done(k); return; }
  size_t keep = (size_t)r;
  if (k->len[i] + keep > k->max_out) { keep = k->max_out - k->len[i]; k->truncated = 1; }
  if (!keep) return;
  if (k->len[i] + keep > k->cap[i]) {
    size_t ncap = k->cap[i] ? k->cap[i] : 4096;
    while (ncap < k->len[i] + keep) ncap *= 2;
    unsigned char *nb = realloc(k->buf[i], ncap);
    if (!nb) { k->truncated = 1; return; }
    k->buf[i] = nb; k->cap[i] = ncap;
  }
  memcpy(k->buf[i] + k->len[i], chunk, keep);
  k->len[i] += keep;
}

static void write_in(struct child *k) {
  ssize_t w = write(k->in_fd, k->in + k->in_off, k->in_len - k->in_off);
  if (w < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (w < 0) { close_in(k); return; } /* the program stopped reading: its exit code says why */
  k->in_off += (size_t)w;
  if (k->in_off == k->in_len) close_in(k);
}

static void reap(void) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    for (int i = 0; i < MAX_CHILDREN; i++) {
      struct child *k = &kids[i];
      if (!k->used || k->pid != pid) continue;
      k->exited = 1; k->status = st;
      /* A killed program's pipes may be held by what it started: do not wait for them. */
      if (k->timed_out) { close_out(k, 0); close_out(k, 1); }
      finish_if_done(k);
      break;
    }
  }
}

static void move_up(int *fd) {
  int n = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
  if (n < 0) _exit(1);
  *fd = n;
}

/* Whatever this process inherited beyond its stdio stays out of the programs it starts. */
static void cloexec_inherited(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    int fd = atoi(de->d_name);
    if (fd > 2 && fd != dirfd(d)) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  closedir(d);
}

int main(void) {
  cloexec_inherited();
  ctl_in = 0; ctl_out = 1;
  move_up(&ctl_in); move_up(&ctl_out);
  int null = open("/dev/null", O_RDWR);
  if (null < 0) _exit(1);
  dup2(null, 0); dup2(null, 1);
  if (null > 2) close(null);
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld); sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) _exit(1);
  own_uts = open("/proc/self/ns/uts", O_RDONLY | O_CLOEXEC);

  unsigned char hello[4]; put32(hello, PROTOCOL_VERSION);
  send_frame(R_HELLO, 0, hello, 4, NULL, 0, NULL, 0);

  static struct pollfd pfd[2 + MAX_CHILDREN * 3];
  static struct child *owner[2 + MAX_CHILDREN * 3];
  static int which[2 + MAX_CHILDREN * 3];
  for (;;) {
    int n = 0, wait = -1;
    int64_t now = now_ms();
    pfd[n].fd = ctl_in; pfd[n].events = POLLIN; owner[n] = NULL; which[n++] = 0;
    pfd[n].fd = sfd; pfd[n].events = POLLIN; owner[n] = NULL; which[n++] = 1;
    for (int i = 0; i < MAX_CHILDREN; i++) {
      struct child *k = &kids[i];
      if (!k->used) continue;
      if (k->deadline_ms && !k->timed_out) {
        if (now >= k->deadline_ms) {
          k->timed_out = 1;
          kill(k->pid, SIGKILL);
          close_in(k);
          if (k->exited) { close_out(k, 0); close_out(k, 1); finish_if_done(k); continue; }
        } else {
          int left = (int)(k->deadline_ms - now);
          if (wait < 0 || left < wait) wait = left;
        }
      }
      for (int j = 0; j < 2; j++) if (k->fd[j] >= 0) { pfd[n].fd = k->fd[j]; pfd[n].events = POLLIN; owner[n] = k; which[n++] = j; }
      if (k->in_fd >= 0) { pfd[n].fd = k->in_fd; pfd[n].events = POLLOUT; owner[n] = k; which[n++] = 2; }
    }
    int r = poll(pfd, (nfds_t)n, wait);
    if (r < 0 && errno != EINTR) _exit(1);
    if (r <= 0) continue;
    for (int i = 2; i < n; i++) {
      if (!pfd[i].revents) continue;
      struct child *k = owner[i];
      if (!k->used) continue;
      if (which[i] == 2) { if (k->in_fd == pfd[i].fd) { if (pfd[i].revents & POLLOUT) write_in(k); else close_in(k); } }
      else if (k->fd[which[i]] == pfd[i].fd) read_out(k, which[i]);
    }
    if (pfd[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
      reap();
    }
    if (pfd[0].revents) read_ctl();
  }
}
