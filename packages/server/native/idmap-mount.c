/* libc: musl */
/*
 * idmap-mount: sandboxd's mount helper for the local (crun) runtime.
 *
 *   idmap-mount bind   <uidBase> <size> <src> <dst> [<src> <dst>]...
 *       Idmapped bind of each <src> at <dst> (which must exist): id N on disk shows as
 *       uidBase+N (0 <= N < size) through the new mount, and writes by host uid uidBase+N
 *       land on disk as N. One short-lived child provides the user namespace.
 *   idmap-mount loopmount <image> <dst> <ext4 options>
 *       Attaches <image> to a free loop device (autoclear) and mounts it as ext4 at <dst>
 *       with nodev,nosuid. The loop device goes away with the last unmount.
 *   idmap-mount rootfs <template> <dir> <uidBase> <size> <lowerDir> [<volume>...]
 *       Per-sandbox root layer (layout in rootfs/roots.ts): sparse copy of <template> to <dir>.img,
 *       loop-mounted at <dir> (made 0710 root:uidBase), layer/upper owned by uidBase,
 *       <lowerDir> idmapped read-only at <dir>/lower, each <volume> idmapped at
 *       <dir>/volumes/<index>, overlayfs at <dir>/rootfs, then <dir>/lower detached again
 *       (overlayfs keeps its own private clone of each layer). Prints the loop device.
 *       <template> "-": the layer <dir>.img exists (a stopped sandbox's, kept): it is mounted
 *       as it is, existing volumes/<index> dirs are reused, and overlayfs's "volatile" marker
 *       (layer/work/work/incompat/volatile, left by the earlier volatile mount) is removed
 *       first: the caller guarantees that the layer's ext4 was unmounted cleanly since.
 *   idmap-mount cgroup-view <controller>[,<controller>...] -- <program> [<arg>...]
 *       Runs <program> (crun run) in a private copy of the mount namespace whose
 *       /sys/fs/cgroup (a cgroup v1 or hybrid layout) holds only the v1 hierarchies of the
 *       listed controllers: crun makes a container cgroups where it finds a hierarchy, so
 *       it makes none in the others, nor a cgroup2 group (on a hybrid host crun refuses a
 *       cgroup2 mount that holds a controller, and otherwise makes a cgroup2 group per
 *       container, which every v1 cgroup mount then walks). One process instead of
 *       unshare + sh + umount. <program> runs from a read-only bind of its binary, so that
 *       crun need not copy and re-execute itself (see readonly_self).
 *   idmap-mount inject <pid> <uidBase> <src> <dst> [<src> <dst>]...
 *       Mounts each <src> (a host directory, e.g. a mounted volume) at <dst> inside the
 *       running sandbox whose init is host process <pid>: an idmapped (through the sandbox's
 *       own user namespace), nosuid, nodev bind made on the host, then moved into the
 *       sandbox's mount namespace, where missing components of <dst> are made (mode 0755,
 *       owned by the sandbox's root, host uid <uidBase>). Paths resolve inside the sandbox.
 *   idmap-mount loop-remove <n>...
 *       Removes each loop device /dev/loop<n> that is unbound and not open
 *       (LOOP_CTL_REMOVE), each under the same lock on /dev/loop-control as the attaches; a
 *       bound, open or missing one is left as it is. The kernel adds a loop device whenever
 *       none is free and keeps it after its detach (~60 KiB each): the test and benchmark
 *       scripts remove the ones their run made. Prints how many went.
 *   idmap-mount umount [--strict] [--shutdown=<ext4 root>] <path>...
 *       Unmounts each path in order; a busy mount is detached lazily, or with --strict left
 *       mounted (exit 1, "Device or resource busy"). Not mounted or missing: ignored.
 *       --shutdown first makes the ext4 mounted at that path drop all unwritten data (only
 *       for throw-away file systems: unmounting is then instant).
 *
 * Exit 0 on success; otherwise one line on stderr and exit 1. Nothing is rolled back here:
 * the caller cleans up from what /proc/self/mountinfo and /sys/block/loop* show.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __GLIBC__
/* musl (this helper's libc, see native.ts) has no wrappers for the new mount API, which
 * glibc has had since 2.36: the raw system calls. */
