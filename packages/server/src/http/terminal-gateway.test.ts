import assert from 'node:assert/strict';
import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import pino from 'pino';
import { TerminalGateway } from './terminal-ws.js';

describe('TerminalGateway.admit', () => {
  it('a client that left before it was admitted gives its slots back (sandbox and account)', async () => {
    const gateway = new TerminalGateway({
      log: pino({ level: 'silent' }),
      maxSocketsPerAccount: 3,
      maxSocketsPerSandbox: 2,
    });
    try {
      // Gone during the checks before admit (an RST while the terminal was looked up).
      for (let i = 0; i < 5; i++) {
        const gone = new PassThrough();
        gone.destroy();
        await once(gone, 'close');
        gateway.admit('acc_a', 'sbx_a', gone);
      }
      // The shares are whole: two live sockets for the sandbox, then 429.
      const live = [new PassThrough(), new PassThrough()];
      for (const s of live) gateway.admit('acc_a', 'sbx_a', s);
      assert.throws(() => gateway.admit('acc_a', 'sbx_a', new PassThrough()), { kind: 'rate_limited' });
      for (const s of live) s.destroy();
      await Promise.all(live.map((s) => once(s, 'close')));
      gateway.admit(
        'acc_a',
        'sbx_a',
        new PassThrough().on('error', () => {}),
      );
    } finally {
      gateway.close(0);
    }
  });
});
