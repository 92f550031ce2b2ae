/* libc: musl */
/*
 * net-attach: builds one sandbox network in one short process, over rtnetlink (what the
 * `ip` commands of network/commands.ts did, without a shell, three programs and their
 * dynamic linking: in a burst of creates those took a sixth of the machine).
 *
 *   net-attach <netns name> <pid|-> <host veth> <group> <host mac> <sandbox mac> <alias>
 *              <address> <gateway>
 *
 * 1. netns /run/netns/<netns name>, as `ip netns add` makes it (/run/netns a shared mount,
 *    the name a bind of the namespace), of a new network namespace, or with <pid>, of
 *    process <pid>'s (`ip netns attach`).
 * 2. In it, through a proc instance of its own (the host's /proc/sys caches one entry per
 *    network namespace under names they all share): IPv6 off (all, default).
 * 3. A veth pair: <host veth> in the host (interface group <group>, MAC <host mac>), its
 *    peer eth0 (MAC <sandbox mac>) in the netns; the host end gets alias <alias>,
 *    addrgenmode none, IPv6 off and goes up; a /32 route to <address> through it, source
 *    <gateway>.
 * 4. Inside: <address>/32 on eth0, lo and eth0 up, a permanent neighbour entry for
 *    <gateway> (the host end's MAC) and the default route through it (onlink).
 *
 *   net-attach unname <netns name>
 *
 * Drops the name /run/netns/<netns name> (as `ip netns del`): once the sandbox runs, its
 * processes hold the namespace (network/manager.ts, settle).
 *
 * Exit 0 on success; otherwise one line on stderr naming the step, exit 1. Nothing is rolled
 * back here: the caller removes the netns and the veth (network/manager.ts).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/mount.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef IN6_ADDR_GEN_MODE_NONE
#define IN6_ADDR_GEN_MODE_NONE 1
#endif

#define HELPER_NAME "net-attach"
#include "die.h"

/* ---- rtnetlink messages ---- */

struct msg {
  struct nlmsghdr h;
  char buf[2048];
};

static struct nlmsghdr *msg_init(struct msg *m, int type, int flags, const void *body, size_t len) {
  memset(m, 0, sizeof *m);
  m->h.nlmsg_len = NLMSG_LENGTH(len);
  m->h.nlmsg_type = (unsigned short)type;
  m->h.nlmsg_flags = (unsigned short)(NLM_F_REQUEST | NLM_F_ACK | flags);
  memcpy(NLMSG_DATA(&m->h), body, len);
  return &m->h;
}

static struct rtattr *attr(struct nlmsghdr *h, int type, const void *data, size_t len) {
  struct rtattr *a = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));
  if (NLMSG_ALIGN(h->nlmsg_len) + RTA_SPACE(len) > sizeof(struct msg)) { errno = 0; die("netlink message too long"); }
  a->rta_type = (unsigned short)type;
  a->rta_len = (unsigned short)RTA_LENGTH(len);
  if (len) memcpy(RTA_DATA(a), data, len);
  h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_SPACE(len);
  return a;
}

static struct rtattr *nest(struct nlmsghdr *h, int type) { return attr(h, type, NULL, 0); }
static void nest_end(struct nlmsghdr *h, struct rtattr *a) { a->rta_len = (unsigned short)((char *)h + h->nlmsg_len - (char *)a); }
static void attr_str(struct nlmsghdr *h, int type, const char *s) { attr(h, type, s, strlen(s) + 1); }
static void attr_u32(struct nlmsghdr *h, int type, unsigned v) { attr(h, type, &v, sizeof v); }

static int nl_open(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) die("netlink socket");
  struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa)) die("bind netlink");
  return fd;
}

/* Sends `h` on `fd` and waits for its acknowledgement; dies naming `what` on an error. */
static void nl_call(int fd, struct nlmsghdr *h, const char *what) {
  static unsigned seq;
  h->nlmsg_seq = ++seq;
  struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
  if (sendto(fd, h, h->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof sa) < 0) die("%s: send", what);
  for (int i = 0; i < 16; i++) {
    char buf[8192];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) { if (errno == EINTR) continue; die("%s: recv", what); }
    for (struct nlmsghdr *r = (struct nlmsghdr *)buf; NLMSG_OK(r, (unsigned)n); r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_seq != h->nlmsg_seq || r->nlmsg_type != NLMSG_ERROR) continue;
      struct nlmsgerr *e = NLMSG_DATA(r);
      if (e->error == 0) return;
      errno = -e->error;
      die("%s", what);
    }
  }
  errno = 0;
  die("%s: no answer from the kernel", what);
}

/* Index of interface `name` in the network namespace of socket `sock`. */
static int ifindex(int sock, const char *name) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (ioctl(sock, SIOCGIFINDEX, &ifr)) die("interface %s", name);
  return ifr.ifr_ifindex;
}

static void parse_mac(const char *s, unsigned char mac[6]) {
  if (sscanf(s, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) != 6) {
    errno = 0;
    die("bad MAC %s", s);
  }
}

