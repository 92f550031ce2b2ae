import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { NftBatcher } from './nft-batch.js';
import { NftSession } from './nft-session.js';

const TABLE = 'sbxt_nftsession';
const nft = (args: string[], input?: string) => execFileSync('nft', args, { encoding: 'utf8', input });
const elements = () => nft(['list', 'set', 'inet', TABLE, 'r']);

describe('nft session (a long-lived nft -i)', { skip: process.getuid?.() !== 0 && 'needs root' }, () => {
  before(() => {
    nft(
      ['-f', '-'],
      `table inet ${TABLE} {\n set r { type ipv4_addr . ipv4_addr; flags timeout; }\n set m { type ipv4_addr; }\n}\n`,
    );
  });
  after(() => {
    nft(['delete', 'table', 'inet', TABLE]);
  });

  it('applies batches as transactions, says which failed, and goes on after a failure', async () => {
    const session = new NftSession(`inet ${TABLE}`, 'm');
    try {
      await session.run([`add element inet ${TABLE} r { 10.0.0.1 . 203.0.113.1 timeout 30s }`]);
      assert.match(elements(), /10\.0\.0\.1 \. 203\.0\.113\.1/);
      // One bad command fails its whole line: the good one beside it is not applied either.
      await assert.rejects(
        session.run([`add element inet ${TABLE} r { 10.0.0.1 . 203.0.113.2 }`, `add element inet ${TABLE} r { bad }`]),
        /^Error: nft: /,
      );
      assert.doesNotMatch(elements(), /203\.0\.113\.2/);
      await session.run([
        `add element inet ${TABLE} r { 10.0.0.1 . 203.0.113.3 timeout 30s }`,
        `delete element inet ${TABLE} r { 10.0.0.1 . 203.0.113.1 }`,
      ]);
      const now = elements();
      assert.match(now, /203\.0\.113\.3/);
      assert.doesNotMatch(now, /203\.0\.113\.1 /);
    } finally {
      session.close();
    }
  });

  it('a session that never answers is given up and the batch goes through nft -f (the batcher falls back)', async () => {
    // Its marker set is missing: the listing that ends a batch never comes.
    const b = new NftBatcher(new NftSession(`inet ${TABLE}`, 'no_such_marker'));
    try {
      await b.run([`add element inet ${TABLE} r { 10.0.0.9 . 203.0.113.9 timeout 30s }`]);
      assert.match(elements(), /203\.0\.113\.9/);
      await assert.rejects(b.run([`add element inet ${TABLE} r { bad }`]), /bad|Error/);
    } finally {
      b.close();
    }
  });
});
