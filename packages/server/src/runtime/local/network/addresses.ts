import { SandboxdError } from '@sandboxd/protocol';
import { contains, formatPrefix, intToIp, ipToInt, type SubnetPlan } from './addr.js';

/**
 * Which addresses of an instance's subnet are taken, and by whom: a sandbox's id, or '' for
 * one only the host knows about (a /32 route it already had). Hands out the next free address
 * after the last one given (round robin), so that an address just freed is the last to be
 * reused. In memory only: the network manager fills it from the host once (its routes).
 * Synchronous, so no two allocations interleave.
 */
export class AddressBook {
  /** Address (as number) -> id using it ('' for an address only the host knows about). */
  readonly #used = new Map<number, string>();
  #cursor: number;

  constructor(readonly plan: SubnetPlan) {
    this.#cursor = plan.first;
  }

  /** Addresses of the subnet handed to sandboxes (the gateway and the broadcast excluded). */
  get size(): number {
    return this.plan.last - this.plan.first + 1;
  }

  /** Free addresses and all of them. */
  counts(): { free: number; total: number } {
    return { free: Math.max(0, this.size - this.#used.size), total: this.size };
  }

  /** Marks `address` (dotted) taken by `id` unless it is outside the subnet or taken already. */
  reserve(address: string, id: string): void {
    if (!/^[\d.]+$/.test(address)) return;
    const n = ipToInt(address);
    if (contains(this.plan.prefix, n) && !this.#used.has(n)) this.#used.set(n, id);
  }

  /** Takes the next free address after the last one handed out for `id`; `internal` when none is left. */
  allocate(id: string): string {
    const found = this.#nextFree();
    if (found === undefined)
      throw new SandboxdError('internal', `network: no free address left in ${formatPrefix(this.plan.prefix)}`);
    this.#used.set(found, id);
    this.#cursor = found + 1 > this.plan.last ? this.plan.first : found + 1;
    return intToIp(found);
  }

  /** True while an address is free. */
  hasFree(): boolean {
    return this.#nextFree() !== undefined;
  }

  /** The addresses (dotted) `id` holds. */
  heldBy(id: string): string[] {
    return [...this.#used].filter(([, owner]) => owner === id).map(([addr]) => intToIp(addr));
  }

  /** Frees every address `id` holds. */
  release(id: string): void {
    for (const [addr, owner] of this.#used) if (owner === id) this.#used.delete(addr);
  }

  /** Frees the addresses only the host knew about that `stillRouted` (dotted) no longer has. */
  pruneHostOnly(stillRouted: Set<string>): void {
    for (const [addr, owner] of this.#used)
      if (owner === '' && !stillRouted.has(intToIp(addr))) this.#used.delete(addr);
  }

  /** Forgets everything, as a new book. */
  clear(): void {
    this.#used.clear();
    this.#cursor = this.plan.first;
  }

  /** The next free address from the cursor on, or undefined; changes nothing. */
  #nextFree(): number | undefined {
    const { first } = this.plan;
    for (let i = 0; i < this.size; i++) {
      const candidate = first + ((this.#cursor - first + i) % this.size);
      if (!this.#used.has(candidate)) return candidate;
    }
    return undefined;
  }
}
