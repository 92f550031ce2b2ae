/** The store conformance suite's part on secrets (ciphertext rows) and their injections' audit trail. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import type { InjectionRecord, SecretRecord } from '../store.js';
import { type StoreTarget, storeRunner } from './support.js';

const secret = (name: string, at = 1, accountId = 'acc_a'): SecretRecord => ({
  accountId,
  name,
  ciphertext: `ct-${name}`,
  description: '',
  version: 1,
  createdAt: at,
  updatedAt: at,
});

const inj = (id: string, at: number, o: Partial<InjectionRecord> = {}): InjectionRecord => ({
  id,
  accountId: 'acc_a',
  sandboxId: 's1',
  secret: 'A',
  destination: 'api.example.com:443',
  method: 'GET',
  status: 200,
  error: null,
  at,
  ...o,
});

/** Registers what every Store must do with secrets and the audit trail. */
export function runSecretConformance(target: StoreTarget): void {
  const withStore = storeRunner(target);

  describe(`Store conformance, secrets: ${target.name}`, () => {
    it('create, get, list by name, update (version moves with the value only), rewrap, delete', () =>
      withStore(async (s) => {
        await s.createSecret(secret('B', 1), 10);
        await s.createSecret({ ...secret('a-1', 2), description: 'first' }, 10);
        await assert.rejects(s.createSecret(secret('B', 3), 10), (e: SandboxdError) => e.kind === 'conflict');
        assert.deepEqual(
          (await s.listSecrets('acc_a')).map((r) => r.name),
          ['B', 'a-1'],
          'by name, byte order',
        );
        assert.equal(await s.getSecret('acc_a', 'b'), null, 'names are case-sensitive');
        const d = await s.updateSecret('acc_a', 'B', { description: 'd', updatedAt: 5 });
        assert.deepEqual([d?.version, d?.description, d?.ciphertext, d?.updatedAt], [1, 'd', 'ct-B', 5]);
        const v = await s.updateSecret('acc_a', 'B', { ciphertext: 'ct2', updatedAt: 6 });
        assert.deepEqual([v?.version, v?.description, v?.ciphertext, v?.createdAt], [2, 'd', 'ct2', 1]);
        assert.equal(await s.updateSecret('acc_a', 'nope', { description: 'x', updatedAt: 7 }), null);
        assert.equal(await s.rewrapSecret('acc_a', 'B', 'stale', 'ct3'), false, 'a changed value is left alone');
        assert.equal(await s.rewrapSecret('acc_a', 'B', 'ct2', 'ct3'), true);
        const w = await s.getSecret('acc_a', 'B');
        assert.deepEqual([w?.ciphertext, w?.version, w?.updatedAt], ['ct3', 2, 6]);
        assert.deepEqual(
          (await s.listAllSecrets()).map((r) => [r.accountId, r.name]),
          [
            ['acc_a', 'B'],
            ['acc_a', 'a-1'],
          ],
        );
        assert.equal(await s.deleteSecret('acc_a', 'B'), true);
        assert.equal(await s.deleteSecret('acc_a', 'B'), false);
        assert.equal(await s.getSecret('acc_a', 'B'), null);
        await s.createSecret(secret('B', 9), 10); // the name is free again
        assert.equal((await s.getSecret('acc_a', 'B'))?.version, 1);
      }));

    it('an account holds at most maxPerAccount secrets (403 quota); other accounts are apart', () =>
      withStore(async (s) => {
        await s.createAccount(
          { id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
          { tokens: 0, reason: 'signup' },
        );
        await s.createSecret(secret('A'), 2);
        await s.createSecret(secret('B'), 2);
        await assert.rejects(
          s.createSecret(secret('C'), 2),
          (e: SandboxdError) => e.kind === 'quota' && (e.details as { quota: string }).quota === 'secrets',
        );
        await s.createSecret(secret('A', 1, 'acc_b'), 2);
        assert.deepEqual(
          (await s.listSecrets('acc_a')).map((r) => r.name),
          ['A', 'B'],
        );
        assert.equal((await s.getSecret('acc_b', 'A'))?.accountId, 'acc_b');
        assert.equal((await s.listSecrets('acc_b')).length, 1);
      }));

    it('injections: newest first, by sandbox or secret, paged by (at, id)', () =>
      withStore(async (s) => {
        await s.addInjections([
          inj('i1', 10),
          inj('i2', 20, { sandboxId: 's2', secret: 'B', status: null, error: 'upstream refused' }),
          inj('i3', 20),
          inj('i4', 30, { accountId: 'acc_b' }),
        ]);
        const all = await s.listInjections('acc_a', { limit: 10 });
        assert.deepEqual(
          all.map((r) => r.id),
          ['i3', 'i2', 'i1'],
        );
        assert.deepEqual(
          all[1],
          inj('i2', 20, { sandboxId: 's2', secret: 'B', status: null, error: 'upstream refused' }),
        );
        const p1 = await s.listInjections('acc_a', { limit: 2 });
        const last = p1[1];
        const p2 = await s.listInjections('acc_a', { limit: 2, before: { at: last.at, id: last.id } });
        assert.deepEqual(
          [...p1, ...p2].map((r) => r.id),
          ['i3', 'i2', 'i1'],
        );
        assert.deepEqual(
          (await s.listInjections('acc_a', { limit: 10, sandboxId: 's2' })).map((r) => r.id),
          ['i2'],
        );
        assert.deepEqual(
          (await s.listInjections('acc_a', { limit: 10, secret: 'A' })).map((r) => r.id),
          ['i3', 'i1'],
        );
        assert.deepEqual(
          (await s.listInjections('acc_b', { limit: 10 })).map((r) => r.id),
          ['i4'],
        );
      }));

    it('pruning: older than the cutoff, and past the newest maxPerAccount of each account', () =>
      withStore(async (s) => {
        const rows: InjectionRecord[] = [];
        for (let i = 0; i < 6; i++) rows.push(inj(`a${i}`, 100 + i));
        rows.push(inj('a6', 105)); // a tie at 105: id decides
        for (let i = 0; i < 3; i++) rows.push(inj(`b${i}`, 100 + i, { accountId: 'acc_b' }));
        rows.push(inj('old', 5, { accountId: 'acc_b' }));
        await s.addInjections(rows);
        assert.equal(await s.pruneInjections(50, 3), 1 + 4);
        assert.deepEqual(
          (await s.listInjections('acc_a', { limit: 10 })).map((r) => r.id),
          ['a6', 'a5', 'a4'],
        );
        assert.deepEqual(
          (await s.listInjections('acc_b', { limit: 10 })).map((r) => r.id),
          ['b2', 'b1', 'b0'],
        );
        assert.equal(await s.pruneInjections(50, 3), 0);
      }));
  });
}
