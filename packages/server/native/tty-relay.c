/* libc: musl */
/*
 * tty-relay: runs `crun exec --tty --console-socket` and relays the PTY it receives.
 *
 * usage: tty-relay <sockpath> <pidfile> <cols> <rows> -- <crun argv...>
 *   The crun argv must hold `exec --tty --console-socket <sockpath> --pid-file <pidfile>`.
 *   fd 0: bytes for the PTY (keyboard)    fd 1: PTY output    fd 2: diagnostics, crun's errors
 *   fd 3 (in):  control lines "r <cols> <rows>\n" (resize) and "k <signo>\n" (signal the
 *               process); EOF hangs the terminal up (the session gets SIGHUP).
 *   fd 4 (out): "pid <in-sandbox pid> <host pid>\n" once running, then at the very end,
 *               after all output: "exit <code>\n" or "signal <signo>\n".
 * crun exec reports a signal death as 128+n. To tell that from `exit 128+n`, the relay
 * listens to the kernel's proc connector (needs CAP_NET_ADMIN) for the exit of the host
 * pid; without it, codes 129..192 are read as signals.
 * Output is copied with non-blocking writes and one buffer per direction: when the reader
 * of fd 1 stops, the relay stops reading the PTY and the process blocks. Never unbounded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CTL = 3, STATUS = 4, BUFSZ = 65536 };
#define EV_OFF (NLMSG_HDRLEN + offsetof(struct cn_msg, data)) /* proc_event in a message */

static void die(const char *what) {
  fprintf(stderr, "tty-relay: %s: %s\n", what, strerror(errno));
  exit(125);
}

/* Blocking full write; retries EINTR, partial writes and EAGAIN. */
static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EAGAIN) { poll(&(struct pollfd){ .fd = fd, .events = POLLOUT }, 1, -1); continue; }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

static void status(const char *fmt, ...) {
  char b[96];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  write_all(STATUS, b, (size_t)n);
}

static int cn_ctl(int s, enum proc_cn_mcast_op op) {
  char buf[NLMSG_SPACE(sizeof(struct cn_msg) + sizeof op)] __attribute__((aligned(8))) = { 0 };
  struct nlmsghdr *nl = (struct nlmsghdr *)buf;
  struct cn_msg *cn = NLMSG_DATA(nl);
  nl->nlmsg_len = NLMSG_LENGTH(sizeof *cn + sizeof op);
  nl->nlmsg_type = NLMSG_DONE;
  cn->id.idx = CN_IDX_PROC, cn->id.val = CN_VAL_PROC, cn->len = sizeof op;
  memcpy(cn->data, &op, sizeof op);
  return send(s, buf, nl->nlmsg_len, 0) < 0 ? -1 : 0;
}

/* Kernel-side filter: keep only exit events, of `pid` when pid != 0. */
static void cn_filter(int s, pid_t pid) {
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, EV_OFF + offsetof(struct proc_event, what)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(PROC_EVENT_EXIT), 0, 3),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, EV_OFF + offsetof(struct proc_event, event_data.exit.process_pid)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl((uint32_t)pid), 0, pid ? 1 : 0),
    BPF_STMT(BPF_RET | BPF_K, 0xffff),
    BPF_STMT(BPF_RET | BPF_K, 0),
  };
  struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
  setsockopt(s, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
}

static int cn_open(void) {
  int s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR);
  struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC };
  if (s < 0) return -1;
  setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &(int){ 1 << 20 }, sizeof(int)); /* room until filtered */
  cn_filter(s, 0);
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || cn_ctl(s, PROC_CN_MCAST_LISTEN) < 0) {
    close(s);
    return -1;
  }
  return s;
}

/* Reads queued exit events; stores the wait status of `pid`'s exit in *st. */
static void cn_read(int s, pid_t pid, int *st) {
  char buf[4096] __attribute__((aligned(8)));
  ssize_t n;
  while ((n = recv(s, buf, sizeof buf, 0)) > 0 || (n < 0 && (errno == EINTR || errno == ENOBUFS))) {
    struct proc_event ev; /* at offset 36: copy out, it needs 8-byte alignment */
    if (n <= 0 || (size_t)n < EV_OFF + sizeof ev) continue;
    memcpy(&ev, buf + EV_OFF, sizeof ev);
    if (pid > 0 && ev.what == PROC_EVENT_EXIT && ev.event_data.exit.process_pid == (__kernel_pid_t)pid &&
        ev.event_data.exit.process_tgid == (__kernel_pid_t)pid)
      *st = (int)ev.event_data.exit.exit_code;
  }
}

