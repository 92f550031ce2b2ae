/*
 * agent-files.h: the agent's file tool, `/dev/sandboxd-agent file <op> args...`, run inside a
 * sandbox as an ordinary process (already the right uid, in the sandbox's mount namespace).
 * It backs the files routes of docs/files-and-processes.md. Static, no NSS: owner and group
 * names come from the sandbox's /etc/passwd and /etc/group, read here. Everything is static:
 * exec-agent.c includes it.
 *
 * Entry (one JSON line, lstat semantics):
 *   {"name","path","type":"file"|"dir"|"symlink"|"other","size","mode":st_mode&07777,
 *    "owner":passwd name or uid,"group":group name or gid,"modifiedAt":"YYYY-MM-DDTHH:MM:SS.mmmZ",
 *    "symlinkTarget"?, "metadata"?}
 *   metadata: the `user.e2b.<key>` extended attributes of a file or directory (E2B's envd file
 *   metadata) as {"<key>": "<value>"}, present only when there is one; keys or values that are
 *   not UTF-8 (or hold a NUL) are left out, as envd leaves them out.
 *   path is the argument with `//` collapsed and a trailing `/` dropped (no `..` or symlink
 *   resolution); name its last component ("/" for the root). Strings are JSON-escaped, invalid
 *   UTF-8 bytes become U+FFFD.
 * Ops (stdout; exit 0):
 *   stat <path>                 entry
 *   list <dir> <depth> [max]    entries below dir, pre-order, sorted by name per directory,
 *                               depth levels (1 = children), symlinks not followed; at most max
 *                               (default 10000), then a last line {"truncated":true}
 *   mkdir <path>                parents created (0755), EEXIST if path exists; entry
 *   mkdirs <path> <uid> <gid> <0|1>  (run as the sandbox's root, for a user uid:gid: E2B's envd
 *                               acting as root) the missing directories above path (1: and path
 *                               itself, EEXIST if it exists) created 0755 and handed to uid:gid.
 *                               Walked with O_NOFOLLOW-free openat from /, each existing one
 *                               checked through its open fd: one uid:gid cannot search (no
 *                               supplementary groups, as commands run) is EACCES, one that is
 *                               not a directory ENOTDIR; nothing made above it. Entry of path
 *                               (1), else {}
 *   move <from> <to>            EEXIST if to exists; rename, or across mounts copy + remove;
 *                               parents of to are not created; entry of to
 *   remove <path>               unlink, or a directory recursively (never following a symlink,
 *                               nor entering another mount: EBUSY)
 *   read <path> <range>         range "", "a-b", "a-" or "-n" (HTTP forms): a header line
 *                               {"size","start","end"} then exactly end-start+1 bytes, or
 *                               {"size","unsatisfiable":true}; exit 3 when the file shrank
 *   write <path> <mode|-> <len|-> [key=value...]  stdin to a temp file beside path, renamed
 *                               over it (a symlink at path is replaced); parents created; each
 *                               key=value set as xattr user.e2b.<key> on it before the rename (a
 *                               file system without user xattrs: left out, as envd does); entry.
 *                               Short stdin EPIPE,
 *                               longer than len EFBIG; SIGTERM/HUP/INT/PIPE remove the temp
 *   watch <path> <0|1>          inotify (1 = recursive): {"type":"ready"}, then per event
 *                               {"type":"create"|"write"|"remove"|"rename"|"chmod","path",
 *                               "entry"?}, {"type":"overflow"}; ends with {"type":"remove",
 *                               "path":root} when the root goes, or when stdout is closed
 *   whoami                      the caller: {"user","uid","gid","group","home"} (names as in
 *                               entries; home from /etc/passwd, "/" when it has none)
 *   unpack <dest>               (run as the sandbox's root; image builds' COPY) stdin is a copy
 *                               stream (below), written under dest (made 0755 with its missing
 *                               parents; dest itself may be reached through symlinks, nothing
 *                               under it is: a symlink above an entry is ENOTDIR). Per entry:
 *                               a dir is made (an existing one merged; a non-dir there is
 *                               ENOTDIR, never replaced), its owner set at once and its mode
 *                               once every entry is written (so a 0555 dir is filled first);
 *                               a file is written to a temp file beside it, exactly s bytes,
 *                               chowned, chmodded and renamed over what is there (a file or a
 *                               symlink; a dir is EISDIR); a symlink likewise (made beside,
 *                               renamed over). Missing dirs above an entry are made 0755.
 *                               {"entries":n,"bytes":b} (file bytes). A bad header is EINVAL
 *                               naming the entry, a stream ending inside a file EPIPE (its
 *                               temp file removed: nothing of it is left)
 *   pack <path> <0|1>           (as root; `COPY --from`) stdout: path as a copy stream. A dir:
 *                               "" (the dir itself) first, then what is below it, pre-order,
 *                               sorted by name per dir, symlinks never followed, a dir on
 *                               another file system (a mount) listed but not entered, sockets,
 *                               FIFOs and devices left out. A file or symlink: one entry, its
 *                               own name. 1: path itself is followed when a symlink. A name or
 *                               target that is not UTF-8 is EILSEQ; a file that shrank while
 *                               copied is EIO, exit 3 (the stream is then cut)
 * Errors: one line on stderr {"errno","code","op","path","message"}, exit 1; usage errors
 * (op "usage", errno 22) exit 2.
 *
 * Copy stream (runtime/copy-stream.ts has the server's side): entries, each one JSON header
 * line {"p":path,"t":"f"|"d"|"l","m":mode&07777,"u":uid,"g":gid,"s":size,"l":target} (keys
 * in any order, "l" for symlinks only, "s" 0 but for files) followed by exactly s bytes of a
 * file's content; the stream ends at EOF after a whole entry. Paths are relative, with no
 * empty, `.` or `..` segment; "" names the destination dir itself (a dir entry only).
 */
#ifndef SANDBOXD_AGENT_FILES_H
#define SANDBOXD_AGENT_FILES_H
#ifndef _GNU_SOURCE
#error "agent-files.h needs _GNU_SOURCE before the first system header"
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* openat of a directory with O_NOFOLLOW that also refuses a symlink where gVisor's openat
 * (2022) follows one despite O_NOFOLLOW | O_DIRECTORY: ELOOP, as Linux answers. */
static int fa_opendir_nofollow(int dfd, const char *name, int flags) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) { errno = ELOOP; return -1; }
  return openat(dfd, name, flags);
}


#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif
#define FA_CHUNK (256 * 1024)   /* copy buffer */
#define FA_MAX_DEPTH 256        /* deepest directory level walked */
#define FA_MAX_WATCHES 8192

struct fa_buf { char *p; size_t len, cap; };

static struct fa_buf fa_out;          /* stdout, written with write(2) by fa_flush */
static char fa_tmp[PATH_MAX + 64];     /* write's (unpack's) temp file while it exists (signal handlers) */
static int fa_tmp_dir = AT_FDCWD;      /* the directory fa_tmp is relative to (unpack: the entry's parent) */
static char fa_io[FA_CHUNK];

static void fa_need(struct fa_buf *b, size_t n) {
  if (b->len + n + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + n + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) { if (fa_tmp[0]) unlinkat(fa_tmp_dir, fa_tmp, 0); _exit(1); } /* out of memory: not even an error line */
  b->p = p; b->cap = cap;
}
static void fa_add(struct fa_buf *b, const void *s, size_t n) { fa_need(b, n); memcpy(b->p + b->len, s, n); b->p[b->len += n] = 0; }
static void fa_str(struct fa_buf *b, const char *s) { fa_add(b, s, strlen(s)); }
__attribute__((format(printf, 2, 3))) static void fa_fmt(struct fa_buf *b, const char *fmt, ...) {
  char t[256];
  va_list ap;
  va_start(ap, fmt); int n = vsnprintf(t, sizeof t, fmt, ap); va_end(ap);
  if (n > 0) fa_add(b, t, (size_t)n < sizeof t ? (size_t)n : sizeof t - 1);
}

/* Length of the valid UTF-8 sequence at p (1..4 bytes, >= 0x80 lead), or 0 when invalid. */
static size_t fa_utf8(const unsigned char *p) {
  unsigned c = p[0];
  size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  for (size_t i = 1; i < n; i++) if ((p[i] & 0xc0) != 0x80) return 0; /* stops at the NUL too */
  if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||   /* overlong, surrogate */
      (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f)) return 0; /* overlong, > U+10FFFF */
  return n;
}

/* s as a JSON string: escaped, invalid UTF-8 bytes as U+FFFD. */
static void fa_json(struct fa_buf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  fa_add(b, "\"", 1);
  while (*p) {
    size_t n = 1;
    if (*p == '"' || *p == '\\') { char e[2] = { '\\', (char)*p }; fa_add(b, e, 2); }
    else if (*p < 0x20) fa_fmt(b, "\\u%04x", *p);
    else if (*p < 0x80) fa_add(b, p, 1);
    else if ((n = fa_utf8(p)) > 0) fa_add(b, p, n);
    else { fa_add(b, "\xef\xbf\xbd", 3); n = 1; }
    p += n;
  }
  fa_add(b, "\"", 1);
}

/* All of p to fd (waiting out a non-blocking fd). 0, or -1 with errno. */
static int fa_write_all(int fd, const void *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) { struct pollfd pf = { fd, POLLOUT, 0 }; poll(&pf, 1, -1); continue; }
    if (w < 0) return -1;
    p = (const char *)p + w; n -= (size_t)w;
  }
  return 0;
}

