/* libc: musl */
/*
 * exec-agent: runs commands inside one sandbox on behalf of the server.
 *
 * Started once per sandbox by `crun exec --detach` (so it holds the sandbox's namespaces,
 * cgroup, user, capabilities, seccomp filter and no_new_privs, which every command it
 * starts inherits), with fd 0 and fd 1 connected to the server. It then answers many
 * exec requests without a runtime process per command: a fork + execve inside the sandbox
 * instead of a `crun exec` on the host.
 *
 * With `--init` it is the sandbox's PID 1 instead (started by `crun run`, the channel on its
 * stdio): it then also reaps every orphan, and when the channel closes (the server went
 * away) it stays, as a plain init; the next server starts a second agent with `crun exec`.
 * As init it first makes /dev/shm (mode 1777) on the sandbox's /dev tmpfs: a directory there
 * rather than a tmpfs of its own, since every file system instance alive costs every memory
 * cgroup of the host a shrinker slot (see bundle/oci-config.ts).
 *
 * The control fds are moved above 2 with close-on-exec and 0..2 become /dev/null, so no
 * command ever holds the channel. EOF on the channel ends a non-init agent once the
 * commands it runs ended (it reads and drops their output meanwhile, so none dies of a
 * broken pipe); background commands go on, reparented to the sandbox's init.
 *
 * Wire format, both directions: frames of
 *   u32 len (bytes after this field, little-endian) | u8 type | u32 id | payload
 * server -> agent
 *   EXEC (1): u32 timeoutMs (0 = none) | u32 maxOutputBytes | u32 flags | u32 uid | u32 gid
 *             | u32 argc | u32 envc | cwd\0 argv[0]\0 .. env[0]\0 .. [user\0]
 *             flags: 1 = background (stdio on /dev/null, answered by STARTED);
 *             2 = streamed: STARTED at once, output forwarded without a cap but at most
 *                 maxOutputBytes (the window) unacknowledged: past it the agent stops
 *                 reading the command's pipes, so a fast producer is slowed, not buffered;
 *             4 = stdin: the command's stdin is a pipe fed by STDIN frames (else /dev/null);
 *             8 = user by name: uid/gid are ignored; the trailing string (a name or a
 *                 numeric uid) is looked up in the sandbox's /etc/passwd by the child;
 *             16 = cwd is a default: when the user cannot enter it, its home, else /.
 *             32 = simple: argv is `/bin/sh -c command word..`, where the words are the
 *                 whole of a command dash would run as they are (no expansion, quoting,
 *                 redirection, assignment or builtin: the server checks). When /bin/sh is
 *                 dash, the first word is looked up in PATH and run with the words as
 *                 argv and PWD exported, as dash would run it, one exec fewer; anything
 *                 off that path (not dash, not found, not executable, no PATH, a relative
 *                 PATH entry) runs `/bin/sh -c command` instead, which then says why.
 *                 An older agent ignores the flag: the words are sh's unused $0, $1, ..
 *             The command runs as uid:gid with no supplementary groups; without HOME in
 *             env it gets the home of uid from the sandbox's /etc/passwd (else /).
 *   ACK (2): u32 bytes: the server consumed that much of a streamed command's output.
 *   STDIN (3): raw bytes for the command's stdin, appended in order. The server keeps at
 *             most a window of them unacknowledged, so the agent's buffer stays bounded.
 *   STDIN_CLOSE (4): close the command's stdin once what is buffered was written.
 *   SIGNAL (5): u32 signal, sent to the command's process group (and the command).
 * agent -> server
 *   HELLO (0, id 0): u32 protocol version, sent once at start.
 *   STARTED (1): u32 pid (in the sandbox's pid namespace). Last frame of a background exec;
 *             for a foreground one it is sent only when the command has neither printed
 *             nor ended STARTED_DELAY_MS after its start (any frame says it started).
 *   STDOUT (2) / STDERR (3): raw bytes; each stream stops at maxOutputBytes (rest drained).
 *   EXIT (4): i32 exitCode (code, 128 + signal, or 124 on timeout) | u32 flags
 *             (1 = output truncated, 2 = timed out). Last frame of a foreground exec.
 *   FAILED (5): i32 exitCode (126, or 127 when not found) | message. Nothing was started.
 *   STDIN_ACK (6): u32 bytes of STDIN written into the command's pipe.
 *   STDIN_GONE (7): the command's stdin is closed (it exited or closed it); later STDIN
 *             frames are dropped.
 * A foreground command is done when its process exits; output still arriving from its
 * background children is collected for at most GRACE_MS after that. On timeout the
 * process group and every descendant still linked by parent pid get SIGKILL.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "frames.h"
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#include "agent-files.h"

#define PROTOCOL_VERSION 1
#define MAX_FRAME (16u << 20)
#define MAX_EXECS 256
#define GRACE_MS 200
/* A foreground command's STARTED waits this long: most commands are done by then, and their
 * EXIT says it (one wake-up of the server instead of two). */
