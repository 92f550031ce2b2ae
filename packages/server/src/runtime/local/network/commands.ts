import { hostVethMac, hostVethName, netnsName, sandboxMac } from './addr.js';

/** What {@link attachCommand} needs to know about one sandbox. */
export interface AttachPlan {
  id: string;
  /** Interface group of the instance's host veths ({@link instanceGroup}). */
  group: number;
  /** Sandbox IPv4 address and the gateway (a host address, on the instance's anchor device). */
  address: string;
  gateway: string;
  /** Name the netns of this running process instead of making a new one (`ip netns attach`). */
  pid?: number;
  /** Path of the net-attach native helper (native/net-attach.c). */
  helper: string;
}

/** A program and its arguments, for `runTool`. */
export interface ToolCommand {
  file: string;
  args: string[];
}

/**
 * The one command that builds a sandbox network (native/net-attach.c, over rtnetlink: one
 * short process instead of a shell, two `ip -batch` runs and the mount helper): netns
 * `sbx-<id>` (new, or the netns of process `pid`, for runtimes that make it themselves); a
 * veth pair made with its sandbox end already inside (named eth0, MAC from the id) and its
 * host end in the instance's interface group, with no address of its own, IPv6 off; a /32
 * host route to the sandbox's address through that veth (source: the gateway), so the host
 * reaches that address on that veth only. Inside: IPv6 off, lo and eth0 up, the address as
 * a /32, a permanent neighbour entry for the gateway (the host veth's MAC; no ARP needed,
 * whatever the host's arp_ignore) and the default route through it. Nothing it does lists
 * the host's links or neighbours (each create would pay for all the others).
 */
export function attachCommand(p: AttachPlan): ToolCommand {
  return {
    file: p.helper,
    args: [
      netnsName(p.id),
      p.pid ? String(p.pid) : '-',
      hostVethName(p.id),
      String(p.group),
      hostVethMac(p.id),
      sandboxMac(p.id),
      `sandboxd:${p.id}`,
      p.address,
      p.gateway,
    ],
  };
}