static int fa_flush(void) { int r = fa_write_all(1, fa_out.p, fa_out.len); fa_out.len = 0; return r; }

static const char *fa_code(int e) {
  static char t[16];
#define FA_C(x) case x: return #x;
  switch (e) {
    FA_C(ENOENT) FA_C(ENOTDIR) FA_C(EISDIR) FA_C(EEXIST) FA_C(ENOTEMPTY) FA_C(ENOSPC) FA_C(EDQUOT)
    FA_C(EACCES) FA_C(EPERM) FA_C(EROFS) FA_C(ENAMETOOLONG) FA_C(ELOOP) FA_C(EXDEV) FA_C(EINVAL)
    FA_C(EPIPE) FA_C(EFBIG) FA_C(EBUSY) FA_C(EIO) FA_C(ENOMEM) FA_C(EMFILE) FA_C(ETXTBSY)
    FA_C(EILSEQ) FA_C(EAGAIN)
  }
#undef FA_C
  snprintf(t, sizeof t, "E%d", e);
  return t;
}

/* One error line on stderr, the temp file (if any) removed, exit `code`. */
__attribute__((noreturn)) static void fa_error(int code, int err, const char *op, const char *path, const char *msg) {
  if (fa_tmp[0]) unlinkat(fa_tmp_dir, fa_tmp, 0);
  struct fa_buf b = { 0 };
  fa_fmt(&b, "{\"errno\":%d,\"code\":\"%s\",\"op\":", err, fa_code(err));
  fa_json(&b, op); fa_str(&b, ",\"path\":"); fa_json(&b, path ? path : "");
  fa_str(&b, ",\"message\":"); fa_json(&b, msg ? msg : strerror(err)); fa_str(&b, "}\n");
  fa_write_all(2, b.p, b.len);
  _exit(code);
}
__attribute__((noreturn)) static void fa_fail(int err, const char *op, const char *path) { fa_error(1, err, op, path, NULL); }
__attribute__((noreturn)) static void fa_usage(const char *msg) { fa_error(2, EINVAL, "usage", "", msg); }
static void fa_flush_or_fail(void) { if (fa_flush() < 0) fa_fail(errno, "write", "<stdout>"); }

/* `in` with `//` collapsed and a trailing `/` dropped (the root stays "/"); malloc'd. */
static char *fa_norm(const char *in) {
  size_t n = strlen(in), j = 0;
  char *s = malloc(n + 1);
  if (!s) fa_fail(ENOMEM, "malloc", in);
  for (size_t i = 0; i < n; i++) if (!(in[i] == '/' && j > 0 && s[j - 1] == '/')) s[j++] = in[i];
  if (j > 1 && s[j - 1] == '/') j--;
  s[j] = 0;
  return s;
}
static const char *fa_base(const char *p) {
  const char *s = strrchr(p, '/');
  return strcmp(p, "/") == 0 ? "/" : s ? s + 1 : p;
}
/* dir + "/" + name, malloc'd ("/" + name for the root). */
static char *fa_join(const char *dir, const char *name) {
  struct fa_buf b = { 0 };
  fa_str(&b, dir); fa_str(&b, strcmp(dir, "/") ? "/" : ""); fa_str(&b, name);
  return b.p;
}

/* The target of symlink `name` in dirfd, malloc'd, or NULL. */
static char *fa_readlink(int dirfd, const char *name) {
  for (size_t cap = 256; cap <= (1u << 20); cap *= 2) {
    char *t = malloc(cap);
    if (!t) return NULL;
    ssize_t n = readlinkat(dirfd, name, t, cap);
    if (n >= 0 && (size_t)n < cap) { t[n] = 0; return t; }
    free(t);
    if (n < 0) return NULL;
  }
  return NULL;
}

/* The contents of `db` (/etc/passwd or /etc/group, at most 4 MiB), read once, or "". */
static const char *fa_db(struct fa_buf *b, int *loaded, const char *db) {
  if (!(*loaded)++) {
    int fd = open(db, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    for (ssize_t n = 1; fd >= 0 && n > 0 && b->len < (4u << 20); ) {
      fa_need(b, 65536);
      if ((n = read(fd, b->p + b->len, 65536)) > 0) b->len += (size_t)n;
      b->p[b->len] = 0;
    }
    if (fd >= 0) close(fd);
  }
  return b->p ? b->p : "";
}

/* The line of `db` (name:password:id:...) whose third field is `id`, copied into `line`
 * (at most cap - 1 bytes), or 0 when there is none. */
static int fa_db_line(const char *db, unsigned id, char *line, size_t cap) {
  for (const char *l = db, *next; *l; l = next) {
    const char *end = strchr(l, '\n');
    next = end ? end + 1 : l + strlen(l);
    if (!end) end = next;
    const char *c1 = memchr(l, ':', (size_t)(end - l)), *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
    char *e = NULL;
    if (c2 && c1 > l && (size_t)(end - l) < cap && strtoul(c2 + 1, &e, 10) == id && e > c2 + 1 && e <= end && *e == ':') {
      memcpy(line, l, (size_t)(end - l));
      line[end - l] = 0;
      return 1;
    }
  }
  return 0;
}

/* The name of `id` in `db` into name (cap bytes), else the id in decimal. */
static void fa_id_name(const char *db, unsigned id, char *name, size_t cap) {
  char line[4096];
  snprintf(name, cap, "%u", id);
  if (!fa_db_line(db, id, line, sizeof line)) return;
  char *c = strchr(line, ':');
  if (c && (size_t)(c - line) < cap) { memcpy(name, line, (size_t)(c - line)); name[c - line] = 0; }
}

/* The user name of uid from /etc/passwd, else the uid in decimal (the last answer is kept). */
static const char *fa_owner(uid_t uid) {
  static struct fa_buf db;
  static int loaded;
  static uid_t last = (uid_t)-1;
  static char name[256];
  if (uid != last) fa_id_name(fa_db(&db, &loaded, "/etc/passwd"), (unsigned)(last = uid), name, sizeof name);
  return name;
}

/* The group name of gid from /etc/group, else the gid in decimal (the last answer is kept). */
static const char *fa_group(gid_t gid) {
  static struct fa_buf db;
  static int loaded;
  static gid_t last = (gid_t)-1;
  static char name[256];
  if (gid != last) fa_id_name(fa_db(&db, &loaded, "/etc/group"), (unsigned)(last = gid), name, sizeof name);
  return name;
}

/* whoami: the calling user from /etc/passwd (its home "/" when it has no entry). */
static int fa_whoami(void) {
  static struct fa_buf db;
  static int loaded;
  uid_t uid = getuid();
  gid_t gid = getgid();
  char line[4096];
  const char *home = "/";
  if (fa_db_line(fa_db(&db, &loaded, "/etc/passwd"), (unsigned)uid, line, sizeof line)) {
    char *f = line; /* name:pw:uid:gid:gecos:home:shell */
    for (int i = 0; i < 5 && f; i++) if ((f = strchr(f, ':'))) f++;
    if (f && *f == '/') { char *c = strchr(f, ':'); if (c) *c = 0; home = f; }
  }
  fa_str(&fa_out, "{\"user\":"); fa_json(&fa_out, fa_owner(uid));
  fa_fmt(&fa_out, ",\"uid\":%u,\"gid\":%u,\"group\":", (unsigned)uid, (unsigned)gid);
  fa_json(&fa_out, fa_group(gid));
  fa_str(&fa_out, ",\"home\":"); fa_json(&fa_out, home); fa_str(&fa_out, "}\n");
  fa_flush_or_fail();
  return 0;
}

#define FA_META_PREFIX "user.e2b."
/* Whether s[0..n) is UTF-8 without a NUL. */
static int fa_valid_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n; ) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0) return 0;
    if (c < 0x80) { i++; continue; }
    char t[5] = { 0 };
    memcpy(t, s + i, n - i < 4 ? n - i : 4);
    size_t k = fa_utf8((const unsigned char *)t);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

/* ,"metadata":{...} of path's user.e2b.* xattrs (lstat semantics), when it has any. */
static void fa_metadata(struct fa_buf *b, const char *path) {
  static char names[65536], value[65536 + 1];
  ssize_t n = llistxattr(path, names, sizeof names);
  if (n <= 0) return; /* none, no xattrs on this file system, or gone */
  int first = 1;
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, FA_META_PREFIX, sizeof FA_META_PREFIX - 1) != 0) continue;
    const char *key = k + sizeof FA_META_PREFIX - 1;
    ssize_t v = lgetxattr(path, k, value, sizeof value - 1);
    if (v < 0 || !*key || !fa_valid_utf8(key, strlen(key)) || !fa_valid_utf8(value, (size_t)v)) continue;
    value[v] = 0;
    fa_str(b, first ? ",\"metadata\":{" : ",");
    first = 0;
    fa_json(b, key); fa_str(b, ":"); fa_json(b, value);
  }
  if (!first) fa_str(b, "}");
}