static struct in_addr parse_ip(const char *s) {
  struct in_addr a;
  if (inet_pton(AF_INET, s, &a) != 1) { errno = 0; die("bad IPv4 address %s", s); }
  return a;
}

/* Link `name` (by name) up, with `extra` attributes added by the caller through `h`. */
static struct nlmsghdr *link_set(struct msg *m, const char *name) {
  struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC, .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
  struct nlmsghdr *h = msg_init(m, RTM_NEWLINK, 0, &ifi, sizeof ifi);
  attr_str(h, IFLA_IFNAME, name);
  return h;
}

static void route_add(int nl, int oif, const struct in_addr *dst, int dst_len, const struct in_addr *src,
                      const struct in_addr *gw, const char *what) {
  struct rtmsg rt = {
    .rtm_family = AF_INET,
    .rtm_dst_len = (unsigned char)dst_len,
    .rtm_table = RT_TABLE_MAIN,
    .rtm_protocol = RTPROT_BOOT,
    .rtm_scope = gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK,
    .rtm_type = RTN_UNICAST,
    .rtm_flags = gw ? RTNH_F_ONLINK : 0,
  };
  struct msg m;
  struct nlmsghdr *h = msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
  if (dst_len) attr(h, RTA_DST, dst, sizeof *dst);
  if (src) attr(h, RTA_PREFSRC, src, sizeof *src);
  if (gw) attr(h, RTA_GATEWAY, gw, sizeof *gw);
  attr_u32(h, RTA_OIF, (unsigned)oif);
  nl_call(nl, h, what);
}

/* ---- namespaces and sysctls ---- */

#define NETNS_RUN_DIR "/run/netns"

/*
 * Makes /run/netns/<name> name a network namespace (as iproute2's netns_add): a new one
 * (the calling process moves into it) or, with pid > 0, process pid's. Leaves the caller in
 * the named namespace.
 */
static void netns_add(const char *name, long pid) {
  char path[256];
  if (snprintf(path, sizeof path, "%s/%s", NETNS_RUN_DIR, name) >= (int)sizeof path) { errno = ENAMETOOLONG; die("%s", name); }
  if (mkdir(NETNS_RUN_DIR, 0755) && errno != EEXIST) die("mkdir %s", NETNS_RUN_DIR);
  /* Names made here must show in every mount namespace, and those of others here. */
  int bound = 0;
  while (mount("", NETNS_RUN_DIR, "none", MS_SHARED | MS_REC, NULL)) {
    if (errno != EINVAL || bound) die("mount --make-shared %s", NETNS_RUN_DIR);
    if (mount(NETNS_RUN_DIR, NETNS_RUN_DIR, "none", MS_BIND | MS_REC, NULL)) die("mount --bind %s", NETNS_RUN_DIR);
    bound = 1;
  }
  int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
  if (fd < 0) die("create %s", path);
  close(fd);
  char src[64];
  if (pid > 0) {
    snprintf(src, sizeof src, "/proc/%ld/ns/net", pid);
  } else {
    if (unshare(CLONE_NEWNET)) { unlink(path); die("unshare a network namespace"); }
    snprintf(src, sizeof src, "/proc/self/ns/net");
  }
  if (mount(src, path, "none", MS_BIND, NULL)) { int e = errno; unlink(path); errno = e; die("mount %s on %s", src, path); }
  if (pid > 0) {
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET)) die("enter %s", path);
    close(ns);
  }
}

/* Writes `value` to /proc/sys/<key> of the caller's network namespace, through `proc`. */
static void sysctl_at(int proc, const char *key, const char *value) {
  char path[256];
  snprintf(path, sizeof path, "sys/%s", key);
  int fd = openat(proc, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) die("open /proc/%s", path);
  size_t len = strlen(value);
  if (write(fd, value, len) != (ssize_t)len) die("write /proc/%s", path);
  close(fd);
}

/* Whether /proc/sys/<key> (through `proc`) starts with `c`. */
static int sysctl_is(int proc, const char *key, char c) {
  char path[256], buf[8] = { 0 };
  snprintf(path, sizeof path, "sys/%s", key);
  int fd = openat(proc, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 && buf[0] == c;
}

/* A proc instance of this process's own, never attached anywhere (see the top comment). */
static int own_proc(void) {
  int fs = (int)syscall(SYS_fsopen, "proc", FSOPEN_CLOEXEC);
  if (fs < 0) die("fsopen proc");
  if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0)) die("fsconfig proc");
  int proc = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  if (proc < 0) die("fsmount proc");
  close(fs);
  return proc;
}

