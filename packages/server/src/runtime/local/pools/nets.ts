import type { NetworkManager, SandboxNet } from '../network/manager.js';
import { type Pool, pooledId } from './pool.js';

/** Networks (netns, veth, address) made ahead of need, under `netpool_` ids. */
export class NetPool implements Pool {
  readonly prefix = 'netpool_';
  private readonly nets: SandboxNet[] = [];
  /** The network a refill step is making, until it is in `nets` (or failed). */
  private making: Promise<void> | null = null;

  constructor(
    private readonly o: {
      /** How many networks to keep made; 0 keeps none. */
      size: number;
      network: Pick<NetworkManager, 'attach' | 'detach' | 'hasFreeAddress'>;
    },
  ) {}

  /** Networks held, ready to be taken. */
  size(): number {
    return this.nets.length;
  }

  /** A network made ahead of need (its id is the pooled one, not the sandbox's), or undefined. */
  take(): SandboxNet | undefined {
    return this.nets.shift();
  }

  /**
   * Networks held plus the one being made: what a create can count on. A step starts only
   * while an address is free, and takes it at once, so the one being made is all but made.
   */
  available(): number {
    return this.nets.length + (this.making ? 1 : 0);
  }

  /**
   * Starts making one network, unless the pool is full or no address is free (a step then
   * would only fail, and while it ran a create could not count on the address it sought).
   */
  refillStep(): Promise<void> | null {
    if (this.nets.length >= this.o.size || !this.o.network.hasFreeAddress()) return null;
    const making = this.o.network
      .attach(pooledId(this.prefix))
      .then((net) => {
        this.nets.push(net);
      })
      .finally(() => {
        if (this.making === making) this.making = null;
      });
    this.making = making;
    return making;
  }

  /** Settles once the network a refill step is making now (if any) is in the pool or failed. */
  async made(): Promise<void> {
    await this.making?.catch(() => undefined);
  }

  async drain(): Promise<void> {
    for (const n of this.nets.splice(0)) await this.o.network.detach(n.id);
  }
}