/* The entry object of `path` (st from lstat; the symlink is read as `name` in dirfd). */
static void fa_entry(struct fa_buf *b, const char *path, const struct stat *st, int dirfd, const char *name) {
  const char *type = S_ISREG(st->st_mode) ? "file" : S_ISDIR(st->st_mode) ? "dir" : S_ISLNK(st->st_mode) ? "symlink" : "other";
  fa_str(b, "{\"name\":"); fa_json(b, fa_base(path));
  fa_str(b, ",\"path\":"); fa_json(b, path);
  fa_fmt(b, ",\"type\":\"%s\",\"size\":%lld,\"mode\":%u,\"owner\":", type, (long long)st->st_size, (unsigned)(st->st_mode & 07777));
  fa_json(b, fa_owner(st->st_uid));
  fa_str(b, ",\"group\":"); fa_json(b, fa_group(st->st_gid));
  struct tm tm = { 0 };
  time_t t = st->st_mtim.tv_sec;
  if (!gmtime_r(&t, &tm)) memset(&tm, 0, sizeof tm);
  fa_fmt(b, ",\"modifiedAt\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\"", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
         tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(st->st_mtim.tv_nsec / 1000000));
  char *target = S_ISLNK(st->st_mode) ? fa_readlink(dirfd, name) : NULL;
  if (target) { fa_str(b, ",\"symlinkTarget\":"); fa_json(b, target); free(target); }
  if (S_ISREG(st->st_mode) || S_ISDIR(st->st_mode)) fa_metadata(b, path);
  fa_str(b, "}");
}

/* stdout: the entry line of path (lstat). */
static int fa_print_entry(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) fa_fail(errno, "lstat", path);
  fa_entry(&fa_out, path, &st, AT_FDCWD, path); fa_str(&fa_out, "\n"); fa_flush_or_fail();
  return 0;
}

static int fa_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in directory fd (not . and ..), sorted, read from the start; fd stays open.
 * Returns the count (the array and names malloc'd), or -1 with errno. */
static ssize_t fa_names(int fd, char ***out) {
  int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  DIR *d = d2 < 0 ? NULL : (lseek(d2, 0, SEEK_SET), fdopendir(d2));
  if (!d) { int e = errno; if (d2 >= 0) close(d2); errno = e; return -1; }
  char **v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  for (errno = 0; (de = readdir(d)) != NULL; errno = 0) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (n == cap && !(v = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v))) fa_fail(ENOMEM, "malloc", "");
    if (!(v[n++] = strdup(de->d_name))) fa_fail(ENOMEM, "malloc", "");
  }
  int e = errno;
  closedir(d);
  if (e) { while (n) free(v[--n]); free(v); errno = e; return -1; }
  if (n) qsort(v, n, sizeof *v, fa_cmp);
  *out = v;
  return (ssize_t)n;
}
static void fa_free_names(char **v, ssize_t n) { for (ssize_t i = 0; i < n; i++) free(v[i]); free(v); }

/* Parses decimal digits [s, e) (at least one), saturating. */
static int fa_u64(const char *s, const char *e, uint64_t *v) {
  const char *p = s;
  for (*v = 0; p < e && *p >= '0' && *p <= '9'; p++) *v = *v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : *v * 10 + (uint64_t)(*p - '0');
  return p == e && p > s ? 0 : -1;
}
static uint64_t fa_arg_num(const char *s, uint64_t min, uint64_t max, const char *what) {
  uint64_t v;
  if (fa_u64(s, s + strlen(s), &v) < 0 || v < min || v > max) fa_usage(what);
  return v;
}

/* Creates the missing directories above `path` (0755 each; umask is 0). */
static void fa_mkparents(char *path) {
  if (!*path) return;
  for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
    struct stat st;
    *s = 0;
    int e = mkdir(path, 0755) < 0 && errno != EEXIST ? errno : 0; /* EACCES, EROFS on one that exists: fine */
    if (e && (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))) fa_fail(e, "mkdir", path);
    *s = '/';
  }
}

/* mkdirs (see the top): as root, the missing directories of path made for uid:gid. */
static int fa_mkdirs(char *path, uid_t uid, gid_t gid, int self) {
  if (path[0] != '/') fa_fail(EINVAL, "mkdirs", path);
  int dfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fa_fail(errno, "open", "/");
  char *end = path + strlen(path);
  for (char *c = path + 1; c < end; ) {
    char *slash = strchr(c, '/');
    if (!slash) slash = end;
    int last = slash == end;
    if (last && !self) break;
    struct stat st;
    if (fstat(dfd, &st) < 0) fa_fail(errno, "fstat", path);
    /* The directory we are in must be searchable by uid:gid (what it could not reach it cannot use). */
    unsigned bit = st.st_uid == uid ? 0100 : st.st_gid == gid ? 0010 : 0001;
    if (uid != 0 && !(st.st_mode & bit)) fa_fail(EACCES, "mkdir", path);
    char saved = *slash;
    *slash = 0;
    int nfd = openat(dfd, c, O_PATH | O_DIRECTORY | O_CLOEXEC); /* an existing one, symlinks followed */
    if ((nfd >= 0 || errno == ENOTDIR) && last) { *slash = saved; fa_fail(EEXIST, "mkdir", path); }
    if (nfd < 0 && errno != ENOENT) { int e = errno; *slash = saved; fa_fail(e, "open", path); }
    if (nfd < 0) {
      int mine = mkdirat(dfd, c, 0755) == 0;
      if (!mine && errno != EEXIST) { int e = errno; *slash = saved; fa_fail(e, "mkdir", path); }
      nfd = openat(dfd, c, O_PATH | O_DIRECTORY | (mine ? O_NOFOLLOW : 0) | O_CLOEXEC);
      if (nfd < 0) { int e = errno; *slash = saved; fa_fail(e, "open", path); }
      /* Only what this call made changes hands (one made meanwhile by another stays theirs). */
      if (mine && fchownat(nfd, "", uid, gid, AT_EMPTY_PATH) < 0) { int e = errno; *slash = saved; fa_fail(e, "chown", path); }
    }
    *slash = saved;
    close(dfd);
    dfd = nfd;
    c = slash + 1;
  }
  close(dfd);
  if (self) return fa_print_entry(path);
  fa_str(&fa_out, "{}\n"); fa_flush_or_fail();
  return 0;
}

struct fa_list { long depth, max, count; int truncated; };

static void fa_list_dir(struct fa_list *L, int fd, const char *path, long level) {
  char **names;
  ssize_t n = fa_names(fd, &names);
  if (n < 0) { if (level == 1) fa_fail(errno, "readdir", path); return; }
  for (ssize_t i = 0; i < n && !L->truncated; i++) {
    struct stat st;
    if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) continue; /* gone meanwhile */
    if (L->count == L->max) { L->truncated = 1; break; }
    char *p = fa_join(path, names[i]);
    fa_entry(&fa_out, p, &st, fd, names[i]);
    fa_str(&fa_out, "\n"); L->count++;
    if (fa_out.len >= 65536) fa_flush_or_fail();
    if (S_ISDIR(st.st_mode) && level < L->depth && level < FA_MAX_DEPTH) {
      int c = fa_opendir_nofollow(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
      if (c >= 0) { fa_list_dir(L, c, p, level + 1); close(c); }
    }
    free(p);
  }
  fa_free_names(names, n);
}

static int rm_errno;
static const char *rm_op;
static struct fa_buf rm_path, rm_errpath;  /* the path being removed / of the first error */

static void fa_rm_err(const char *op) {
  if (!rm_errno) { rm_errno = errno; rm_op = op; rm_errpath.len = 0; fa_str(&rm_errpath, rm_path.p); }
}

/* Empties directory fd (rm_path names it, on device dev), never following a symlink nor entering
 * another mount (EBUSY); the first error is kept. */
static void fa_rm_contents(int fd, dev_t dev, int depth) {
  for (int pass = 0; pass < 4 && !rm_errno; pass++) { /* again when entries appeared meanwhile */
    char **names;
    ssize_t n = fa_names(fd, &names);
    if (n < 0) { fa_rm_err("readdir"); return; }
    if (n == 0) { free(names); return; }
    for (ssize_t i = 0; i < n; i++) {
      size_t keep = rm_path.len;
      fa_str(&rm_path, "/"); fa_str(&rm_path, names[i]);
      struct stat st;
      if (unlinkat(fd, names[i], 0) == 0 || errno == ENOENT) { /* done */ }
      else if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) fa_rm_err("unlink");
      else if (st.st_dev != dev) { errno = EBUSY; fa_rm_err("rmdir"); }
      else if (depth >= FA_MAX_DEPTH) { if (unlinkat(fd, names[i], AT_REMOVEDIR) < 0) { errno = ELOOP; fa_rm_err("rmdir"); } }
      else {
        int c = fa_opendir_nofollow(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (c < 0) fa_rm_err("open");
        else fa_rm_contents(c, dev, depth + 1), close(c);
        if (c >= 0 && unlinkat(fd, names[i], AT_REMOVEDIR) < 0 && errno != ENOENT) fa_rm_err("rmdir");
      }
      rm_path.len = keep; rm_path.p[keep] = 0;
    }
    fa_free_names(names, n);
  }
}

/* Removes path (a directory recursively). 0, or -1 with rm_errno, rm_op, rm_errpath set. */
static int fa_remove(const char *path) {
  struct stat st, root;
  rm_errno = 0; rm_path.len = 0; fa_str(&rm_path, path);
  if (lstat(path, &st) < 0) { fa_rm_err("lstat"); return -1; }
  if (!S_ISDIR(st.st_mode)) { if (unlink(path) < 0) fa_rm_err("unlink"); return rm_errno ? -1 : 0; }
  if (lstat("/", &root) == 0 && root.st_dev == st.st_dev && root.st_ino == st.st_ino) { errno = EBUSY; fa_rm_err("rmdir"); return -1; }
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) { fa_rm_err("open"); return -1; }
  fa_rm_contents(fd, st.st_dev, 1);
  close(fd);
  if (!rm_errno && rmdir(path) < 0) fa_rm_err("rmdir");
  return rm_errno ? -1 : 0;
}