#include <linux/mount.h>
#include <sys/syscall.h>
static int open_tree(int dfd, const char *path, unsigned flags) {
  return (int)syscall(SYS_open_tree, dfd, path, flags);
}
static int move_mount(int from_dfd, const char *from, int to_dfd, const char *to, unsigned flags) {
  return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags);
}
static int mount_setattr(int dfd, const char *path, unsigned flags, struct mount_attr *attr, size_t size) {
  return (int)syscall(SYS_mount_setattr, dfd, path, flags, attr, size);
}
#endif

#ifndef EXT4_SUPER_MAGIC
#define EXT4_SUPER_MAGIC 0xEF53
#endif
#define EXT4_IOC_SHUTDOWN _IOR('X', 125, unsigned int)
#define EXT4_GOING_FLAGS_NOLOGFLUSH 0x2

#define HELPER_NAME "idmap-mount"
#include "die.h"

#include "loop-attach.h"

static unsigned long num(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || end == s) { errno = 0; die("bad %s '%s'", what, s); }
  return v;
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die("open %s", path);
  ssize_t n = write(fd, text, strlen(text));
  if (n != (ssize_t)strlen(text)) die("write %s", path);
  close(fd);
}

/* A user namespace mapping 0..size-1 to uidBase.. (uids and gids); returns its fd. */
static int make_userns(unsigned long base, unsigned long size) {
  int go[2];
  if (pipe2(go, O_CLOEXEC)) die("pipe");
  int ready[2];
  if (pipe2(ready, O_CLOEXEC)) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(go[1]);
    close(ready[0]);
    char c = unshare(CLONE_NEWUSER) ? 'x' : 'k';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    if (read(go[0], &c, 1) < 0) _exit(1); /* wait until the parent holds the ns fd */
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char c = 0;
  if (read(ready[0], &c, 1) != 1 || c != 'k') { errno = 0; die("child could not unshare a user namespace"); }
  char path[64], map[96];
  snprintf(map, sizeof map, "0 %lu %lu\n", base, size);
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open %s", path);
  close(go[1]); /* child sees EOF and exits */
  close(ready[0]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
  return fd;
}

static void idmapped_bind(int userns, const char *src, const char *dst, unsigned long long extra) {
  int fd = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0) die("open_tree %s", src);
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | extra, .userns_fd = (unsigned long long)userns };
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof attr)) die("mount_setattr idmap %s", src);
  if (move_mount(fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount to %s", dst);
  close(fd);
}

/* Mounts <image> at <dst> through a loop device, whose path it writes to dev[64]. */
static void loop_mount(const char *image, const char *dst, const char *opts, char dev[64]) {
  int lfd = loop_attach(image, 0, LO_FLAGS_DIRECT_IO, dev, 64);
  if (mount(dev, dst, "ext4", MS_NODEV | MS_NOSUID, opts)) die("mount %s (%s) at %s", image, dev, dst);
  close(lfd); /* the mount holds the device now; autoclear detaches it on the last unmount */
}

/* Sparse copy: only the data extents of src are copied; holes stay holes. */
static void sparse_copy(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) die("open %s", src);
  struct stat st;
  if (fstat(in, &st)) die("stat %s", src);
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) die("create %s", dst);
  if (ftruncate(out, st.st_size)) die("truncate %s", dst);
  off_t pos = 0;
  while (pos < st.st_size) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0) { if (errno == ENXIO) break; die("SEEK_DATA %s", src); }
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) die("SEEK_HOLE %s", src);
    off_t ip = data, op = data;
    while (ip < hole) {
      ssize_t n = copy_file_range(in, &ip, out, &op, (size_t)(hole - ip), 0);
      if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)) {
        char buf[65536]; /* file systems without copy_file_range between them */
        size_t want = (size_t)(hole - ip) < sizeof buf ? (size_t)(hole - ip) : sizeof buf;
        n = pread(in, buf, want, ip);
        if (n > 0 && pwrite(out, buf, (size_t)n, op) != n) die("write %s", dst);
        if (n > 0) { ip += n; op += n; }
      }
      if (n < 0) die("copy %s", dst);
      if (n == 0) break;
    }
    pos = hole;
  }
  close(in);
  if (close(out)) die("close %s", dst);
}

/* Removes overlayfs's volatile marker layer/work/work/incompat/volatile (cwd is the layer's
 * root) with the files in it; missing: nothing to do. */
