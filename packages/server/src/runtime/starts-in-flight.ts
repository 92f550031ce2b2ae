/**
 * Starts in flight per sandbox (a process or terminal being spawned), for the hosts that
 * track what they start ({@link ProcessHost}, {@link TerminalHost}): counted against their
 * per-sandbox limits, and told apart when the sandbox's work is closed meanwhile (a start
 * that finishes after that is ended at once instead of being kept).
 */
export class StartsInFlight {
  private readonly pending = new Map<string, number>();
  /** Bumped when a sandbox is closed while starts are in flight. */
  private readonly generation = new Map<string, number>();

  /** How many starts are in flight in `sandboxId`. */
  count(sandboxId: string): number {
    return this.pending.get(sandboxId) ?? 0;
  }

  /** Counts a start; returns its ticket for {@link closedSince} and {@link end}. */
  begin(sandboxId: string): number {
    this.pending.set(sandboxId, this.count(sandboxId) + 1);
    return this.generation.get(sandboxId) ?? 0;
  }

  /** True when the sandbox was closed after the start with `ticket` began. */
  closedSince(sandboxId: string, ticket: number): boolean {
    return (this.generation.get(sandboxId) ?? 0) !== ticket;
  }

  /** The start is over (kept or not). */
  end(sandboxId: string): void {
    const left = (this.pending.get(sandboxId) ?? 1) - 1;
    if (left > 0) this.pending.set(sandboxId, left);
    else {
      this.pending.delete(sandboxId);
      this.generation.delete(sandboxId);
    }
  }

  /** The sandbox's work is closed: the starts in flight in it will find {@link closedSince} true. */
  close(sandboxId: string): void {
    if (this.pending.has(sandboxId)) this.generation.set(sandboxId, (this.generation.get(sandboxId) ?? 0) + 1);
  }
}