static const char *cp_op;
static int cp_dst;  /* the failure was on the destination side */

static int fa_cp_err(const char *op, int dst) { int e = errno; cp_op = op; cp_dst = dst; return e ? e : EIO; }

/* Copies the data of fd s to fd d (they are on different filesystems). 0 or an errno. */
static int fa_copy_data(int s, int d) {
  for (ssize_t n; (n = read(s, fa_io, sizeof fa_io)) != 0; ) {
    if (n < 0 && errno != EINTR) return fa_cp_err("read", 0);
    if (n > 0 && fa_write_all(d, fa_io, (size_t)n) < 0) return fa_cp_err("write", 1);
  }
  return 0;
}

/* Copies sn in sfd to dn in dfd: files with their mode and mtime, directories recursively,
 * symlinks recreated (never followed). 0 or an errno (cp_op, cp_dst set). */
static int fa_copy(int sfd, const char *sn, int dfd, const char *dn, int depth) {
  struct stat st;
  int e = 0;
  if (fstatat(sfd, sn, &st, AT_SYMLINK_NOFOLLOW) < 0) return fa_cp_err("lstat", 0);
  if (depth > FA_MAX_DEPTH) { errno = ELOOP; return fa_cp_err("open", 0); }
  struct timespec times[2] = { st.st_atim, st.st_mtim };
  if (S_ISLNK(st.st_mode)) {
    char *t = fa_readlink(sfd, sn);
    if (!t) return fa_cp_err("readlink", 0);
    if (symlinkat(t, dfd, dn) < 0) e = fa_cp_err("symlink", 1);
    free(t);
    return e;
  }
  int dir = S_ISDIR(st.st_mode);
  if (!dir && !S_ISREG(st.st_mode)) return mknodat(dfd, dn, st.st_mode, st.st_rdev) < 0 ? fa_cp_err("mknod", 1) : 0;
  if (dir && mkdirat(dfd, dn, 0700) < 0) return fa_cp_err("mkdir", 1);
  int s = openat(sfd, sn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (s < 0) return fa_cp_err("open", 0);
  int d = dir ? fa_opendir_nofollow(dfd, dn, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
              : openat(dfd, dn, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (d < 0) { e = fa_cp_err("open", 1); close(s); return e; }
  if (dir) {
    char **names;
    ssize_t n = fa_names(s, &names);
    if (n < 0) e = fa_cp_err("readdir", 0);
    for (ssize_t i = 0; i < n && !e; i++) e = fa_copy(s, names[i], d, names[i], depth + 1);
    if (n >= 0) fa_free_names(names, n);
  } else e = fa_copy_data(s, d);
  if (!e && fchmod(d, st.st_mode & 07777) < 0) e = fa_cp_err("chmod", 1);
  if (!e) futimens(d, times);
  close(s);
  if (close(d) < 0 && !e) e = fa_cp_err("close", 1);
  return e;
}

static int fa_move(const char *from, const char *to) {
  struct stat st;
  if (lstat(from, &st) < 0) fa_fail(errno, "lstat", from);
  if (lstat(to, &st) == 0) fa_fail(EEXIST, "rename", to);
  long r = syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
  if (r < 0 && (errno == ENOSYS || errno == EINVAL)) { /* no renameat2, or not on this fs */
    if (lstat(to, &st) == 0) fa_fail(EEXIST, "rename", to);
    r = rename(from, to);
  }
  if (r < 0 && errno == EXDEV) {
    int e = fa_copy(AT_FDCWD, from, AT_FDCWD, to, 0);
    if (e) {
      if (!(cp_dst && e == EEXIST)) fa_remove(to); /* the partial copy (not someone else's to) */
      fa_fail(e, cp_op, cp_dst ? to : from);
    }
    if (fa_remove(from) < 0) fa_fail(rm_errno, rm_op, rm_errpath.p);
  } else if (r < 0) fa_fail(errno, "rename", errno == ENOENT || errno == EEXIST || errno == ENOTDIR || errno == EISDIR ? to : from);
  return fa_print_entry(to);
}

static int fa_read(const char *path, const char *range) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY); /* O_NONBLOCK: a FIFO does not hang */
  if (fd < 0) fa_fail(errno, "open", path);
  struct stat st;
  if (fstat(fd, &st) < 0) fa_fail(errno, "fstat", path);
  if (!S_ISREG(st.st_mode)) fa_fail(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "read", path);
  uint64_t size = (uint64_t)st.st_size, a = 0, b = 0, start = 0;
  int64_t end = (int64_t)size - 1;
  int unsat = 0;
  const char *dash = strchr(range, '-'), *stop = range + strlen(range);
  int has_b = dash && dash + 1 < stop;
  if (*range && (!dash || (dash > range && fa_u64(range, dash, &a) < 0) || (has_b && fa_u64(dash + 1, stop, &b) < 0) ||
                 (dash == range && !has_b))) fa_usage("bad range");
  if (!*range) { /* whole */ }
  else if (dash == range) { if (b == 0) unsat = 1; else start = size > b ? size - b : 0; } /* -n: empty file ok */
  else if ((has_b && a > b) || a >= size) unsat = 1; /* RFC 9110: an empty file satisfies no a-b, a- */
  else { start = a; if (has_b && b < size - 1) end = (int64_t)b; }
  fa_fmt(&fa_out, "{\"size\":%llu", (unsigned long long)size);
  if (unsat) fa_str(&fa_out, ",\"unsatisfiable\":true}\n");
  else fa_fmt(&fa_out, ",\"start\":%llu,\"end\":%lld}\n", (unsigned long long)start, (long long)end);
  fa_flush_or_fail();
  if (unsat) return 0;
  off_t off = (off_t)start;
  uint64_t left = (uint64_t)(end + 1) - start;
  for (int sf = 1; left > 0; ) {
    size_t want = left > (1u << 30) ? (1u << 30) : (size_t)left;
    ssize_t n;
    if (sf) { /* in the kernel; where stdout takes no sendfile, read + write */
      n = sendfile(1, fd, &off, want);
      if (n < 0 && (errno == EINVAL || errno == ENOSYS) && off == (off_t)start) { sf = 0; continue; }
      if (n < 0 && errno == EAGAIN) { struct pollfd pf = { 1, POLLOUT, 0 }; poll(&pf, 1, -1); continue; }
    } else {
      n = pread(fd, fa_io, want < sizeof fa_io ? want : sizeof fa_io, off);
      if (n > 0 && fa_write_all(1, fa_io, (size_t)n) < 0) fa_fail(errno, "write", "<stdout>");
      if (n > 0) off += n;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fa_fail(errno, sf ? "sendfile" : "read", path);
    if (n == 0) fa_error(3, EIO, "read", path, "the file ended before the range did (it shrank)");
    left -= (uint64_t)n;
  }
  return 0;
}

static void fa_on_signal(int sig) { (void)sig; if (fa_tmp[0]) unlinkat(fa_tmp_dir, fa_tmp, 0); _exit(143); }

/* Copies stdin to fd: exactly len bytes when has_len (EPIPE short, EFBIG long), else to EOF. */
static void fa_fill(int fd, uint64_t len, int has_len, const char *path) {
  uint64_t total = 0;
  for (int spl = 1;;) {
    size_t want = sizeof fa_io;
    if (has_len && len - total + 1 < want) want = (size_t)(len - total + 1); /* one more: too long? */
    ssize_t n;
    if (spl) {
      n = splice(0, NULL, fd, NULL, want, SPLICE_F_MOVE);
      if (n < 0 && errno == EINVAL) { spl = 0; continue; } /* stdin not a pipe, or the fs says no */
    } else {
      n = read(0, fa_io, want);
      if (n > 0 && fa_write_all(fd, fa_io, (size_t)n) < 0) fa_fail(errno, "write", path);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) { struct pollfd pf = { 0, POLLIN, 0 }; poll(&pf, 1, -1); continue; }
    if (n < 0) fa_fail(errno, spl ? "write" : "read", path);
    if (n == 0 && spl) { spl = 0; continue; } /* gVisor: 0 may mean empty for now; read() tells */
    if (n == 0) break;
    total += (uint64_t)n;
    if (has_len && total > len) fa_fail(EFBIG, "write", path);
  }
  if (has_len && total < len) fa_fail(EPIPE, "write", path);
}

static int fa_write(char *path, const char *mode_s, const char *len_s, char **meta, int nmeta) {
  unsigned mode = 0644;
  uint64_t len = 0;
  int has_len = strcmp(len_s, "-") != 0;
  char *e;
  if (strcmp(mode_s, "-") != 0 && ((mode = (unsigned)strtoul(mode_s, &e, 8)) > 07777 || *e || strlen(mode_s) > 6 ||
                                   mode_s[0] < '0' || mode_s[0] > '7')) fa_usage("bad mode");
  if (has_len) len = fa_arg_num(len_s, 0, UINT64_MAX - 1, "bad length");
  for (int i = 0; i < nmeta; i++) {
    char *eq = strchr(meta[i], '=');
    if (!eq || eq == meta[i] || (size_t)(eq - meta[i]) > 255 - (sizeof FA_META_PREFIX - 1)) fa_usage("bad metadata");
  }
  const char *base = fa_base(path);
  if (!*path || strcmp(path, "/") == 0) fa_fail(*path ? EISDIR : ENOENT, "open", path);
  struct stat st;
  int exists = lstat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) fa_fail(EISDIR, "open", path); /* early: no upload for nothing */
  if (exists && S_ISREG(st.st_mode) && strcmp(mode_s, "-") == 0) mode = st.st_mode & 07777;
  fa_mkparents(path);
  struct sigaction sa = { .sa_handler = fa_on_signal };
  sigset_t sigs;
  sigfillset(&sa.sa_mask); sigemptyset(&sigs);
  for (int i = 0, sig[] = { SIGTERM, SIGHUP, SIGINT, SIGPIPE }; i < 4; i++) { sigaction(sig[i], &sa, NULL); sigaddset(&sigs, sig[i]); }
  sigprocmask(SIG_BLOCK, &sigs, NULL); /* the temp's name is known to the handlers before it exists */
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 16; tries++) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r = (uint64_t)time(NULL) * 2654435761u + (uint64_t)tries;
    int n = snprintf(fa_tmp, sizeof fa_tmp, "%.*s.%.200s.sandboxd-%d-%012llx", (int)(base - path), path, base,
                     (int)getpid(), (unsigned long long)(r & 0xffffffffffffull));
    if (n < 0 || (size_t)n >= sizeof fa_tmp) { fa_tmp[0] = 0; fa_fail(ENAMETOOLONG, "open", path); }
    fd = open(fa_tmp, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) { int err = errno; fa_tmp[0] = 0; fa_fail(err, "open", path); }
  sigprocmask(SIG_UNBLOCK, &sigs, NULL); /* also when they came blocked */
  fa_fill(fd, len, has_len, path);
  for (int i = 0; i < nmeta; i++) {
    char name[256], *eq = strchr(meta[i], '=');
    snprintf(name, sizeof name, FA_META_PREFIX "%.*s", (int)(eq - meta[i]), meta[i]);
    if (fsetxattr(fd, name, eq + 1, strlen(eq + 1), 0) == 0) continue;
    if (errno == ENOTSUP || errno == EOPNOTSUPP) break; /* no user xattrs here: left out, as envd does */
    fa_fail(errno, "setxattr", path);
  }
  if (fchmod(fd, mode) < 0) fa_fail(errno, "chmod", path);
  if (close(fd) < 0) fa_fail(errno, "close", path);
  if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) fa_fail(EISDIR, "rename", path);
  if (rename(fa_tmp, path) < 0) fa_fail(errno, "rename", path);
  fa_tmp[0] = 0;
  return fa_print_entry(path);
}

