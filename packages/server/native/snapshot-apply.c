/* libc: musl */
/*
 * snapshot-apply: applies a sandbox's overlay upper layer onto a flattened image tree, for
 * the local runtime's snapshots (runtime/local/images/snapshots.ts).
 *
 *   snapshot-apply <source> <mnt> <out> <uidBase> <size>
 *       <source>  the sandbox's root layer: a block device (the loop device the running
 *                 sandbox's ext4 lives on) or an ext4 image file (attached read-only)
 *       <mnt>     an empty directory to mount it at
 *       <out>     the new image's rootfs: a hard-link copy of the base image's rootfs
 *                 (`cp -a --link`), changed here only by replacing entries, never by writing
 *                 to or changing an existing file (its inodes are the base image's)
 *       <uidBase> <size>  the sandbox's id range: host id uidBase+n is n in the image; ids
 *                 outside the range become 65534
 *
 * Everything happens in a private mount namespace of this process: the mount of the layer
 * never shows on the host and goes with the process (a crash leaves nothing mounted; a
 * loop device attached here has autoclear). A block device already mounted (by the
 * sandbox) is mounted again at the same superblock, so the view is the sandbox's own
 * (its page cache included), then made read-only per mount.
 *
 * `layer/upper` is applied to <out>: a whiteout (char device 0:0) deletes the path, a
 * directory with trusted.overlay.opaque=y replaces the base directory's contents, every
 * other entry replaces the base's (files copied, holes kept; hard links inside the layer
 * kept). Owners shifted back, modes (setuid bits included), mtimes, and the xattrs
 * security.capability (root id shifted), system.posix_acl_* (ids shifted) and user.*.
 * Redirects and metacopy (overlay features sandboxd does not turn on) are refused.
 *
 * On success prints `{"bytes":N,"files":N,"whiteouts":N}` (bytes: apparent size of the
 * files and symlinks copied). Exit 0 on success; otherwise one line on stderr and exit 1.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define HELPER_NAME "snapshot-apply"
#include "die.h"

#include "loop-attach.h"

static unsigned long long base_id, range;
static unsigned long long total_bytes, total_files, total_whiteouts;

static unsigned long long shift(unsigned long long id) {
  return id >= base_id && id < base_id + range ? id - base_id : 65534;
}

/* Hard links inside the layer: (dev, ino) of the upper file -> path of its copy. */
struct link { dev_t dev; ino_t ino; char *path; };
static struct link *links;
static size_t nlinks, caplinks;

static const char *link_find(const struct stat *st) {
  for (size_t i = 0; i < nlinks; i++)
    if (links[i].dev == st->st_dev && links[i].ino == st->st_ino) return links[i].path;
  return NULL;
}

static void link_add(const struct stat *st, const char *path) {
  if (nlinks == caplinks) {
    caplinks = caplinks ? caplinks * 2 : 64;
    links = realloc(links, caplinks * sizeof *links);
    if (!links) die("out of memory");
  }
  links[nlinks].dev = st->st_dev;
  links[nlinks].ino = st->st_ino;
  links[nlinks].path = strdup(path);
  nlinks++;
}

/* Removes entry `name` of dir fd `dir` (a whole tree for a directory). Never follows symlinks. */
static void remove_entry(int dir, const char *name, const char *path) {
  struct stat st;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW)) {
    if (errno == ENOENT) return;
    die("stat %s", path);
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) die("open %s", path);
    DIR *d = fdopendir(fd);
    if (!d) die("opendir %s", path);
    struct dirent *e;
    char sub[PATH_MAX];
    while ((errno = 0, e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      remove_entry(dirfd(d), e->d_name, sub);
    }
    if (errno) die("readdir %s", path);
    closedir(d);
    if (unlinkat(dir, name, AT_REMOVEDIR)) die("rmdir %s", path);
  } else if (unlinkat(dir, name, 0)) {
    die("unlink %s", path);
  }
}

/* The value of xattr `name` of `fd`, or NULL (sets *len). */
static char *get_xattr(int fd, const char *name, ssize_t *len) {
  ssize_t n = fgetxattr(fd, name, NULL, 0);
  if (n < 0) return NULL;
  char *v = malloc(n + 1);
  if (!v) die("out of memory");
  n = fgetxattr(fd, name, v, n);
  if (n < 0) { free(v); return NULL; }
  v[n] = 0;
  *len = n;
  return v;
}

/* Little-endian 32-bit helpers for the capability and ACL formats. */
static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static void put_le32(unsigned char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }

/*
 * Copies the xattrs that matter from `src` to `dst` (both open fds; `dst` already chowned,
 * which drops security.capability). `path` is for messages.
 */
