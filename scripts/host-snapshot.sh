#!/usr/bin/env bash
# Prints what sandboxd could leak on the host (mounts, network namespaces, links, loop
# devices, nftables tables, cgroups, routes and routing rules, and processes of this project: a
# sandbox's agent, the native helpers, a server), one sorted line each, so two snapshots can be diffed.
mountpoints() { awk '{print "mount " $5}' /proc/self/mountinfo | sort; }
{
  mountpoints
  ip netns list 2>/dev/null | awk '{print "netns " $1}'
  ip -o link show 2>/dev/null | awk -F': ' '{print "link " $2}' | sed 's/@.*//'
  losetup -a -O NAME,BACK-FILE --noheadings 2>/dev/null | awk '{print "loop " $0}'
  nft list tables 2>/dev/null | awk '{print "nft " $0}'
  find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d -name 'sandboxd*' 2>/dev/null | awk '{print "cgroup " $0}'
  ip rule show 2>/dev/null | awk '{print "rule " $0}'
  ps -eo args= | awk '$1 ~ /sandboxd-agent$|\/build\/bin\/[a-z-]+$/ || /packages\/server\/src\/main\.ts/ {print "process " $1}'
  ip route show table all 2>/dev/null | grep -v '^local\|^broadcast\|^multicast\|fe80::\|^ff00' | sed 's/ linkdown//' | awk '{print "route " $0}'
} | sort