#define STARTED_DELAY_MS 2
#define CHUNK 65536

enum { T_EXEC = 1, T_ACK = 2, T_STDIN = 3, T_STDIN_CLOSE = 4, T_SIGNAL = 5 };
enum { R_HELLO = 0, R_STARTED = 1, R_STDOUT = 2, R_STDERR = 3, R_EXIT = 4, R_FAILED = 5, R_STDIN_ACK = 6,
       R_STDIN_GONE = 7 };
enum { F_BACKGROUND = 1, F_STREAM = 2, F_STDIN = 4, F_USER_NAME = 8, F_CWD_FALLBACK = 16, F_SIMPLE = 32 };
/* Most STDIN bytes buffered per command (the server keeps well below it). */
#define MAX_STDIN_BUF (4u << 20)

struct exec {
  int used;
  uint32_t id;
  pid_t pid;
  int fd[2];        /* stdout, stderr read ends; -1 when closed */
  uint32_t len[2];  /* bytes forwarded per stream */
  uint32_t max_out;
  int truncated, timed_out, exited, status;
  int started_sent;      /* STARTED went out (any STDOUT/STDERR/EXIT also says it started) */
  int64_t started_due;   /* when to send STARTED if nothing else was sent by then */
  int64_t deadline_ms;  /* timeout; 0 = none */
  int64_t grace_ms;     /* after exit: stop waiting for output; 0 = not yet */
  int stream;           /* streamed: no cap, flow-controlled by window/unacked */
  uint32_t window;      /* streamed: most output bytes sent and not yet acknowledged */
  uint64_t unacked;
  int in_fd;            /* stdin pipe's write end; -1 when none or closed */
  unsigned char *in_buf; /* STDIN bytes not yet written into the pipe */
  size_t in_len, in_cap;
  int in_close;         /* close stdin once in_buf is written */
  int detached;         /* streamed, EXIT sent: what its background children still print is dropped */
};

static int ctl_in = -1, ctl_out = -1;
static int init_mode;
static struct exec execs[MAX_EXECS];

static void close_stdin(struct exec *e, int tell);

/*
 * The server went away (or spoke nonsense): a plain agent ends once its commands did, an
 * init stays as an init. Streamed commands go on; their output is read and dropped (nobody can acknowledge it),
 * and their stdin is closed.
 */
static int execs_in_use(void) {
  for (int i = 0; i < MAX_EXECS; i++) if (execs[i].used) return 1;
  return 0;
}

static void channel_closed(void) {
  /* A plain agent stays until its commands ended (their output read and dropped), so a
   * background command whose server went away is not killed by a broken pipe. */
  if (!init_mode && !execs_in_use()) _exit(0);
  if (ctl_in >= 0) close(ctl_in);
  if (ctl_out >= 0) close(ctl_out);
  ctl_in = ctl_out = -1;
  for (int i = 0; i < MAX_EXECS; i++) if (execs[i].used) close_stdin(&execs[i], 0);
}

/* One frame to the server (see frames.h); a broken channel is channel_closed(). */
static void send_frame(int type, uint32_t id, const void *a, size_t alen, const void *b, size_t blen) {
  if (ctl_out < 0) return;
  struct iovec parts[2] = { { (void *)a, alen }, { (void *)b, blen } };
  if (frame_write(ctl_out, type, id, parts, 2) < 0) channel_closed();
}

static void send_u32(int type, uint32_t id, uint32_t v) {
  unsigned char p[4]; put32(p, v);
  send_frame(type, id, p, 4, NULL, 0);
}

static void send_exit(struct exec *e) {
  int code;
  if (e->timed_out) code = 124;
  else if (WIFSIGNALED(e->status)) code = 128 + WTERMSIG(e->status);
  else code = WEXITSTATUS(e->status);
  unsigned char p[8]; put32(p, (uint32_t)code); put32(p + 4, (e->truncated ? 1u : 0u) | (e->timed_out ? 2u : 0u));
  send_frame(R_EXIT, e->id, p, 8, NULL, 0);
}