struct fa_watch { int wd; char *path; };
static struct fa_watch fa_w[FA_MAX_WATCHES];
static int fa_nw, fa_ifd, fa_root_wd = -1, fa_recursive, fa_ready, fa_cap_hit;

static void fa_overflow(void) { fa_str(&fa_out, "{\"type\":\"overflow\"}\n"); }
static void fa_cap(void) { if (!fa_cap_hit++ && fa_ready) fa_overflow(); } /* before ready: after it */

static int fa_wfind(int wd) { for (int i = 0; i < fa_nw; i++) if (fa_w[i].wd == wd) return i; return -1; }
static void fa_wdrop(int i) { free(fa_w[i].path); fa_w[i] = fa_w[--fa_nw]; }

/* A watch on path (a directory unless it is the root). Its wd, or -1. */
static int fa_add_watch(const char *path, int dir) {
  if (fa_nw >= FA_MAX_WATCHES) { fa_cap(); return -1; }
  uint32_t mask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |
                  IN_MOVE_SELF | IN_DONT_FOLLOW | (dir ? IN_ONLYDIR : 0);
  int wd = inotify_add_watch(fa_ifd, path, mask);
  if (wd < 0) { if (errno == ENOSPC) fa_cap(); return -1; } /* ENOSPC: the user's watch limit */
  char *copy = strdup(path);
  if (!copy) fa_fail(ENOMEM, "malloc", path);
  int i = fa_wfind(wd); /* the same directory again (moved within the tree): new path */
  if (i >= 0) { free(fa_w[i].path); fa_w[i].path = copy; }
  else fa_w[fa_nw++] = (struct fa_watch){ wd, copy };
  return wd;
}

static void fa_event(const char *type, const char *path, int with_entry) {
  struct stat st;
  fa_fmt(&fa_out, "{\"type\":\"%s\",\"path\":", type); fa_json(&fa_out, path);
  if (with_entry && lstat(path, &st) == 0) { fa_str(&fa_out, ",\"entry\":"); fa_entry(&fa_out, path, &st, AT_FDCWD, path); }
  fa_str(&fa_out, "}\n");
}

/* Watches directory path and (recursive) those below it; with report, prints a create line for
 * everything already in it (it appeared after its parent's watch: those events were missed). */
static void fa_watch_tree(const char *path, int report, int depth) {
  if (fa_add_watch(path, 1) < 0 || !fa_recursive || depth >= FA_MAX_DEPTH) return;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  char **names;
  ssize_t n = fd < 0 ? -1 : fa_names(fd, &names);
  if (fd >= 0) close(fd);
  for (ssize_t i = 0; i < n; i++) {
    char *p = fa_join(path, names[i]);
    struct stat st;
    if (lstat(p, &st) == 0) {
      if (report) fa_event("create", p, 1);
      if (S_ISDIR(st.st_mode)) fa_watch_tree(p, report, depth + 1);
    }
    free(p);
  }
  if (n >= 0) fa_free_names(names, n);
}

/* Drops the watches of path and everything below it (moved away: its wds would report stale
 * paths; a move within the tree re-adds them with the new path). */
static void fa_unwatch(const char *path) {
  size_t l = strlen(path);
  for (int i = fa_nw - 1; i >= 0; i--) {
    const char *w = fa_w[i].path;
    if (fa_w[i].wd != fa_root_wd && strncmp(w, path, l) == 0 && (w[l] == 0 || w[l] == '/'))
      inotify_rm_watch(fa_ifd, fa_w[i].wd), fa_wdrop(i);
  }
}

static int fa_watch(const char *root) {
  struct stat st;
  if (lstat(root, &st) < 0) fa_fail(errno, "lstat", root);
  if ((fa_ifd = inotify_init1(IN_CLOEXEC)) < 0) fa_fail(errno, "inotify_init1", root);
  int dir = S_ISDIR(st.st_mode);
  if ((fa_root_wd = fa_add_watch(root, dir)) < 0) fa_fail(errno, "inotify_add_watch", root);
  if (dir) fa_watch_tree(root, 0, 0); /* the root again: same wd, then its subdirectories */
  fa_str(&fa_out, "{\"type\":\"ready\"}\n");
  if ((fa_ready = 1) && fa_cap_hit) fa_overflow();
  static char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
  char *writes[4096]; /* paths given a write line in this batch (one per path and batch) */
  for (;;) {
    if (fa_out.len && fa_flush() < 0) return 0; /* the reader is gone */
    struct pollfd pf[2] = { { fa_ifd, POLLIN, 0 }, { 1, 0, 0 } };
    if (poll(pf, 2, -1) < 0) { if (errno == EINTR) continue; fa_fail(errno, "poll", root); }
    if (pf[1].revents & (POLLERR | POLLHUP | POLLNVAL)) return 0;
    if (!(pf[0].revents & POLLIN)) continue;
    ssize_t n = read(fa_ifd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) fa_fail(n < 0 ? errno : EIO, "read", root);
    int nw = 0;
    for (char *p = buf; p < buf + n; ) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) { fa_overflow(); continue; }
      int i = fa_wfind(ev->wd), self = ev->len == 0 || !ev->name[0];
      if (ev->wd == fa_root_wd && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT))) {
        fa_event("remove", root, 0); fa_flush(); return 0;
      }
      if (ev->mask & IN_IGNORED) { if (i >= 0) fa_wdrop(i); continue; }
      if (i < 0 || (self && ev->wd != fa_root_wd)) continue; /* a subdirectory's own events: its parent has them */
      char *path = self ? strdup(fa_w[i].path) : fa_join(fa_w[i].path, ev->name);
      if (!path) fa_fail(ENOMEM, "malloc", root);
      int k = 0;
      while (k < nw && strcmp(writes[k], path) != 0) k++;
      if ((ev->mask & IN_MODIFY) && k == nw) {
        fa_event("write", path, 1);
        if (nw < (int)(sizeof writes / sizeof *writes)) { writes[nw++] = path; path = NULL; }
      } else if (!(ev->mask & IN_MODIFY)) {
        if (k < nw) { free(writes[k]); writes[k] = writes[--nw]; } /* a write after this is news again */
        if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
          fa_event("create", path, 1);
          if ((ev->mask & IN_ISDIR) && fa_recursive) fa_watch_tree(path, 1, 0);
        } else if (ev->mask & IN_DELETE) fa_event("remove", path, 0);
        else if (ev->mask & IN_MOVED_FROM) {
          fa_event("rename", path, 0);
          if (ev->mask & IN_ISDIR) fa_unwatch(path);
        } else if (ev->mask & IN_ATTRIB) fa_event("chmod", path, 1);
      }
      free(path);
    }
    while (nw) free(writes[--nw]);
  }
}

/* ---- Copy streams (image builds' COPY): unpack and pack; the format is at the top. ---- */

#define FA_MAX_HEADER (128 * 1024) /* longest header line of a copy stream */

/* stdin, buffered: headers are read from it a line at a time, file bodies through it. */
static struct { char buf[FA_CHUNK]; size_t pos, len; } fa_in;

