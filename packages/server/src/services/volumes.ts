import { SandboxdError, type Volume } from '@sandboxd/protocol';
import { driverVolumeName } from '../domain/sandbox.js';
import type { ServiceDeps } from './context.js';

/** Account volumes. Driver names are `<accountId>__<name>`, so accounts never collide. */
export class VolumeService {
  constructor(private readonly d: Pick<ServiceDeps, 'store' | 'driver' | 'log'>) {}

  async list(accountId: string): Promise<Volume[]> {
    const vols = await this.d.store.listVolumes(accountId);
    return vols.map((v) => ({
      name: v.name,
      sizeGb: v.sizeGb,
      createdAt: new Date(v.createdAt).toISOString(),
      mountedBy: v.mountedBy,
    }));
  }

  /** Deletes a volume and its data. `not_found`; `conflict` while a running sandbox mounts it. */
  async delete(accountId: string, name: string): Promise<void> {
    const v = await this.d.store.getVolume(accountId, name);
    if (!v) throw new SandboxdError('not_found', 'Volume not found');
    const driverName = driverVolumeName(accountId, name);
    const inUse = (await this.d.driver.listVolumes()).find((x) => x.name === driverName)?.mountedBy ?? [];
    if (inUse.length)
      throw new SandboxdError('conflict', `Volume ${name} is mounted by ${inUse.length} running sandbox(es)`, {
        mountedBy: inUse,
      });
    await this.d.store.deleteVolume(accountId, name);
    try {
      await this.d.driver.deleteVolume(driverName);
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found') return this.deleted(accountId, name);
      // Its runner does not answer: the volume stays, record and data (the client is told 503).
      if (e instanceof SandboxdError && e.kind === 'unavailable')
        await this.d.store
          .createVolume(v)
          .catch((err) => this.d.log.warn({ err, accountId, volume: name }, 'restoring a volume record failed'));
      throw e;
    }
    this.deleted(accountId, name);
  }

  private deleted(accountId: string, name: string): void {
    this.d.log.info({ accountId, volume: name }, 'volume deleted');
  }
}