static void send_failed(uint32_t id, int code, const char *what, int err) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  unsigned char p[4]; put32(p, (uint32_t)code);
  send_frame(R_FAILED, id, p, 4, msg, n < 0 ? 0 : (size_t)n);
}

static void close_fd(struct exec *e, int i) {
  if (e->fd[i] >= 0) { close(e->fd[i]); e->fd[i] = -1; }
}

/* Closes e's stdin pipe and drops what was buffered for it; `tell`: say so to the server. */
static void close_stdin(struct exec *e, int tell) {
  if (e->in_fd < 0) return;
  close(e->in_fd);
  e->in_fd = -1;
  free(e->in_buf);
  e->in_buf = NULL; e->in_len = e->in_cap = 0;
  if (tell) send_frame(R_STDIN_GONE, e->id, NULL, 0, NULL, 0);
}

/* Writes what is buffered for e's stdin (as much as the pipe takes); acknowledges it. */
static void flush_stdin(struct exec *e) {
  size_t done = 0;
  while (e->in_fd >= 0 && done < e->in_len) {
    ssize_t w = write(e->in_fd, e->in_buf + done, e->in_len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) break;
    if (w <= 0) { close_stdin(e, 1); return; } /* EPIPE: the command closed its stdin */
    done += (size_t)w;
  }
  if (e->in_fd < 0) return;
  if (done) {
    memmove(e->in_buf, e->in_buf + done, e->in_len - done);
    e->in_len -= done;
    send_u32(R_STDIN_ACK, e->id, (uint32_t)done);
  }
  if (e->in_len == 0 && e->in_close) close_stdin(e, 1);
}

static struct exec *find_id(uint32_t id) {
  for (int i = 0; i < MAX_EXECS; i++) if (execs[i].used && execs[i].id == id) return &execs[i];
  return NULL;
}

/* STDIN: appends to the command's buffer and writes what the pipe takes. */
static void take_stdin(uint32_t id, const unsigned char *p, uint32_t n) {
  struct exec *e = find_id(id);
  if (!e || e->in_fd < 0 || e->in_close) return;
  if (e->in_len + n > MAX_STDIN_BUF) { close_stdin(e, 1); return; } /* not our server's way */
  if (e->in_len + n > e->in_cap) {
    size_t cap = e->in_cap ? e->in_cap : CHUNK;
    while (cap < e->in_len + n) cap *= 2;
    unsigned char *nb = realloc(e->in_buf, cap);
    if (!nb) { close_stdin(e, 1); return; }
    e->in_buf = nb; e->in_cap = cap;
  }
  memcpy(e->in_buf + e->in_len, p, n);
  e->in_len += n;
  flush_stdin(e);
}

static void finish_if_done(struct exec *e) {
  if (!e->used || !e->exited || e->fd[0] >= 0 || e->fd[1] >= 0) return;
  close_stdin(e, 0);
  if (!e->detached) send_exit(e);
  e->used = 0;
}

/* Parent pid of `pid` from /proc/<pid>/stat, or 0. */
static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *rp = strrchr(buf, ')');
  if (!rp) return 0;
  int ppid = 0; char state;
  if (sscanf(rp + 2, "%c %d", &state, &ppid) != 2) return 0;
  return ppid;
}

/*
 * SIGKILL to `root`, its process group and every process descending from it. Each one is
 * stopped when found, so none can fork or be reparented (by its parent dying) before the
 * walk is complete; then all of them are killed.
 */
static void kill_tree(pid_t root) {
  enum { MAXP = 4096 };
  static pid_t victims[MAXP];
  int nv = 0;
  victims[nv++] = root;
  kill(-root, SIGSTOP);
  kill(root, SIGSTOP);
  for (int round = 0, grew = 1; grew && round < 64; round++) {
    grew = 0;
    DIR *d = opendir("/proc");
    if (!d) break;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      pid_t p = (pid_t)atoi(de->d_name);
      if (p <= 1 || p == getpid()) continue;
      int known = 0;
      for (int i = 0; i < nv; i++) if (victims[i] == p) { known = 1; break; }
      if (known) continue;
      pid_t pp = parent_of(p);
      for (int i = 0; i < nv; i++) {
        if (victims[i] == pp && nv < MAXP) { victims[nv++] = p; kill(p, SIGSTOP); grew = 1; break; }
      }
    }
    closedir(d);
  }
  kill(-root, SIGKILL);
  for (int i = 0; i < nv; i++) kill(victims[i], SIGKILL);
}