static void remove_volatile_marker(const char *dir) {
  const char *marker = "layer/work/work/incompat/volatile";
  DIR *d = opendir(marker);
  if (!d) { if (errno == ENOENT) return; die("open %s/%s", dir, marker); }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) && errno != ENOENT) die("unlink %s/%s/%s", dir, marker, e->d_name);
  }
  closedir(d);
  if (rmdir(marker) && errno != ENOENT) die("rmdir %s/%s", dir, marker);
}

/* Per-sandbox root layer; the layout is made by the template (see rootfs/roots.ts). */
static void rootfs(char **argv, int argc) {
  const char *tmpl = argv[2], *dir = argv[3], *lower = argv[6];
  unsigned long base = num(argv[4], "uidBase"), size = num(argv[5], "size");
  int userns = make_userns(base, size);
  char img[4096];
  if (snprintf(img, sizeof img, "%s.img", dir) >= (int)sizeof img) { errno = ENAMETOOLONG; die("%s", dir); }
  int reuse = !strcmp(tmpl, "-");
  if (mkdir(dir, 0700) && errno != EEXIST) die("mkdir %s", dir);
  if (!reuse) sparse_copy(tmpl, img);
  char dev[64];
  loop_mount(img, dir, "noinit_itable,discard", dev);
  if (chdir(dir)) die("chdir %s", dir);
  /* Only host root and the sandbox's root group may enter: crun resolves paths as the latter. */
  if (chown(".", 0, (gid_t)base) || chmod(".", 0710)) die("chown/chmod %s", dir);
  if (chown("layer/upper", (uid_t)base, (gid_t)base)) die("chown %s/layer/upper", dir);
  /* overlayfs refuses a workdir a volatile mount used: the marker (a directory holding a
   * `dirty` file) says its upper may be torn. */
  if (reuse) remove_volatile_marker(dir);
  idmapped_bind(userns, lower, "lower", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV);
  for (int i = 7; i < argc; i++) {
    char dst[64];
    snprintf(dst, sizeof dst, "volumes/%d", i - 7);
    if (mkdir(dst, 0700) && !(reuse && errno == EEXIST)) die("mkdir %s/%s", dir, dst);
    idmapped_bind(userns, argv[i], dst, 0);
  }
  /* Relative layer paths: overlayfs resolves them from our cwd, so no escaping is needed. */
  if (mount("overlay", "rootfs", "overlay", MS_NODEV, "lowerdir=lower,upperdir=layer/upper,workdir=layer/work,volatile"))
    die("mount overlay at %s/rootfs", dir);
  if (umount2("lower", MNT_DETACH)) die("umount %s/lower", dir);
  printf("%s\n", dev); /* the caller tracks the layer's device without reading the mount table */
}

/* Makes the ext4 file system mounted at path fail all further I/O without writing back:
 * unmounting it is then instant. For throw-away file systems only. */
static void shutdown_fs(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) { if (errno == ENOENT) return; die("open %s", path); }
  struct statfs sf;
  struct stat st;
  if (fstatfs(fd, &sf) || fstat(fd, &st)) die("stat %s", path);
  /* Only the root (inode 2) of an ext4 on a loop device (major 7), never a path on one. */
  if (sf.f_type == EXT4_SUPER_MAGIC && st.st_ino == 2 && major(st.st_dev) == 7) {
    unsigned int flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
    if (ioctl(fd, EXT4_IOC_SHUTDOWN, &flags)) die("shutdown %s", path);
  }
  close(fd);
}

/* Whether every controller of hierarchy `name` ("memory", "cpu,cpuacct") is in `keep`
 * ("memory,cpu,..."). Named hierarchies ("systemd") and "unified" never are. */