static void copy_xattrs(int src, int dst, const char *path, int is_dir) {
  ssize_t n = flistxattr(src, NULL, 0);
  if (n < 0) { if (errno == ENOTSUP) return; die("listxattr %s", path); }
  if (n == 0) return;
  char *names = malloc(n);
  if (!names) die("out of memory");
  n = flistxattr(src, names, n);
  if (n < 0) die("listxattr %s", path);
  for (char *name = names; name < names + n; name += strlen(name) + 1) {
    if (!strncmp(name, "trusted.overlay.", 16)) {
      const char *what = name + 16;
      if (!strcmp(what, "redirect") || !strcmp(what, "metacopy")) {
        errno = 0;
        die("%s has overlay %s (not supported)", path, what);
      }
      continue; /* opaque handled by the caller; origin, impure, ...: overlay's own */
    }
    int cap = !strcmp(name, "security.capability");
    int acl = !strcmp(name, "system.posix_acl_access") || (is_dir && !strcmp(name, "system.posix_acl_default"));
    if (!cap && !acl && strncmp(name, "user.", 5)) continue;
    ssize_t len;
    unsigned char *v = (unsigned char *)get_xattr(src, name, &len);
    if (!v) continue;
    if (cap && len == 24 && (le32(v) & 0xFF000000u) == 0x03000000u) {
      /* VFS_CAP_REVISION_3: the root id of the namespace the caps are for, a host id. */
      uint32_t root = le32(v + 20);
      if (root < base_id || root >= base_id + range) { free(v); continue; } /* not for this sandbox */
      root -= base_id;
      if (root == 0) { put_le32(v, (le32(v) & 0x00FFFFFFu) | 0x02000000u); len = 20; } /* v2 */
      else put_le32(v + 20, root);
    }
    if (acl && len >= 4) {
      /* posix_acl_xattr: u32 version, then entries of u16 tag, u16 perm, u32 id. */
      for (ssize_t off = 4; off + 8 <= len; off += 8) {
        unsigned tag = v[off] | v[off + 1] << 8;
        if (tag == 0x02 || tag == 0x08) put_le32(v + off + 4, shift(le32(v + off + 4))); /* ACL_USER, ACL_GROUP */
      }
    }
    if (fsetxattr(dst, name, v, len, 0)) die("setxattr %s on %s", name, path);
    free(v);
  }
  free(names);
}

/* Owner, mode, xattrs, times of `st` (the upper entry's) onto open fd `dst`. Order matters:
 * chown clears setuid bits and file capabilities. */
static void set_meta_fd(int src, int dst, const struct stat *st, const char *path) {
  if (fchown(dst, shift(st->st_uid), shift(st->st_gid))) die("chown %s", path);
  if (fchmod(dst, st->st_mode & 07777)) die("chmod %s", path);
  copy_xattrs(src, dst, path, S_ISDIR(st->st_mode));
  struct timespec t[2] = {st->st_atim, st->st_mtim};
  if (futimens(dst, t)) die("utimes %s", path);
}

/* Copies regular file data, keeping holes. */
static void copy_data(int in, int out, off_t size, const char *path) {
  off_t pos = 0;
  char *buf = NULL;
  while (pos < size) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0) { if (errno == ENXIO) break; die("seek %s", path); }
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) die("seek %s", path);
    off_t at = data;
    while (at < hole) {
      off_t ia = at, oa = at;
      ssize_t n = copy_file_range(in, &ia, out, &oa, hole - at, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        if (!buf && !(buf = malloc(1 << 20))) die("out of memory");
        size_t want = hole - at < (1 << 20) ? (size_t)(hole - at) : (1 << 20);
        n = pread(in, buf, want, at);
        if (n > 0 && pwrite(out, buf, n, at) != n) die("write %s", path);
      }
      if (n < 0) die("copy %s", path);
      if (n == 0) break; /* file shrank meanwhile */
      at += n;
    }
    pos = hole;
  }
  free(buf);
  if (ftruncate(out, size)) die("truncate %s", path);
}