static long read_num(const char *path, const char *key) {
  char b[4096], *p = b;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, b, sizeof b - 1);
  close(fd);
  if (n <= 0) return -1;
  b[n] = 0;
  if (key) { /* last number on the `key` line, e.g. NSpid: 812 1 */
    if (!(p = strstr(b, key))) return -1;
    char *end = strchr(p, '\n');
    if (end) *end = 0;
    p = strrchr(p, '\t') ? strrchr(p, '\t') + 1 : p + strlen(key);
  }
  long v = strtol(p, NULL, 10);
  return v > 0 ? v : -1;
}

static int recv_fd(int conn) {
  char data[64], ctl[CMSG_SPACE(sizeof(int))] __attribute__((aligned(8)));
  struct iovec iov = { data, sizeof data };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl };
  ssize_t n;
  while ((n = recvmsg(conn, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {}
  struct cmsghdr *c = n < 0 ? NULL : CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

static void control(char *line, int pidfd, int master) {
  unsigned short cols, rows;
  int sig;
  if (sscanf(line, "r %hu %hu", &cols, &rows) == 2 && master >= 0)
    ioctl(master, TIOCSWINSZ, &(struct winsize){ .ws_row = rows, .ws_col = cols });
  else if (sscanf(line, "k %d", &sig) == 1 && pidfd >= 0)
    syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

int main(int argc, char **argv) {
  if (argc < 7 || strcmp(argv[5], "--")) {
    fprintf(stderr, "usage: tty-relay <sockpath> <pidfile> <cols> <rows> -- <crun argv...>\n");
    return 125;
  }
  struct winsize ws = { .ws_col = (unsigned short)atoi(argv[3]), .ws_row = (unsigned short)atoi(argv[4]) };
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (strlen(argv[1]) >= sizeof sa.sun_path) { errno = ENAMETOOLONG; die("socket path"); }
  strcpy(sa.sun_path, argv[1]);
  signal(SIGPIPE, SIG_IGN);
  int ctl_open = fcntl(CTL, F_SETFD, FD_CLOEXEC) == 0;
  fcntl(STATUS, F_SETFD, FD_CLOEXEC);
  int cn = cn_open(), exit_st = -1, detached = 0;
  for (int i = 6; i < argc; i++) detached |= !strcmp(argv[i], "--detach"); /* runc: exec returns at once */
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 1) < 0) die("console socket");

  pid_t crun = fork();
  if (crun < 0) die("fork");
  if (crun == 0) { /* crun: stdin /dev/null, stdout to our stderr, SIGPIPE default again */
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    signal(SIGPIPE, SIG_DFL);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(2, 1) < 0) _exit(125);
    execvp(argv[6], argv + 6);
    fprintf(stderr, "tty-relay: exec %s: %s\n", argv[6], strerror(errno));
    _exit(127);
  }
  int crun_fd = (int)syscall(SYS_pidfd_open, crun, 0), master = -1, pidfd = -1, wst = 0;
  pid_t hostpid = 0;
  if (crun_fd < 0) die("pidfd_open");

  /* Wait for the PTY master (or for crun to fail first). */
  struct pollfd w[2] = { { .fd = ls, .events = POLLIN }, { .fd = crun_fd, .events = POLLIN } };
  while (poll(w, 2, -1) < 0 && errno == EINTR) {}
  if (w[0].revents & POLLIN) {
    int conn = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    master = conn < 0 ? -1 : recv_fd(conn);
    if (conn >= 0) close(conn);
  }
  close(ls);
  unlink(argv[1]);
  if (master >= 0) {
    ioctl(master, TIOCSWINSZ, &ws); /* as early as possible: before the process reads it */
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    /* crun writes the pid file just before it execs the process; absent = exec failed. */
    struct timespec tick = { 0, 200000 };
    for (int i = 0, gone = 0; i < 50000 && hostpid <= 0 && !gone; i++) {
      gone = ppoll(&w[1], 1, i ? &tick : &(struct timespec){ 0, 0 }, NULL) > 0; /* crun exited: file is final */
      hostpid = (pid_t)read_num(argv[2], NULL);
    }
    unlink(argv[2]);
  }
  if (hostpid > 0) {
    pidfd = (int)syscall(SYS_pidfd_open, hostpid, 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", hostpid);
    long nspid = pidfd >= 0 ? read_num(path, "NSpid:") : -1;
    if (cn >= 0) cn_filter(cn, hostpid);
    status("pid %ld %d\n", nspid > 0 ? nspid : 0, hostpid);
  }

  /* Relay until crun has exited. */
  char in[BUFSZ], out[BUFSZ], ctl[256];
  size_t in_len = 0, in_off = 0, out_len = 0, out_off = 0, ctl_len = 0;
  int in_open = 1, done = master < 0;
  fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
  while (!done) {
    struct pollfd p[7] = {
      { .fd = in_open && !in_len && master >= 0 ? 0 : -1, .events = POLLIN },
      { .fd = master >= 0 && (!out_len || in_len) ? master : -1, .events = (short)((out_len ? 0 : POLLIN) | (in_len ? POLLOUT : 0)) },
      { .fd = out_len ? 1 : -1, .events = POLLOUT },
      { .fd = ctl_open ? CTL : -1, .events = POLLIN },
      { .fd = crun_fd, .events = POLLIN },
      { .fd = cn, .events = POLLIN },
      { .fd = detached ? pidfd : -1, .events = POLLIN }, /* the process itself exited */
    };
    if (poll(p, 7, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (p[3].revents) { /* before input: a resize written first applies first */
      ssize_t n = read(CTL, ctl + ctl_len, sizeof ctl - 1 - ctl_len);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) { /* owner gone: hang up */
        ctl_open = 0, in_open = 0;
        if (master >= 0) close(master), master = -1;
      }
      for (ctl_len += n > 0 ? (size_t)n : 0; ctl_len;) {
        char *nl = memchr(ctl, '\n', ctl_len);
        if (!nl) { if (ctl_len == sizeof ctl - 1) ctl_len = 0; break; } /* overlong: drop */
        *nl = 0;
        control(ctl, pidfd, master);
        ctl_len -= (size_t)(nl + 1 - ctl);
        memmove(ctl, nl + 1, ctl_len);
      }
    }
    if (p[0].revents) {
      ssize_t n = read(0, in, sizeof in);
      if (n > 0) in_len = (size_t)n, in_off = 0;
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) in_open = 0;
    }
    if (in_len && master >= 0) { /* to the PTY; EIO: nobody reads it any more */
      ssize_t n = write(master, in + in_off, in_len - in_off);
      if (n > 0) in_off += (size_t)n;
      if ((n < 0 && errno != EINTR && errno != EAGAIN) || in_off == in_len) in_len = 0;
    }
    if (!out_len && master >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(master, out, sizeof out);
      if (n > 0) out_len = (size_t)n, out_off = 0;
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) close(master), master = -1; /* EIO: slave gone */
    }
    if (out_len) { /* opportunistic write: keeps echo latency low */
      ssize_t n = write(1, out + out_off, out_len - out_off);
      if (n > 0) out_off += (size_t)n;
      if (out_off == out_len || (n < 0 && errno == EPIPE)) out_len = 0;
      if (n < 0 && errno == EPIPE && master >= 0) close(master), master = -1; /* reader gone: hang up */
    }
    if (p[5].revents) cn_read(cn, hostpid, &exit_st);
    if (p[4].revents) { /* the runtime exited: done, unless it only detached from a live process */
      while (waitpid(crun, &wst, 0) < 0 && errno == EINTR) {}
      close(crun_fd), crun_fd = -1, crun = 0;
      done = !detached || pidfd < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0;
    }
    if (p[6].revents) done = 1;
  }

  /* crun has exited: deliver what is left (blocking writes), waiting up to 50 ms for bytes
     in flight; a background process that keeps writing is cut off after 1024 reads. */
  while (crun > 0 && waitpid(crun, &wst, 0) < 0 && errno == EINTR) {}
  fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
  if (out_len && write_all(1, out + out_off, out_len - out_off) < 0 && master >= 0) close(master), master = -1;
  for (int i = 0; master >= 0 && i < 1024 && poll(&(struct pollfd){ .fd = master, .events = POLLIN }, 1, 50) > 0; i++) {
    ssize_t n = read(master, out, sizeof out);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0 || write_all(1, out, (size_t)n) < 0) break;
  }
  if (cn >= 0) cn_read(cn, hostpid, &exit_st), cn_ctl(cn, PROC_CN_MCAST_IGNORE);

  if (detached && hostpid > 0) { /* the runtime's status says nothing of the process: the kernel's does */
    if (exit_st >= 0 && WIFSIGNALED(exit_st)) status("signal %d\n", WTERMSIG(exit_st));
    else status("exit %d\n", exit_st >= 0 ? WEXITSTATUS(exit_st) : 255);
    return 0;
  }
  int code = WIFEXITED(wst) ? WEXITSTATUS(wst) : 255;
  if (WIFSIGNALED(wst)) fprintf(stderr, "tty-relay: crun killed by signal %d\n", WTERMSIG(wst));
  if (code > 128 && exit_st >= 0 && WIFSIGNALED(exit_st) && 128 + WTERMSIG(exit_st) == code)
    status("signal %d\n", WTERMSIG(exit_st));
  else if (code > 128 && code <= 128 + 64 && hostpid > 0 && (exit_st < 0 || WIFSIGNALED(exit_st)))
    status("signal %d\n", code - 128); /* no exit event seen: crun's 128+n convention */
  else
    status("exit %d\n", code);
  return 0;
}