static int kept(const char *name, const char *keep) {
  char buf[256];
  if (snprintf(buf, sizeof buf, "%s", name) >= (int)sizeof buf) return 0;
  char *save = NULL;
  for (char *c = strtok_r(buf, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
    size_t n = strlen(c);
    const char *k = keep;
    int found = 0;
    while (*k) {
      size_t m = strcspn(k, ",");
      if (m == n && !strncmp(k, c, n)) found = 1;
      k += m + (k[m] == ',');
    }
    if (!found) return 0;
  }
  return 1;
}

/* Unshares the mount namespace and puts over /sys/fs/cgroup a tmpfs of its own holding only
 * the kept hierarchies (and symlinks to them), attached again from clones taken before. */
static void cgroup_view(const char *keep) {
  if (unshare(CLONE_NEWNS)) die("unshare");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) die("make / private");
  struct statfs sf;
  if (statfs("/sys/fs/cgroup", &sf)) die("statfs /sys/fs/cgroup");
  if (sf.f_type != 0x01021994 /* TMPFS_MAGIC: the v1 or hybrid layout */) return;
  enum { MAX = 32 };
  char names[MAX][64], links[MAX][64];
  int fds[MAX], n = 0;
  DIR *d = opendir("/sys/fs/cgroup");
  if (!d) die("opendir /sys/fs/cgroup");
  for (struct dirent *e; (e = readdir(d)) && n < MAX;) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof names[0] || !kept(e->d_name, keep)) continue;
    char path[128];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s", e->d_name);
    snprintf(names[n], sizeof names[n], "%s", e->d_name);
    links[n][0] = '\0';
    fds[n] = -1;
    if (e->d_type == DT_LNK) {
      ssize_t l = readlink(path, links[n], sizeof links[n] - 1);
      if (l <= 0) continue;
      links[n][l] = '\0';
    } else {
      fds[n] = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
      if (fds[n] < 0) die("open_tree %s", path);
    }
    n++;
  }
  closedir(d);
  if (mount("tmpfs", "/sys/fs/cgroup", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k"))
    die("mount tmpfs on /sys/fs/cgroup");
  for (int i = 0; i < n; i++) {
    char path[128];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s", names[i]);
    if (fds[i] < 0) {
      if (symlink(links[i], path)) die("symlink %s", path);
      continue;
    }
    if (mkdir(path, 0555)) die("mkdir %s", path);
    if (move_mount(fds[i], "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount %s", path);
    close(fds[i]);
  }
}

/* The path execvp would run for `name` (searched in PATH unless it holds a '/'). */
static void which(const char *name, char *out, size_t len) {
  if (strchr(name, '/')) {
    if (snprintf(out, len, "%s", name) >= (int)len) { errno = ENAMETOOLONG; die("%s", name); }
    return;
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n && (size_t)snprintf(out, len, "%.*s/%s", (int)n, p, name) < len && access(out, X_OK) == 0) return;
    p += n + (end ? 1 : 0);
  }
  errno = ENOENT;
  die("%s not found in PATH", name);
}

/*
 * Binds the OCI runtime's binary `prog` read-only over itself, in this process's private
 * mount namespace only, and tells the runtime so. crun (as runc did) guards against a
 * container overwriting the runtime through /proc/<pid>/exe (CVE-2019-5736) by re-executing
 * itself from a read-only copy on every run: a temporary file, two mounts, an unmount and a
 * second exec with its dynamic linking, each time. It skips that when its binary already is
 * on a read-only mount and _LIBCONTAINER_CLONED_BINARY is set, which is what this makes
 * true: a write through /proc/<pid>/exe meets the read-only mount (and a sandbox's root is
 * an unprivileged user on the host anyway). Failure only costs the runtime its own copy.
 */
static void readonly_self(const char *prog) {
  int fd = open_tree(AT_FDCWD, prog, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0) return;
  struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
  if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof attr) == 0 &&
      move_mount(fd, "", AT_FDCWD, prog, MOVE_MOUNT_F_EMPTY_PATH) == 0)
    setenv("_LIBCONTAINER_CLONED_BINARY", "1", 1);
  close(fd);
}

/* Makes each missing directory of absolute `path` (0755, owned by uid and gid `owner`). */
static void mkdirs_owned(const char *path, unsigned long owner) {
  char buf[4096];
  if (path[0] != '/' || strlen(path) >= sizeof buf) { errno = 0; die("bad path %s", path); }
  strcpy(buf, path);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != 0) continue;
    char c = *p;
    *p = 0;
    if (mkdir(buf, 0755) == 0) {
      if (lchown(buf, (uid_t)owner, (gid_t)owner)) die("chown %s", buf);
    } else if (errno != EEXIST) die("mkdir %s", buf);
    *p = c;
    if (!c) break;
  }
}