static struct exec *find_pid(pid_t pid) {
  for (int i = 0; i < MAX_EXECS; i++) if (execs[i].used && execs[i].pid == pid) return &execs[i];
  return NULL;
}

/*
 * The sandbox's /etc/passwd entry of `name` (a user name, or a numeric uid when `name` is
 * NULL... see below): with name != NULL, matched by name, or by uid when name is all digits;
 * with name == NULL, matched by `*uid`. Fills uid, gid and "HOME=<dir>" (home may be NULL).
 * Returns 0 when found. Runs in the child.
 */
static int passwd_entry(const char *name, uid_t *uid, gid_t *gid, char *home, size_t cap) {
  int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  static char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  int numeric = name && *name && strspn(name, "0123456789") == strlen(name);
  uid_t want = numeric ? (uid_t)strtoul(name, NULL, 10) : *uid;
  for (char *line = buf; line && *line; ) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    /* name:pw:uid:gid:gecos:home:shell */
    char *f[7] = {0}; int k = 0;
    for (char *c = line; k < 7; k++) { f[k] = c; c = strchr(c, ':'); if (!c) { k++; break; } *c++ = 0; }
    if (k >= 6 && f[2] && f[3] && f[5] && *f[2]) {
      int match = name && !numeric ? strcmp(f[0], name) == 0 : (uid_t)strtoul(f[2], NULL, 10) == want;
      if (match) {
        *uid = (uid_t)strtoul(f[2], NULL, 10);
        *gid = (gid_t)strtoul(f[3], NULL, 10);
        if (home && f[5][0] == '/') snprintf(home, cap, "HOME=%s", f[5]);
        return 0;
      }
    }
    line = next;
  }
  return -1;
}

/* "HOME=<dir>" for uid from the sandbox's /etc/passwd, else "HOME=/". Runs in the child. */
static void home_of(uid_t uid, char *out, size_t cap) {
  snprintf(out, cap, "HOME=/");
  gid_t gid;
  passwd_entry(NULL, &uid, &gid, out, cap);
}

/* True when /bin/sh is dash (a link whose target's last name is `dash`). */
static int sh_is_dash(void) {
  char t[4096];
  ssize_t n = readlink("/bin/sh", t, sizeof t - 1);
  if (n <= 0) return 0;
  t[n] = 0;
  const char *b = strrchr(t, '/');
  return strcmp(b ? b + 1 : t, "dash") == 0;
}

/*
 * Runs words[0] as dash runs a simple command (child only; returns when it did not exec):
 * a name without '/' is looked up in each absolute PATH entry in order, PWD is exported
 * the way dash sets it (the inherited PWD when it names the working directory, else
 * getcwd). `pwd` is a buffer for "PWD=..", `slot` the envp entry free for it.
 */