/* More of stdin into fa_in (after what is there, moved to the front): bytes read, 0 at EOF. */
static size_t fa_in_more(void) {
  if (fa_in.pos > 0) {
    memmove(fa_in.buf, fa_in.buf + fa_in.pos, fa_in.len - fa_in.pos);
    fa_in.len -= fa_in.pos; fa_in.pos = 0;
  }
  for (;;) {
    ssize_t n = read(0, fa_in.buf + fa_in.len, sizeof fa_in.buf - fa_in.len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) { struct pollfd pf = { 0, POLLIN, 0 }; poll(&pf, 1, -1); continue; }
    if (n < 0) fa_fail(errno, "read", "<stdin>");
    fa_in.len += (size_t)n;
    return (size_t)n;
  }
}

/* A header being parsed: where (for errors) and what. */
struct fa_hdr {
  uint64_t index;       /* 0-based entry number */
  char *p, *l;          /* path, symlink target (malloc'd) */
  char t;               /* 'f', 'd', 'l' */
  uint64_t m, u, g, s;
  int has;              /* bit per key seen: p t m u g s l */
};

/* A bad header: an EINVAL error naming the entry (its path once known, else its number). */
__attribute__((noreturn)) static void fa_bad_entry(const struct fa_hdr *h, const char *why) {
  char num[64], msg[512];
  snprintf(num, sizeof num, "#%llu", (unsigned long long)h->index + 1);
  snprintf(msg, sizeof msg, "bad copy stream entry %s: %s", h->p ? h->p : num, why);
  fa_error(1, EINVAL, "unpack", h->p ? h->p : num, msg);
}

/* A JSON string at *s (the opening quote) into a malloc'd UTF-8 string (no NUL inside). */
static char *fa_jstr(const struct fa_hdr *h, const char **s, const char *end) {
  const char *p = *s + 1;
  struct fa_buf b = { 0 };
  fa_need(&b, 16);
  for (;;) {
    if (p >= end) fa_bad_entry(h, "unterminated string");
    unsigned char c = (unsigned char)*p;
    if (c == '"') { p++; break; }
    if (c < 0x20) fa_bad_entry(h, "control character in a string");
    if (c >= 0x80) {
      char t[5] = { 0 };
      memcpy(t, p, (size_t)(end - p) < 4 ? (size_t)(end - p) : 4);
      size_t n = fa_utf8((const unsigned char *)t);
      if (!n) fa_bad_entry(h, "a string that is not UTF-8");
      fa_add(&b, p, n); p += n; continue;
    }
    if (c != '\\') { fa_add(&b, p, 1); p++; continue; }
    if (++p >= end) fa_bad_entry(h, "unterminated string");
    char e = *p++, o = 0;
    switch (e) {
    case '"': o = '"'; break;
    case '\\': o = '\\'; break;
    case '/': o = '/'; break;
    case 'b': o = '\b'; break;
    case 'f': o = '\f'; break;
    case 'n': o = '\n'; break;
    case 'r': o = '\r'; break;
    case 't': o = '\t'; break;
    case 'u': break;
    default: fa_bad_entry(h, "bad escape in a string");
    }
    if (o) { fa_add(&b, &o, 1); continue; }
    unsigned cp = 0;
    for (int k = 0; k < 2; k++) {
      unsigned v = 0;
      if (end - p < 4) fa_bad_entry(h, "bad \\u escape");
      for (int i = 0; i < 4; i++) {
        char x = p[i];
        v = v * 16 + (unsigned)(x >= '0' && x <= '9' ? x - '0' : x >= 'a' && x <= 'f' ? x - 'a' + 10
                                : x >= 'A' && x <= 'F' ? x - 'A' + 10 : 99);
        if (v > 0xffff) fa_bad_entry(h, "bad \\u escape");
      }
      p += 4;
      if (k == 0 && v >= 0xd800 && v <= 0xdbff) { /* a high surrogate: its low one follows */
        if (end - p < 2 || p[0] != '\\' || p[1] != 'u') fa_bad_entry(h, "lone surrogate in a string");
        p += 2; cp = v; continue;
      }
      if (k == 1) {
        if (v < 0xdc00 || v > 0xdfff) fa_bad_entry(h, "lone surrogate in a string");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (v - 0xdc00);
      } else {
        if (v >= 0xdc00 && v <= 0xdfff) fa_bad_entry(h, "lone surrogate in a string");
        cp = v;
      }
      break;
    }
    if (cp == 0) fa_bad_entry(h, "NUL in a string");
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xc0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3f)); n = 2; }
    else if (cp < 0x10000) { u[0] = (char)(0xe0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[2] = (char)(0x80 | (cp & 0x3f)); n = 3; }
    else { u[0] = (char)(0xf0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3f)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[3] = (char)(0x80 | (cp & 0x3f)); n = 4; }
    fa_add(&b, u, n);
  }
  *s = p;
  return b.p;
}

/* A JSON number at *s: decimal digits only, no leading zero, at most max. */
static uint64_t fa_jnum(const struct fa_hdr *h, const char **s, const char *end, uint64_t max, const char *key) {
  const char *p = *s;
  uint64_t v = 0;
  char msg[64];
  snprintf(msg, sizeof msg, "\"%s\" must be a whole number up to %llu", key, (unsigned long long)max);
  if (p >= end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9')) fa_bad_entry(h, msg);
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (v > (max - (uint64_t)(*p - '0')) / 10) fa_bad_entry(h, msg);
    v = v * 10 + (uint64_t)(*p - '0');
  }
  if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) fa_bad_entry(h, msg);
  *s = p;
  return v;
}

static const char *fa_jws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
  return p;
}

/* Whether rel is a path a copy stream may hold: relative, no empty, `.` or `..` segment ("" for the root only). */
static int fa_rel_ok(const char *rel, char type) {
  if (!*rel) return type == 'd';
  if (*rel == '/' || strlen(rel) >= PATH_MAX) return 0;
  for (const char *s = rel;;) {
    const char *e = strchrnul(s, '/');
    size_t n = (size_t)(e - s);
    if (n == 0 || n > NAME_MAX || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
    if (!*e) return 1;
    s = e + 1;
  }
}

/* Parses header line [p, end) into h (index set by the caller); a bad one is fa_bad_entry. */
static void fa_parse_header(struct fa_hdr *h, const char *p, const char *end) {
  static const char *const keys = "ptmugsl";
  p = fa_jws(p, end);
  if (p >= end || *p != '{') fa_bad_entry(h, "a header is one JSON object on one line");
  p = fa_jws(p + 1, end);
  for (int first = 1; p < end && *p != '}'; first = 0) {
    if (!first) {
      if (*p != ',') fa_bad_entry(h, "expected , or } in the header");
      p = fa_jws(p + 1, end);
    }
    if (p >= end || *p != '"') fa_bad_entry(h, "expected a key in the header");
    char *key = fa_jstr(h, &p, end);
    const char *k = strlen(key) == 1 ? strchr(keys, key[0]) : NULL;
    if (!k) { char m[96]; snprintf(m, sizeof m, "unknown key \"%.40s\"", key); free(key); fa_bad_entry(h, m); }
    int bit = 1 << (k - keys);
    free(key);
    if (h->has & bit) fa_bad_entry(h, "a key given twice");
    h->has |= bit;
    p = fa_jws(p, end);
    if (p >= end || *p != ':') fa_bad_entry(h, "expected : in the header");
    p = fa_jws(p + 1, end);
    char c = *k;
    if (c == 'p' || c == 'l' || c == 't') {
      if (p >= end || *p != '"') { char m[64]; snprintf(m, sizeof m, "\"%c\" must be a string", c); fa_bad_entry(h, m); }
      char *v = fa_jstr(h, &p, end);
      if (c == 'p') h->p = v;
      else if (c == 'l') h->l = v;
      else {
        if (strcmp(v, "f") && strcmp(v, "d") && strcmp(v, "l")) { free(v); fa_bad_entry(h, "\"t\" must be \"f\", \"d\" or \"l\""); }
        h->t = v[0];
        free(v);
      }
    } else if (c == 'm') h->m = fa_jnum(h, &p, end, 07777, "m");
    else if (c == 'u') h->u = fa_jnum(h, &p, end, 0xfffffffe, "u");
    else if (c == 'g') h->g = fa_jnum(h, &p, end, 0xfffffffe, "g");
    else h->s = fa_jnum(h, &p, end, (uint64_t)1 << 53, "s");
    p = fa_jws(p, end);
  }
  if (p >= end || *p != '}') fa_bad_entry(h, "unterminated header");
  if (fa_jws(p + 1, end) != end) fa_bad_entry(h, "text after the header's object");
  if ((h->has & 0x3f) != 0x3f) fa_bad_entry(h, "a header needs p, t, m, u, g and s");
  if (!fa_rel_ok(h->p, h->t))
    fa_bad_entry(h, "the path must be relative, without empty, . or .. segments (\"\" only for the directory itself)");
  if (h->t == 'l' && (!h->l || !*h->l)) fa_bad_entry(h, "a symlink needs its target (\"l\")");
  if (h->t != 'l' && h->l) fa_bad_entry(h, "only a symlink has a target (\"l\")");
  if (h->t != 'f' && h->s) fa_bad_entry(h, "only a file has a size");
}

/* The next header of stdin into h; 0 at the end of the stream (EOF right after an entry). */
static int fa_next_header(struct fa_hdr *h) {
  size_t scanned = 0;
  for (;;) {
    char *nl = memchr(fa_in.buf + fa_in.pos + scanned, '\n', fa_in.len - fa_in.pos - scanned);
    if (nl) {
      fa_parse_header(h, fa_in.buf + fa_in.pos, nl);
      fa_in.pos = (size_t)(nl - fa_in.buf) + 1;
      return 1;
    }
    scanned = fa_in.len - fa_in.pos;
    if (scanned >= FA_MAX_HEADER) fa_bad_entry(h, "header line too long");
    if (fa_in_more() == 0) {
      if (scanned == 0) return 0;
      fa_bad_entry(h, "the stream ends inside a header");
    }
  }
}

/* Copies exactly n bytes of stdin (after what fa_in holds) to fd; EPIPE naming `path` when it ends first. */
static void fa_in_copy(int fd, uint64_t n, const char *path) {
  for (int spl = 1; n > 0; ) {
    if (fa_in.pos < fa_in.len) {
      size_t k = fa_in.len - fa_in.pos < n ? fa_in.len - fa_in.pos : (size_t)n;
      if (fa_write_all(fd, fa_in.buf + fa_in.pos, k) < 0) fa_fail(errno, "write", path);
      fa_in.pos += k; n -= k;
      continue;
    }
    fa_in.pos = fa_in.len = 0;
    if (spl && n >= 65536) { /* in the kernel, when stdin is a pipe */
      ssize_t r = splice(0, NULL, fd, NULL, n < (1u << 20) ? (size_t)n : (1u << 20), SPLICE_F_MOVE);
      if (r < 0 && errno == EINVAL) { spl = 0; continue; }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EAGAIN) { struct pollfd pf = { 0, POLLIN, 0 }; poll(&pf, 1, -1); continue; }
      if (r < 0) fa_fail(errno, "write", path);
      /* 0 is the end of stdin, but gVisor's splice also answers 0 where the pipe is only
       * empty for now: read() tells which. */
      if (r == 0) { spl = 0; continue; }
      n -= (uint64_t)r;
      continue;
    }
    if (fa_in_more() == 0) fa_error(1, EPIPE, "unpack", path, "the copy stream ends inside this file");
  }
}