/* `ip netns del <name>`: the name's bind unmounted (lazily) and its file removed. */
static void netns_unname(const char *name) {
  char path[256];
  if (strchr(name, '/') || snprintf(path, sizeof path, "%s/%s", NETNS_RUN_DIR, name) >= (int)sizeof path) {
    errno = EINVAL;
    die("bad netns name %s", name);
  }
  if (umount2(path, MNT_DETACH) && errno != EINVAL && errno != ENOENT) die("umount %s", path);
  if (unlink(path) && errno != ENOENT) die("unlink %s", path);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "unname")) {
    netns_unname(argv[2]);
    return 0;
  }
  if (argc != 10) {
    errno = 0;
    die("usage: <netns name> <pid|-> <host veth> <group> <host mac> <sandbox mac> <alias> <address> <gateway>");
  }
  const char *ns_name = argv[1], *veth = argv[3], *alias = argv[7];
  long pid = strcmp(argv[2], "-") ? strtol(argv[2], NULL, 10) : 0;
  unsigned group = (unsigned)strtoul(argv[4], NULL, 10);
  unsigned char host_mac[6], sb_mac[6];
  parse_mac(argv[5], host_mac);
  parse_mac(argv[6], sb_mac);
  struct in_addr address = parse_ip(argv[8]), gateway = parse_ip(argv[9]);
  if (strlen(veth) >= IFNAMSIZ) { errno = 0; die("interface name %s too long", veth); }

  /* Sockets belong to the namespace they are made in, whichever the process is in later. */
  int host_nl = nl_open();
  int host_sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int host_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host_sock < 0 || host_ns < 0) die("host namespace");
  netns_add(ns_name, pid);
  int proc = own_proc();
  /* `all` sets `default` too on current kernels (eth0, made next, inherits it); one write fewer. */
  sysctl_at(proc, "net/ipv6/conf/all/disable_ipv6", "1");
  if (!sysctl_is(proc, "net/ipv6/conf/default/disable_ipv6", '1')) sysctl_at(proc, "net/ipv6/conf/default/disable_ipv6", "1");
  int in_nl = nl_open();
  int in_sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int in_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (in_sock < 0 || in_ns < 0) die("sandbox namespace");
  if (setns(host_ns, CLONE_NEWNET)) die("back to the host's network namespace");

  /* The pair, made from the host: its first end stays here, the peer goes into the netns. */
  struct msg m;
  struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
  struct nlmsghdr *h = msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
  attr_str(h, IFLA_IFNAME, veth);
  attr_u32(h, IFLA_GROUP, group);
  attr(h, IFLA_ADDRESS, host_mac, 6);
  struct rtattr *info = nest(h, IFLA_LINKINFO);
  attr_str(h, IFLA_INFO_KIND, "veth");
  struct rtattr *data = nest(h, IFLA_INFO_DATA);
  struct rtattr *peer = nest(h, VETH_INFO_PEER);
  struct ifinfomsg peer_ifi = { .ifi_family = AF_UNSPEC };
  memcpy((char *)h + h->nlmsg_len, &peer_ifi, sizeof peer_ifi);
  h->nlmsg_len += NLMSG_ALIGN(sizeof peer_ifi);
  attr_str(h, IFLA_IFNAME, "eth0");
  attr_u32(h, IFLA_NET_NS_FD, (unsigned)in_ns);
  attr(h, IFLA_ADDRESS, sb_mac, 6);
  nest_end(h, peer);
  nest_end(h, data);
  nest_end(h, info);
  nl_call(host_nl, h, "add the veth pair");

  h = link_set(&m, veth);
  attr_str(h, IFLA_IFALIAS, alias);
  struct rtattr *af = nest(h, IFLA_AF_SPEC);
  struct rtattr *inet6 = nest(h, AF_INET6);
  unsigned char mode = IN6_ADDR_GEN_MODE_NONE;
  attr(h, IFLA_INET6_ADDR_GEN_MODE, &mode, 1);
  nest_end(h, inet6);
  nest_end(h, af);
  nl_call(host_nl, h, "set up the host veth");
  char key[128];
  snprintf(key, sizeof key, "net/ipv6/conf/%s/disable_ipv6", veth);
  sysctl_at(proc, key, "1"); /* the proc instance shows the namespace of the process: the host's now */
  route_add(host_nl, ifindex(host_sock, veth), &address, 32, &gateway, NULL, "route to the sandbox");

  /* Inside, through the sockets made there. */
  int eth0 = ifindex(in_sock, "eth0");
  struct ifaddrmsg ifa = { .ifa_family = AF_INET, .ifa_prefixlen = 32, .ifa_scope = RT_SCOPE_UNIVERSE, .ifa_index = (unsigned)eth0 };
  h = msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
  attr(h, IFA_LOCAL, &address, sizeof address);
  attr(h, IFA_ADDRESS, &address, sizeof address);
  nl_call(in_nl, h, "address eth0");
  nl_call(in_nl, link_set(&m, "lo"), "set lo up");
  nl_call(in_nl, link_set(&m, "eth0"), "set eth0 up");
  struct ndmsg nd = { .ndm_family = AF_INET, .ndm_ifindex = eth0, .ndm_state = NUD_PERMANENT };
  h = msg_init(&m, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof nd);
  attr(h, NDA_DST, &gateway, sizeof gateway);
  attr(h, NDA_LLADDR, host_mac, 6);
  nl_call(in_nl, h, "neighbour entry of the gateway");
  route_add(in_nl, eth0, NULL, 0, NULL, &gateway, "default route");
  return 0;
}