static void inject(char **argv, int argc) {
  long pid = (long)num(argv[2], "pid");
  unsigned long base = num(argv[3], "uidBase");
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/ns/user", pid);
  int userns = open(path, O_RDONLY | O_CLOEXEC);
  if (userns < 0) die("open %s", path);
  snprintf(path, sizeof path, "/proc/%ld/ns/mnt", pid);
  int mntns = open(path, O_RDONLY | O_CLOEXEC);
  if (mntns < 0) die("open %s", path);
  int n = (argc - 4) / 2;
  int fds[n];
  for (int i = 0; i < n; i++) {
    const char *src = argv[4 + 2 * i];
    fds[i] = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fds[i] < 0) die("open_tree %s", src);
    struct mount_attr attr = {
      .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
      .userns_fd = (unsigned long long)userns,
    };
    if (mount_setattr(fds[i], "", AT_EMPTY_PATH, &attr, sizeof attr)) die("mount_setattr idmap %s", src);
  }
  /* From here on, the root and the working directory are the sandbox's. */
  if (setns(mntns, CLONE_NEWNS)) die("setns into the mount namespace of %ld", pid);
  for (int i = 0; i < n; i++) {
    const char *dst = argv[5 + 2 * i];
    mkdirs_owned(dst, base);
    if (move_mount(fds[i], "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH)) die("move_mount to %s", dst);
    close(fds[i]);
  }
}

static void loop_remove(char **argv, int argc) {
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) die("open /dev/loop-control");
  int removed = 0;
  for (int i = 2; i < argc; i++) {
    unsigned long n = num(argv[i], "loop device number");
    /* Taken per device: a removal takes ~45 ms, and attaches of a running server wait for the lock. */
    while (flock(ctl, LOCK_EX) && errno == EINTR) {}
    int r = ioctl(ctl, LOOP_CTL_REMOVE, n);
    int err = errno;
    flock(ctl, LOCK_UN);
    if (r >= 0) removed++;
    else if (err != EBUSY && err != ENODEV && err != ENXIO) { errno = err; die("LOOP_CTL_REMOVE %lu", n); }
  }
  printf("%d\n", removed);
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "bind") && argc >= 6 && argc % 2 == 0) {
    int userns = make_userns(num(argv[2], "uidBase"), num(argv[3], "size"));
    for (int i = 4; i < argc; i += 2) idmapped_bind(userns, argv[i], argv[i + 1], 0);
    return 0;
  }
  if (!strcmp(cmd, "inject") && argc >= 6 && argc % 2 == 0) { inject(argv, argc); return 0; }
  if (!strcmp(cmd, "loopmount") && argc == 5) {
    char dev[64];
    loop_mount(argv[2], argv[3], argv[4], dev);
    return 0;
  }
  if (!strcmp(cmd, "rootfs") && argc >= 7) { rootfs(argv, argc); return 0; }
  if (!strcmp(cmd, "cgroup-view") && argc >= 5 && !strcmp(argv[3], "--")) {
    cgroup_view(argv[2]);
    char prog[4096];
    which(argv[4], prog, sizeof prog);
    readonly_self(prog);
    execv(prog, argv + 4);
    die("exec %s", prog);
  }
  if (!strcmp(cmd, "loop-remove")) { loop_remove(argv, argc); return 0; }
  if (!strcmp(cmd, "umount")) {
    int i = 2, strict = 0;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
      if (!strcmp(argv[i], "--strict")) strict = 1;
      else if (!strncmp(argv[i], "--shutdown=", 11)) shutdown_fs(argv[i] + 11);
      else { errno = 0; die("unknown option %s", argv[i]); }
    }
    for (; i < argc; i++) {
      if (umount2(argv[i], UMOUNT_NOFOLLOW) == 0 || errno == EINVAL || errno == ENOENT) continue;
      if (errno != EBUSY || strict || umount2(argv[i], MNT_DETACH | UMOUNT_NOFOLLOW)) die("umount %s", argv[i]);
    }
    return 0;
  }
  errno = 0;
  die("usage: bind <uidBase> <size> <src> <dst>... | inject <pid> <uidBase> <src> <dst>... | loopmount <image> <dst> <opts> | "
      "rootfs <template> <dir> <uidBase> <size> <lower> [<volume>...] | cgroup-view <controllers> -- <program> [<arg>...] | "
      "loop-remove <n>... | umount [--strict] [--shutdown=<ext4 root>] <path>...");
  return 1;
}