/* The open parent directory of entry rel under root (its missing directories made 0755, root's),
 * never following a symlink; *leaf is rel's last name. The last parent's fd is kept for the next. */
static char *fa_par_rel;
static int fa_par_fd = -1;
static int fa_parent(int root, const char *rel, const char *shown, const char **leaf, int make) {
  const char *slash = strrchr(rel, '/');
  *leaf = slash ? slash + 1 : rel;
  size_t plen = slash ? (size_t)(slash - rel) : 0;
  if (plen == 0) return root;
  if (fa_par_rel && strlen(fa_par_rel) == plen && memcmp(fa_par_rel, rel, plen) == 0) return fa_par_fd;
  if (fa_par_fd >= 0) close(fa_par_fd);
  free(fa_par_rel);
  fa_par_rel = NULL; fa_par_fd = -1;
  char *parent = strndup(rel, plen);
  if (!parent) fa_fail(ENOMEM, "malloc", shown);
  int fd = root;
  for (char *c = parent, *next; c; c = next) {
    next = strchr(c, '/');
    if (next) *next++ = 0;
    int nfd = fa_opendir_nofollow(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0 && errno == ENOENT && make) {
      if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) fa_fail(errno, "mkdir", shown);
      nfd = fa_opendir_nofollow(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (nfd < 0 && (errno == ELOOP || errno == ENOTDIR))
      fa_error(1, ENOTDIR, "unpack", shown, "a directory above this entry is not a directory (symlinks are not followed)");
    if (nfd < 0) fa_fail(errno, "open", shown);
    if (fd != root) close(fd);
    fd = nfd;
  }
  for (size_t i = 0; i < plen; i++) if (!parent[i]) parent[i] = '/'; /* back to the whole parent path */
  fa_par_rel = parent; fa_par_fd = fd;
  return fd;
}

/* A name for a temp file beside `leaf` in fa_tmp (fa_tmp_dir = dir). */
static void fa_temp_name(int dir, const char *leaf, int tries) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r = (uint64_t)time(NULL) * 2654435761u + (uint64_t)tries;
  snprintf(fa_tmp, sizeof fa_tmp, ".%.200s.sandboxd-%d-%012llx", leaf, (int)getpid(), (unsigned long long)(r & 0xffffffffffffull));
  fa_tmp_dir = dir;
}

struct fa_later { char *rel; unsigned mode; };