static void exec_simple(char **words, char **envp, char **slot, char *pwd, size_t cap) {
  if (!sh_is_dash()) return;
  const char *path = NULL, *old = NULL;
  char **oldp = NULL;
  for (char **e = envp; *e; e++) {
    if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
    else if (strncmp(*e, "PWD=", 4) == 0) { old = *e + 4; oldp = e; }
  }
  if (!path || !*path) return;
  struct stat a, b;
  int keep = old && old[0] == '/' && stat(".", &a) == 0 && stat(old, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
  if (!keep) {
    memcpy(pwd, "PWD=", 4);
    if (!getcwd(pwd + 4, cap - 4)) return;
    if (oldp) *oldp = pwd; else { *slot = pwd; slot[1] = NULL; }
  }
  if (strchr(words[0], '/')) { execve(words[0], words, envp); return; }
  char file[4096];
  size_t nl = strlen(words[0]);
  for (const char *p = path;;) {
    const char *end = strchrnul(p, ':');
    size_t dl = (size_t)(end - p);
    if (dl == 0 || p[0] != '/' || dl + 1 + nl >= sizeof file) return; /* dash's own rules then */
    memcpy(file, p, dl); file[dl] = '/'; memcpy(file + dl + 1, words[0], nl + 1);
    execve(file, words, envp);
    if (errno != ENOENT && errno != ENOTDIR) return;
    if (!*end) return;
    p = end + 1;
  }
}

/* The default working dir may be closed to another user: its home, else /. 0: neither. Runs in the child. */
static int cwd_fallback(uint32_t flags, uid_t uid) {
  if (!(flags & F_CWD_FALLBACK)) return 0;
  int en = errno;
  char h[4096 + 8];
  home_of(uid, h, sizeof h);
  if (chdir(h + 5) == 0 || chdir("/") == 0) return 1;
  errno = en;
  return 0;
}

/*
 * Starts one command. The child reports a failed chdir/execve through a close-on-exec
 * pipe, so the parent knows before answering whether anything runs.
 */
static void start_exec(uint32_t id, const unsigned char *p, uint32_t n) {
  if (n < 28) { send_failed(id, 126, "bad request", EINVAL); return; }
  uint32_t timeout_ms = get32(p), max_out = get32(p + 4), flags = get32(p + 8);
  uid_t uid = get32(p + 12); gid_t gid = get32(p + 16);
  uint32_t argc = get32(p + 20), envc = get32(p + 24);
  const char *s = (const char *)p + 28, *end = (const char *)p + n;
  if (argc < 1 || argc > 65536 || envc > 65536) { send_failed(id, 126, "bad request", EINVAL); return; }
  int by_name = (flags & F_USER_NAME) != 0;
  size_t total = 1 + (size_t)argc + envc + (by_name ? 1 : 0);
  char **strs = calloc(total + 4, sizeof(char *));
  if (!strs) { send_failed(id, 126, "agent", ENOMEM); return; }
  for (size_t i = 0; i < total; i++) {
    const char *z = memchr(s, 0, (size_t)(end - s));
    if (!z) { free(strs); send_failed(id, 126, "bad request", EINVAL); return; }
    strs[i] = (char *)s; s = z + 1;
  }
  const char *cwd = strs[0];
  const char *user_name = by_name ? strs[1 + argc + envc] : NULL;
  char **argv = &strs[1];
  char **envp = &strs[1 + argc];
  /* argv and envp must each end in NULL: shift env one slot to make room. */
  memmove(envp + 1, envp, envc * sizeof(char *));
  envp[0] = NULL; envp += 1; envp[envc] = NULL;
  int has_home = 0;
  for (uint32_t i = 0; i < envc; i++) if (strncmp(envp[i], "HOME=", 5) == 0) { has_home = 1; break; }
  int background = (flags & F_BACKGROUND) && !(flags & F_STREAM);
  int want_stdin = !background && (flags & F_STDIN);

  struct exec *e = NULL;
  if (!background) {
    for (int i = 0; i < MAX_EXECS; i++) if (!execs[i].used) { e = &execs[i]; break; }
    if (!e) { free(strs); send_failed(id, 126, "agent", EAGAIN); return; }
  }
  int out[2] = {-1, -1}, err[2] = {-1, -1}, rep[2] = {-1, -1}, in[2] = {-1, -1};
  if (pipe2(rep, O_CLOEXEC) < 0 || (!background && (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0))
      || (want_stdin && pipe2(in, O_CLOEXEC) < 0)) {
    int en = errno;
    for (int i = 0; i < 2; i++) {
      if (rep[i] >= 0) close(rep[i]);
      if (out[i] >= 0) close(out[i]);
      if (err[i] >= 0) close(err[i]);
      if (in[i] >= 0) close(in[i]);
    }
    free(strs); send_failed(id, 126, "pipe", en); return;
  }
  pid_t pid = fork();
  if (pid < 0) {
    int en = errno;
    close(rep[0]); close(rep[1]);
    if (!background) { close(out[0]); close(out[1]); close(err[0]); close(err[1]); }
    if (want_stdin) { close(in[0]); close(in[1]); }
    free(strs); send_failed(id, 126, "fork", en); return;
  }
  if (pid == 0) {
    sigset_t none; sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setsid();
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    dup2(want_stdin ? in[0] : null, 0);
    dup2(background ? null : out[1], 1);
    dup2(background ? null : err[1], 2);
    int stage = 0, en = 0;
    /* Like `crun exec`: HOME from the user's passwd entry unless the env sets it. */
    char home[4096 + 8];
    if (user_name && passwd_entry(user_name, &uid, &gid, NULL, 0) < 0) {
      /* A numeric uid with no entry is still a uid (its group: the same number). */
      if (*user_name && strspn(user_name, "0123456789") == strlen(user_name)) uid = gid = (uid_t)strtoul(user_name, NULL, 10);
      else { en = ENOENT; stage = 4; }
    }
    if (!has_home) { home_of(uid, home, sizeof home); envp[envc] = home; envp[envc + 1] = NULL; }
    if (stage) { /* unknown user */ }
    else if ((getuid() != uid || getgid() != gid) && (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)) { en = errno; stage = 3; }
    else if (chdir(cwd) < 0 && !cwd_fallback(flags, uid)) { en = errno; stage = 1; }
    else {
      if ((flags & F_SIMPLE) && argc > 3) {
        static char pwd[4096 + 8];
        char **slot = envp; while (*slot) slot++;
        exec_simple(argv + 3, envp, slot, pwd, sizeof pwd);
        *slot = NULL;
        argv[3] = NULL; /* sh gets no $0 .. */
      }
      execve(argv[0], argv, envp); en = errno; stage = 2;
    }
    int msg[2] = {stage, en};
    if (write(rep[1], msg, sizeof msg) < 0) { /* nothing to do */ }
    _exit(127);
  }
  close(rep[1]);
  if (!background) { close(out[1]); close(err[1]); }
  if (want_stdin) close(in[0]);
  int msg[2]; ssize_t r;
  do r = read(rep[0], msg, sizeof msg); while (r < 0 && errno == EINTR);
  close(rep[0]);
  if (r == (ssize_t)sizeof msg) {
    /* Not started: reap it here so the SIGCHLD path does not see an unknown child. */
    waitpid(pid, NULL, 0);
    if (!background) { close(out[0]); close(err[0]); }
    if (want_stdin) close(in[1]);
    free(strs);
    send_failed(id, msg[1] == ENOENT && msg[0] == 2 ? 127 : 126,
                msg[0] == 1 ? "chdir" : msg[0] == 3 ? "setuid" : msg[0] == 4 ? "unknown user" : "execve", msg[1]);
    return;
  }
  free(strs);
  if (background) { send_u32(R_STARTED, id, (uint32_t)pid); return; } /* reaped silently when it ends */
  memset(e, 0, sizeof *e);
  e->used = 1; e->id = id; e->pid = pid; e->max_out = max_out;
  e->fd[0] = out[0]; e->fd[1] = err[0];
  fcntl(out[0], F_SETFL, O_NONBLOCK); fcntl(err[0], F_SETFL, O_NONBLOCK);
  e->deadline_ms = timeout_ms ? now_ms() + timeout_ms : 0;
  e->started_due = now_ms() + STARTED_DELAY_MS;
  e->in_fd = -1;
  if (want_stdin) { e->in_fd = in[1]; fcntl(in[1], F_SETFL, O_NONBLOCK); }
  if (flags & F_STREAM) {
    e->stream = 1;
    e->window = max_out ? max_out : CHUNK;
    send_u32(R_STARTED, id, (uint32_t)pid); /* the server answers with the pid at once */
    e->started_sent = 1;
  }
}

/* A streamed command may send more output: the server acknowledged enough of it. */
static int may_send(const struct exec *e) {
  return !e->stream || e->detached || ctl_out < 0 || e->unacked < e->window;
}

/* Forwards what stream i of e has (at most `rounds` reads), up to its cap; closes the stream at EOF. */
static void drain(struct exec *e, int i, int rounds) {
  static char buf[CHUNK];
  for (int r = 0; r < rounds && e->fd[i] >= 0; r++) {
    ssize_t n = read(e->fd[i], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { close_fd(e, i); return; }
    if (e->detached) continue;
    if (e->stream) {
      if (ctl_out >= 0) { send_frame(i == 0 ? R_STDOUT : R_STDERR, e->id, buf, (size_t)n, NULL, 0); e->unacked += (uint64_t)n; }
      if (!may_send(e)) return;
      continue;
    }
    uint32_t room = e->max_out > e->len[i] ? e->max_out - e->len[i] : 0;
    uint32_t take = (uint32_t)n < room ? (uint32_t)n : room;
    if (take < (uint32_t)n) e->truncated = 1;
    if (take) { send_frame(i == 0 ? R_STDOUT : R_STDERR, e->id, buf, take, NULL, 0); e->len[i] += take; e->started_sent = 1; }
  }
}

static void reap(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    struct exec *e = find_pid(pid);
    if (!e) continue; /* a background command */
    e->exited = 1; e->status = status;
    e->grace_ms = now_ms() + GRACE_MS;
    close_stdin(e, 1);
  }
}

/* Reads one whole frame from the server into a growing buffer; returns 0 at EOF. */
static unsigned char *inbuf;
static size_t inlen, incap;

static int read_ctl(void) {
  if (incap - inlen < CHUNK) {
    size_t cap = incap ? incap * 2 : 2 * CHUNK;
    unsigned char *nb = realloc(inbuf, cap);
    if (!nb) _exit(1);
    inbuf = nb; incap = cap;
  }
  ssize_t n = read(ctl_in, inbuf + inlen, incap - inlen);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
  if (n <= 0) return 0;
  inlen += (size_t)n;
  while (inlen >= 4 && ctl_in >= 0) {
    uint32_t len = get32(inbuf);
    if (len < 5 || len > MAX_FRAME) return 0; /* not our server */
    if (inlen < 4 + (size_t)len) break;
    uint32_t fid = get32(inbuf + 5);
    const unsigned char *pl = inbuf + 9;
    uint32_t pn = len - 5;
    struct exec *fe;
    switch (inbuf[4]) {
    case T_EXEC: start_exec(fid, pl, pn); break;
    case T_ACK:
      if (pn >= 4 && (fe = find_id(fid)) != NULL) { uint32_t a = get32(pl); fe->unacked = fe->unacked > a ? fe->unacked - a : 0; }
      break;
    case T_STDIN: take_stdin(fid, pl, pn); break;
    case T_STDIN_CLOSE:
      if ((fe = find_id(fid)) != NULL && fe->in_fd >= 0) { fe->in_close = 1; flush_stdin(fe); }
      break;
    case T_SIGNAL:
      if (pn >= 4 && (fe = find_id(fid)) != NULL && !fe->exited) {
        int sig = (int)get32(pl);
        if (sig > 0 && sig < 65) { kill(-fe->pid, sig); kill(fe->pid, sig); }
      }
      break;
    default: break;
    }
    memmove(inbuf, inbuf + 4 + len, inlen - 4 - len);
    inlen -= 4 + len;
  }
  if (incap > 4 * CHUNK && inlen < CHUNK) { /* give back a buffer grown for one big request */
    unsigned char *nb = realloc(inbuf, 2 * CHUNK);
    if (nb) { inbuf = nb; incap = 2 * CHUNK; }
  }
  return 1;
}

/*
 * `hostfds` (gVisor only, run by the server right before a checkpoint, with CAP_SYS_PTRACE to
 * read every process's fds and CAP_KILL): ends every process but PID 1 and itself that holds a
 * file of the host. gVisor shows one as `host:[N]`: the PTY or the stdio `runsc exec` handed
 * a terminal's shell (and whatever it started that kept them), or a second agent's channel
 * after a server restart. runsc saves such a sandbox, but cannot restore it ("no host FD
 * available"). PID 1's own (its stdio, the channel) are given back by the restore. Prints
 * each pid it signalled (again on each pass until it is gone); exits 0 once none is left, 1 if some still hold one after ~3 s.
 */
static int hostfds_main(void) {
  pid_t self = getpid();
  for (int pass = 0; pass < 150; pass++) {
    int found = 0;
    DIR *d = opendir("/proc");
    if (!d) return 2;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char *end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 1 || pid == self) continue;
      char dir[64];
      snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
      DIR *fds = opendir(dir);
      if (!fds) continue; /* gone, or a zombie */
      struct dirent *f;
      int hit = 0;
      while (!hit && (f = readdir(fds)) != NULL) {
        if (f->d_name[0] == '.') continue;
        char target[32];
        ssize_t n = readlinkat(dirfd(fds), f->d_name, target, sizeof target - 1);
        if (n > 0) {
          target[n] = 0;
          hit = strncmp(target, "host:[", 6) == 0;
        }
      }
      closedir(fds);
      if (!hit) continue;
      found++;
      if (kill((pid_t)pid, SIGKILL) == 0) printf("%ld\n", pid); /* again each pass until gone */
    }
    closedir(d);
    if (!found) return 0;
    fflush(stdout);
    usleep(20000);
  }
  return 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "file") == 0) return files_main(argc - 2, argv + 2);
  init_mode = argc > 1 && strcmp(argv[1], "--init") == 0;
  /* Not dumpable: the sandbox's root (no CAP_SYS_PTRACE) can neither ptrace the agent nor
   * open its /proc/<pid>/fd to take the channel. Commands are dumpable again after execve. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc > 1 && strcmp(argv[1], "hostfds") == 0) return hostfds_main();
  if (init_mode && mkdir("/dev/shm", 01777) == 0) chmod("/dev/shm", 01777); /* past the umask */
  ctl_in = fcntl(0, F_DUPFD_CLOEXEC, 3);
  ctl_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (ctl_in < 0 || ctl_out < 0) {
    if (!init_mode) return 1;
    channel_closed(); /* an init without a channel is still an init */
  }
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0); dup2(null, 1); dup2(null, 2);
    if (null > 2) close(null);
  }
  /* Nothing else from the runtime may reach a command. close_range marks every fd from 3 up
   * close-on-exec (the channel's are already); where the kernel lacks it (< 5.11), each fd
   * in /proc/self/fd is. close_range first: opendir's 32 KiB buffer would stay resident in
   * every sandbox's init. */
  DIR *d = syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0 ? NULL : opendir("/proc/self/fd");
  if (d) {
    int dfd = dirfd(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      int fd = atoi(de->d_name);
      if (fd > 2 && fd != ctl_in && fd != ctl_out && fd != dfd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    closedir(d);
  }
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld; sigemptyset(&chld); sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 1;
  fcntl(ctl_in, F_SETFL, O_NONBLOCK);
  send_u32(R_HELLO, 0, PROTOCOL_VERSION);

  struct pollfd pfd[2 + 3 * MAX_EXECS];
  struct exec *owner[2 + 3 * MAX_EXECS];
  int stream[2 + 3 * MAX_EXECS]; /* 0 stdout, 1 stderr, 2 stdin */
  for (;;) {
    int64_t now = now_ms(), wait = -1;
    for (int i = 0; i < MAX_EXECS; i++) {
      struct exec *e = &execs[i];
      if (!e->used) continue;
      if (!e->started_sent && !e->exited) {
        if (e->started_due <= now) { send_u32(R_STARTED, e->id, (uint32_t)e->pid); e->started_sent = 1; }
        else if (wait < 0 || e->started_due - now < wait) wait = e->started_due - now;
      }
      if (e->deadline_ms && !e->exited) {
        if (e->deadline_ms <= now) { e->timed_out = 1; e->deadline_ms = 0; kill_tree(e->pid); }
        else if (wait < 0 || e->deadline_ms - now < wait) wait = e->deadline_ms - now;
      }
      if (e->exited) {
        if (e->grace_ms <= now) {
          /* What the command wrote before it exited is in the pipes already: take all of it
           * (the loop may have been away for longer than the grace), then stop waiting for
           * its background children. */
          drain(e, 0, 32); drain(e, 1, 32); /* 2 MiB: more than a pipe holds */
          /* A streamed command's window may be full: its pipes wait for the server's ACK.
           * Its background children (a server started with `&`) keep their pipes: the
           * command is reported ended, and what they print is read and dropped, so they
           * never die of a broken pipe. A foreground command's pipes are closed. */
          if (!may_send(e)) { /* wait for the ACK */ }
          else if (!e->stream) { close_fd(e, 0); close_fd(e, 1); }
          else if (!e->detached && (e->fd[0] >= 0 || e->fd[1] >= 0)) { send_exit(e); e->detached = 1; }
        }
        else if (wait < 0 || e->grace_ms - now < wait) wait = e->grace_ms - now;
      }
      finish_if_done(e);
    }
    if (ctl_in < 0 && !init_mode && !execs_in_use()) _exit(0);
    int n = 0;
    /* A negative fd is skipped by poll: a closed channel (init mode) just goes quiet. */
    pfd[n] = (struct pollfd){ .fd = ctl_in, .events = POLLIN }; owner[n] = NULL; n++;
    pfd[n] = (struct pollfd){ .fd = sfd, .events = POLLIN }; owner[n] = NULL; n++;
    for (int i = 0; i < MAX_EXECS; i++) {
      if (!execs[i].used) continue;
      /* A streamed command whose window is full is not read: its pipe fills and it waits. */
      for (int k = 0; k < 2 && may_send(&execs[i]); k++) {
        if (execs[i].fd[k] < 0) continue;
        pfd[n] = (struct pollfd){ .fd = execs[i].fd[k], .events = POLLIN };
        owner[n] = &execs[i]; stream[n] = k; n++;
      }
      if (execs[i].in_fd >= 0 && execs[i].in_len > 0) {
        pfd[n] = (struct pollfd){ .fd = execs[i].in_fd, .events = POLLOUT };
        owner[n] = &execs[i]; stream[n] = 2; n++;
      }
    }
    if (poll(pfd, (nfds_t)n, (int)wait) < 0) {
      if (errno == EINTR) continue;
      if (!init_mode) return 1;
      usleep(10000); /* an init never exits; do not spin either */
    }
    for (int i = 2; i < n; i++) {
      if (!pfd[i].revents) continue;
      if (stream[i] == 2) flush_stdin(owner[i]);
      else drain(owner[i], stream[i], 16);
    }
    if (pfd[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) { }
      reap();
    }
    if (pfd[0].revents && ctl_in >= 0 && !read_ctl()) channel_closed();
  }
}