/* Applies upper dir fd `up` onto out dir fd `out`; `path` is the out dir's path. */
static void apply_dir(int up, int out, const char *path) {
  int fd = dup(up);
  if (fd < 0) die("dup");
  DIR *d = fdopendir(fd);
  if (!d) die("opendir upper of %s", path);
  struct dirent *e;
  char sub[PATH_MAX];
  while ((errno = 0, e = readdir(d))) {
    const char *name = e->d_name;
    if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
    if (snprintf(sub, sizeof sub, "%s/%s", path, name) >= (int)sizeof sub) { errno = ENAMETOOLONG; die("%s", path); }
    struct stat st, ot;
    if (fstatat(up, name, &st, AT_SYMLINK_NOFOLLOW)) die("stat upper of %s", sub);
    int have = fstatat(out, name, &ot, AT_SYMLINK_NOFOLLOW) == 0;
    if (!have && errno != ENOENT) die("stat %s", sub);
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) { /* whiteout */
      if (have) remove_entry(out, name, sub);
      total_whiteouts++;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      int cu = openat(up, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cu < 0) die("open upper of %s", sub);
      ssize_t len;
      char *opq = get_xattr(cu, "trusted.overlay.opaque", &len);
      int opaque = opq && len >= 1 && opq[0] == 'y';
      free(opq);
      if (have && (!S_ISDIR(ot.st_mode) || opaque)) { remove_entry(out, name, sub); have = 0; }
      if (!have && mkdirat(out, name, 0700)) die("mkdir %s", sub);
      int co = openat(out, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (co < 0) die("open %s", sub);
      apply_dir(cu, co, sub);
      set_meta_fd(cu, co, &st, sub); /* after the children: they change the mtime */
      close(co);
      close(cu);
      continue;
    }
    if (have) remove_entry(out, name, sub); /* replace, never change: the base's inodes are shared */
    if (S_ISREG(st.st_mode)) {
      const char *first = st.st_nlink > 1 ? link_find(&st) : NULL;
      if (first) {
        if (linkat(AT_FDCWD, first, out, name, 0)) die("link %s", sub);
        continue;
      }
      int in = openat(up, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (in < 0) die("open upper of %s", sub);
      int o = openat(out, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (o < 0) die("create %s", sub);
      copy_data(in, o, st.st_size, sub);
      set_meta_fd(in, o, &st, sub);
      close(o);
      close(in);
      if (st.st_nlink > 1) link_add(&st, sub);
      total_bytes += st.st_size;
      total_files++;
    } else if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX + 1];
      ssize_t n = readlinkat(up, name, target, PATH_MAX);
      if (n < 0) die("readlink upper of %s", sub);
      target[n] = 0;
      if (symlinkat(target, out, name)) die("symlink %s", sub);
      if (fchownat(out, name, shift(st.st_uid), shift(st.st_gid), AT_SYMLINK_NOFOLLOW)) die("chown %s", sub);
      struct timespec t[2] = {st.st_atim, st.st_mtim};
      if (utimensat(out, name, t, AT_SYMLINK_NOFOLLOW)) die("utimes %s", sub);
      total_bytes += st.st_size;
      total_files++;
    } else {
      /* fifo, socket, device (a sandbox cannot make usable devices; copied as they are) */
      if (mknodat(out, name, st.st_mode & (S_IFMT | 07777), st.st_rdev)) die("mknod %s", sub);
      if (fchownat(out, name, shift(st.st_uid), shift(st.st_gid), AT_SYMLINK_NOFOLLOW)) die("chown %s", sub);
      if (fchmodat(out, name, st.st_mode & 07777, 0)) die("chmod %s", sub);
      struct timespec t[2] = {st.st_atim, st.st_mtim};
      if (utimensat(out, name, t, AT_SYMLINK_NOFOLLOW)) die("utimes %s", sub);
      total_files++;
    }
  }
  if (errno) die("readdir upper of %s", path);
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    errno = 0;
    die("usage: snapshot-apply <block device | image file> <mnt> <out> <uidBase> <size>");
  }
  const char *source = argv[1], *mnt = argv[2], *out = argv[3];
  char *end;
  base_id = strtoull(argv[4], &end, 10);
  if (*end || !*argv[4]) { errno = 0; die("bad uidBase %s", argv[4]); }
  range = strtoull(argv[5], &end, 10);
  if (*end || !*argv[5] || range == 0) { errno = 0; die("bad size %s", argv[5]); }

  if (unshare(CLONE_NEWNS)) die("unshare mount namespace");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) die("make / private");
  struct stat sst;
  if (stat(source, &sst)) die("stat %s", source);
  const unsigned long flags = MS_NODEV | MS_NOSUID | MS_NOEXEC;
  if (S_ISBLK(sst.st_mode)) {
    /* Mounted read-write by the sandbox: the same superblock must be asked for read-write
     * (the kernel will not switch it); read-only is then set on this mount alone. */
    if (mount(source, mnt, "ext4", flags, NULL)) die("mount %s", source);
    if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, NULL)) die("remount %s read-only", mnt);
  } else if (S_ISREG(sst.st_mode)) {
    char dev[64];
    int lfd = loop_attach(source, 1, 0, dev, sizeof dev);
    if (mount(dev, mnt, "ext4", flags | MS_RDONLY, NULL)) die("mount %s (%s)", source, dev);
    close(lfd);
  } else {
    errno = 0;
    die("%s is neither a block device nor a file", source);
  }

  char upper[PATH_MAX];
  snprintf(upper, sizeof upper, "%s/layer/upper", mnt);
  int up = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (up < 0) die("open %s", upper);
  int o = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (o < 0) die("open %s", out);
  struct stat st;
  if (fstat(up, &st)) die("stat %s", upper);
  apply_dir(up, o, out);
  set_meta_fd(up, o, &st, out);
  if (syncfs(o)) die("syncfs %s", out);
  printf("{\"bytes\":%llu,\"files\":%llu,\"whiteouts\":%llu}\n", total_bytes, total_files, total_whiteouts);
  return 0;
}