/* unpack <dest>: see the top. */
static int fa_unpack(char *dest) {
  if (dest[0] != '/') fa_error(1, EINVAL, "unpack", dest, "the destination must be an absolute path");
  fa_mkparents(dest);
  if (mkdir(dest, 0755) < 0 && errno != EEXIST) fa_fail(errno, "mkdir", dest);
  int root = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) fa_fail(errno, "open", dest);
  struct sigaction sa = { .sa_handler = fa_on_signal };
  sigset_t sigs;
  sigfillset(&sa.sa_mask); sigemptyset(&sigs);
  for (int i = 0, sig[] = { SIGTERM, SIGHUP, SIGINT, SIGPIPE }; i < 4; i++) { sigaction(sig[i], &sa, NULL); sigaddset(&sigs, sig[i]); }
  struct fa_later *later = NULL;
  size_t nlater = 0, caplater = 0;
  uint64_t n = 0, bytes = 0;
  for (;; n++) {
    struct fa_hdr h = { .index = n };
    if (!fa_next_header(&h)) break;
    char *shown = *h.p ? fa_join(dest, h.p) : strdup(dest);
    if (!shown) fa_fail(ENOMEM, "malloc", dest);
    const char *leaf = NULL;
    int dir = *h.p ? fa_parent(root, h.p, shown, &leaf, 1) : root;
    struct stat st;
    int exists = leaf && fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (leaf && !exists && errno != ENOENT) fa_fail(errno, "lstat", shown);
    if (h.t == 'd') {
      if (exists && !S_ISDIR(st.st_mode))
        fa_error(1, ENOTDIR, "unpack", shown, "a directory entry where something else exists (it is not replaced)");
      if (leaf && !exists && mkdirat(dir, leaf, 0700) < 0) fa_fail(errno, "mkdir", shown);
      int fd = leaf ? fa_opendir_nofollow(dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : root;
      if (fd < 0) fa_fail(errno, "open", shown);
      if (fchown(fd, (uid_t)h.u, (gid_t)h.g) < 0) fa_fail(errno, "chown", shown);
      if (fd != root) close(fd);
      /* Its mode once what it holds is written: a 0555 directory is filled first. */
      if (nlater == caplater && !(later = realloc(later, (caplater = caplater ? 2 * caplater : 64) * sizeof *later)))
        fa_fail(ENOMEM, "malloc", shown);
      later[nlater].rel = h.p; later[nlater].mode = (unsigned)h.m; nlater++;
      h.p = NULL;
    } else {
      if (exists && S_ISDIR(st.st_mode))
        fa_error(1, EISDIR, "unpack", shown, h.t == 'f' ? "a file entry where a directory exists" : "a symlink entry where a directory exists");
      sigprocmask(SIG_BLOCK, &sigs, NULL); /* the temp's name is known to the handlers before it exists */
      int fd = -1;
      for (int tries = 0; tries < 16; tries++) {
        fa_temp_name(dir, leaf, tries);
        if (h.t == 'f') fd = openat(dir, fa_tmp, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
        else fd = symlinkat(h.l, dir, fa_tmp);
        if (fd >= 0 || errno != EEXIST) break;
      }
      if (fd < 0) { int e = errno; fa_tmp[0] = 0; fa_fail(e, h.t == 'f' ? "open" : "symlink", shown); }
      sigprocmask(SIG_UNBLOCK, &sigs, NULL);
      if (h.t == 'f') {
        fa_in_copy(fd, h.s, shown);
        /* Owner first: a chown clears the setuid and setgid bits. */
        if (fchown(fd, (uid_t)h.u, (gid_t)h.g) < 0) fa_fail(errno, "chown", shown);
        if (fchmod(fd, (mode_t)h.m) < 0) fa_fail(errno, "chmod", shown);
        if (close(fd) < 0) fa_fail(errno, "close", shown);
        bytes += h.s;
      } else if (fchownat(dir, fa_tmp, (uid_t)h.u, (gid_t)h.g, AT_SYMLINK_NOFOLLOW) < 0) fa_fail(errno, "chown", shown);
      if (renameat(dir, fa_tmp, dir, leaf) < 0) fa_fail(errno, "rename", shown);
      fa_tmp[0] = 0;
    }
    free(h.p); free(h.l); free(shown);
  }
  for (size_t i = nlater; i-- > 0; ) { /* deepest last written first */
    char *shown = *later[i].rel ? fa_join(dest, later[i].rel) : strdup(dest);
    if (!shown) fa_fail(ENOMEM, "malloc", dest);
    const char *leaf = NULL;
    int dir = *later[i].rel ? fa_parent(root, later[i].rel, shown, &leaf, 0) : root;
    int fd = leaf ? fa_opendir_nofollow(dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : root;
    if (fd < 0) fa_fail(errno, "open", shown);
    if (fchmod(fd, (mode_t)later[i].mode) < 0) fa_fail(errno, "chmod", shown);
    if (fd != root) close(fd);
    free(shown); free(later[i].rel);
  }
  free(later);
  fa_fmt(&fa_out, "{\"entries\":%llu,\"bytes\":%llu}\n", (unsigned long long)n, (unsigned long long)bytes);
  fa_flush_or_fail();
  return 0;
}

/* The header of one entry of pack to fa_out; names that are not UTF-8 cannot be carried (EILSEQ). */
static void fa_pack_header(const char *rel, const char *shown, const struct stat *st, char t, const char *target) {
  if (!fa_valid_utf8(rel, strlen(rel)))
    fa_error(1, EILSEQ, "pack", shown, "a name that is not UTF-8 cannot be copied");
  if (target && !fa_valid_utf8(target, strlen(target)))
    fa_error(1, EILSEQ, "pack", shown, "a symlink target that is not UTF-8 cannot be copied");
  fa_str(&fa_out, "{\"p\":"); fa_json(&fa_out, rel);
  fa_fmt(&fa_out, ",\"t\":\"%c\",\"m\":%u,\"u\":%u,\"g\":%u,\"s\":%llu", t, (unsigned)(st->st_mode & 07777),
         (unsigned)st->st_uid, (unsigned)st->st_gid, t == 'f' ? (unsigned long long)st->st_size : 0ull);
  if (target) { fa_str(&fa_out, ",\"l\":"); fa_json(&fa_out, target); }
  fa_str(&fa_out, "}\n");
}

/* A file entry: header then exactly st_size bytes of fd (EIO, exit 3, when it shrank meanwhile). */
static void fa_pack_file(int fd, const char *rel, const char *shown, const struct stat *st) {
  fa_pack_header(rel, shown, st, 'f', NULL);
  uint64_t size = (uint64_t)st->st_size;
  if (size <= 65536) { /* small: with the header, one write for many files */
    fa_need(&fa_out, (size_t)size);
    for (uint64_t got = 0; got < size; ) {
      ssize_t r = pread(fd, fa_out.p + fa_out.len, (size_t)(size - got), (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fa_fail(errno, "read", shown);
      if (r == 0) fa_error(3, EIO, "pack", shown, "the file shrank while it was copied");
      fa_out.len += (size_t)r; got += (uint64_t)r;
    }
    if (fa_out.len >= FA_CHUNK) fa_flush_or_fail();
    return;
  }
  fa_flush_or_fail();
  off_t off = 0;
  for (int sf = 1; (uint64_t)off < size; ) {
    size_t want = size - (uint64_t)off > (1u << 30) ? (1u << 30) : (size_t)(size - (uint64_t)off);
    ssize_t r;
    if (sf) {
      r = sendfile(1, fd, &off, want);
      if (r < 0 && (errno == EINVAL || errno == ENOSYS) && off == 0) { sf = 0; continue; }
      if (r < 0 && errno == EAGAIN) { struct pollfd pf = { 1, POLLOUT, 0 }; poll(&pf, 1, -1); continue; }
    } else {
      r = pread(fd, fa_io, want < sizeof fa_io ? want : sizeof fa_io, off);
      if (r > 0 && fa_write_all(1, fa_io, (size_t)r) < 0) fa_fail(errno, "write", "<stdout>");
      if (r > 0) off += r;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fa_fail(errno, sf ? "sendfile" : "read", shown);
    if (r == 0) fa_error(3, EIO, "pack", shown, "the file shrank while it was copied");
  }
}

/* The entries below directory fd (rel: its path in the stream, shown: in the sandbox), pre-order, sorted by
 * name; symlinks never followed, directories of another file system (a mount) listed but not entered. */
static void fa_pack_dir(int fd, const char *rel, const char *shown, dev_t dev, int depth) {
  char **names;
  ssize_t n = fa_names(fd, &names);
  if (n < 0) fa_fail(errno, "readdir", shown);
  for (ssize_t i = 0; i < n; i++) {
    struct stat st;
    char *r = *rel ? fa_join(rel, names[i]) : strdup(names[i]);
    char *s = fa_join(shown, names[i]);
    if (!r || !s) fa_fail(ENOMEM, "malloc", shown);
    if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) fa_fail(errno, "lstat", s); /* ENOENT: gone meanwhile */
    } else if (S_ISDIR(st.st_mode)) {
      fa_pack_header(r, s, &st, 'd', NULL);
      if (st.st_dev == dev) {
        if (depth >= FA_MAX_DEPTH) fa_error(1, ELOOP, "pack", s, "directories nested too deep");
        int c = fa_opendir_nofollow(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (c < 0) fa_fail(errno, "open", s);
        fa_pack_dir(c, r, s, dev, depth + 1);
        close(c);
      }
    } else if (S_ISREG(st.st_mode)) {
      int c = openat(fd, names[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
      if (c < 0) fa_fail(errno, "open", s);
      if (fstat(c, &st) < 0) fa_fail(errno, "fstat", s);
      fa_pack_file(c, r, s, &st);
      close(c);
    } else if (S_ISLNK(st.st_mode)) {
      char *t = fa_readlink(fd, names[i]);
      if (!t) fa_fail(errno ? errno : EIO, "readlink", s);
      fa_pack_header(r, s, &st, 'l', t);
      free(t);
    } /* sockets, FIFOs and devices are no part of a copy */
    free(r); free(s);
    if (fa_out.len >= FA_CHUNK) fa_flush_or_fail();
  }
  fa_free_names(names, n);
}

/* pack <path> <follow>: see the top. */
static int fa_pack(const char *path, int follow) {
  struct stat st;
  if ((follow ? stat(path, &st) : lstat(path, &st)) < 0) fa_fail(errno, "lstat", path);
  if (S_ISLNK(st.st_mode)) {
    char *t = fa_readlink(AT_FDCWD, path);
    if (!t) fa_fail(errno ? errno : EIO, "readlink", path);
    fa_pack_header(fa_base(path), path, &st, 'l', t);
    free(t);
  } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    int dir = S_ISDIR(st.st_mode);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (dir ? O_DIRECTORY : 0) | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0) fa_fail(errno, "open", path);
    if (fstat(fd, &st) < 0) fa_fail(errno, "fstat", path);
    if (dir != S_ISDIR(st.st_mode) || (!dir && !S_ISREG(st.st_mode))) fa_error(1, EAGAIN, "pack", path, "it changed while it was opened");
    if (dir) {
      fa_pack_header("", path, &st, 'd', NULL);
      fa_pack_dir(fd, "", path, st.st_dev, 1);
    } else fa_pack_file(fd, fa_base(path), path, &st);
    close(fd);
  } else fa_error(1, EINVAL, "pack", path, "only files, directories and symlinks can be copied");
  fa_flush_or_fail();
  return 0;
}

static int files_main(int argc, char **argv) {
  umask(0); /* modes are exactly as the contract says */
  const char *op = argc > 0 ? argv[0] : "";
  int n = argc - 1;
  char *p = n >= 1 ? fa_norm(argv[1]) : NULL;
  if (strcmp(op, "stat") == 0 && n == 1) return fa_print_entry(p);
  if (strcmp(op, "whoami") == 0 && argc == 1) return fa_whoami();
  if (strcmp(op, "list") == 0 && (n == 2 || n == 3)) {
    struct fa_list L = { (long)fa_arg_num(argv[2], 1, 1000000, "bad depth"),
                         n == 3 ? (long)fa_arg_num(argv[3], 0, LONG_MAX, "bad max") : 10000, 0, 0 };
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK); /* the root may be a symlink */
    if (fd < 0) fa_fail(errno, "open", p);
    fa_list_dir(&L, fd, p, 1);
    if (L.truncated) fa_str(&fa_out, "{\"truncated\":true}\n");
    fa_flush_or_fail();
    return 0;
  }
  if (strcmp(op, "mkdir") == 0 && n == 1) {
    fa_mkparents(p);
    if (mkdir(p, 0755) < 0) fa_fail(errno, "mkdir", p);
    return fa_print_entry(p);
  }
  if (strcmp(op, "remove") == 0 && n == 1) { if (fa_remove(p) < 0) fa_fail(rm_errno, rm_op, rm_errpath.p); return 0; }
  if (strcmp(op, "move") == 0 && n == 2) return fa_move(p, fa_norm(argv[2]));
  if (strcmp(op, "read") == 0 && n == 2) return fa_read(p, argv[2]);
  if (strcmp(op, "write") == 0 && n >= 3) return fa_write(p, argv[2], argv[3], argv + 4, n - 3);
  if (strcmp(op, "mkdirs") == 0 && n == 4) {
    if (strcmp(argv[4], "0") != 0 && strcmp(argv[4], "1") != 0) fa_usage("self must be 0 or 1");
    return fa_mkdirs(p, (uid_t)fa_arg_num(argv[2], 0, 0xfffffffe, "bad uid"),
                     (gid_t)fa_arg_num(argv[3], 0, 0xfffffffe, "bad gid"), argv[4][0] == '1');
  }
  if (strcmp(op, "watch") == 0 && n == 2) {
    if (strcmp(argv[2], "0") != 0 && strcmp(argv[2], "1") != 0) fa_usage("recursive must be 0 or 1");
    fa_recursive = argv[2][0] == '1';
    return fa_watch(p);
  }
  if (strcmp(op, "unpack") == 0 && n == 1) return fa_unpack(p);
  if (strcmp(op, "pack") == 0 && n == 2) {
    if (strcmp(argv[2], "0") != 0 && strcmp(argv[2], "1") != 0) fa_usage("follow must be 0 or 1");
    return fa_pack(p, argv[2][0] == '1');
  }
  fa_usage("usage: file stat|list|mkdir|mkdirs|move|remove|read|write|watch|unpack|pack <path> ... | whoami");
}

#endif
