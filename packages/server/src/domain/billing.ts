/** Tokens are billed per sandbox-minute; one token is one minute. */
export const MINUTE_MS = 60_000;

/** Minutes billed for a span of `ms`: whole minutes rounded up, at least 1. */
export function billedMinutes(ms: number): number {
  return Math.max(1, Math.ceil(Math.max(0, ms) / MINUTE_MS));
}

/**
 * Minutes to refund when a sandbox whose run began at `createdAt` (its create, start or
 * resume) with `reservedMinutes` paid stops or pauses at `at`: the whole minutes it did
 * not use (never negative).
 */
export function refundMinutes(reservedMinutes: number, times: { createdAt: number; at: number }): number {
  const used = Math.min(reservedMinutes, billedMinutes(times.at - times.createdAt));
  return Math.max(0, reservedMinutes - used);
}

/** Ledger reasons; each row carries one. */
export type LedgerReason =
  | 'signup'
  | 'admin.grant'
  | 'sandbox.create'
  | 'sandbox.start'
  | 'sandbox.resume'
  | 'sandbox.extend'
  | 'sandbox.reduce'
  | 'sandbox.refund';
