/**
 * The parts a local driver is made of, built from its options: the sandboxes' records, the
 * image cache, the OCI runtime, the commands' channels, the network, the root layers, the
 * volumes and the bundles. driver.ts assembles them with the pools and what ties them together.
 */
import { readFileSync } from 'node:fs';
import type { Isolation } from '@sandboxd/protocol';
import { join } from 'node:path';
import { cgroupProcs } from './bundle/cgroups.js';
import { BundleWriter } from './bundle/writer.js';
import { SandboxCommands } from './commands/exec.js';
import { gvisorPlatform, runscFlags, runscInstalled } from '../gvisor/runsc.js';
import { defaultOciRuntime, OciRuntime } from './commands/oci-runtime.js';
import { ImageStore } from './images/store.js';
import type { LifecycleHost } from './lifecycle.js';
import { intToIp, planSubnet } from './network/addr.js';
import { NetworkManager } from './network/manager.js';
import type { LocalDriverOptions, ResolvedOptions } from './options.js';
import { RecordStore } from './records.js';
import { SecretSealer } from './sealed-secrets.js';
import { RootfsManager } from './rootfs/roots.js';
import { VolumeStore } from './rootfs/volumes.js';
import { runtimeOf } from './tiers.js';

export type DriverParts = Pick<
  LifecycleHost,
  'state' | 'images' | 'crun' | 'gvisor' | 'commands' | 'network' | 'roots' | 'volumes' | 'bundles'
>;

/**
 * The parts of the driver of instance `key` (instance.ts), whose volatile state lives in
 * `runDir` (`<opts.runDir>/<key>`): `opts` as given, `o` with the defaults filled in.
 */
export function makeParts(
  opts: LocalDriverOptions,
  o: ResolvedOptions,
  key: string,
  runDir: string,
  /** The tier of container `cid` (the driver's records know it). */
  isolationOf: (cid: string) => Isolation | undefined,
): DriverParts {
  const runtime = opts.ociRuntime ?? defaultOciRuntime();
  const crun = new OciRuntime({ root: join(runDir, runtime), binary: runtime });
  const tiers = {
    crun,
    gvisor:
      (opts.gvisor ?? runscInstalled())
        ? new OciRuntime({
            root: join(runDir, 'runsc'),
            binary: 'runsc',
            flags: runscFlags(gvisorPlatform(opts.gvisorPlatform)),
          })
        : undefined,
  };
  return {
    state: new RecordStore(
      join(opts.dataDir, 'sandboxes'),
      new SecretSealer(join(opts.dataDir, 'runtime-secrets.key')),
    ),
    images: new ImageStore({
      dir: opts.imageDir,
      credentials: opts.registryCredentials,
      insecureRegistries: opts.insecureRegistries,
      registriesAllowed: opts.registriesAllowed,
      log: opts.log,
    }),
    ...tiers,
    commands: new SandboxCommands({
      runtime: (cid) => runtimeOf(tiers, isolationOf(cid)),
      runDir,
      useAgent: o.execAgent !== false,
      cgroupProcs: (id) => cgroupProcs(o.cgroupParent, id),
    }),
    network: new NetworkManager({
      bridge: o.bridge,
      subnet: o.subnet,
      via: o.egressVia,
      dnsUpstream: o.egressDns,
      share: o.egressShare,
      injection: {
        caDir: join(opts.dataDir, 'egress-ca'),
        extraCa: o.egressCaFile ? [readFileSync(o.egressCaFile, 'utf8')] : undefined,
      },
    }),
    roots: new RootfsManager({ dir: join(opts.dataDir, 'roots') }),
    volumes: new VolumeStore({ dir: join(opts.dataDir, 'volumes') }),
    bundles: new BundleWriter({
      dir: join(runDir, 'bundles'),
      runtime,
      cgroupParent: o.cgroupParent,
      nameserver: intToIp(planSubnet(o.subnet).gateway),
      instance: key,
    }),
  };
}
