/** sandboxPortDialer: how the server's own relays reach a sandbox port (direct, or a runner's tunnel). */
import assert from 'node:assert/strict';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { sandboxPortDialer } from './dial.js';
import { ProxyError } from './reply.js';

const at = (address: string) => ({ resolve: async () => ({ address }) as never });

describe('sandboxPortDialer', () => {
  it('connects to the target address and port; the socket carries bytes both ways', async () => {
    const server = createServer((c) => c.end('hello'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const { port } = server.address() as AddressInfo;
      const s = (await sandboxPortDialer(at('127.0.0.1'))('sbx_1', port)) as Socket;
      let got = '';
      for await (const c of s) got += c;
      assert.equal(got, 'hello');
    } finally {
      server.close();
    }
  });

  it('nothing listening: upstream; a sandbox the proxy cannot locate: conflict (not running); its other refusals as they are', async () => {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    server.close();
    await assert.rejects(
      sandboxPortDialer(at('127.0.0.1'))('sbx_1', port),
      (e: SandboxdError) => e.kind === 'upstream',
    );
    const gone = {
      resolve: async () => {
        throw new ProxyError('not_found', 'No running sandbox sbx_1');
      },
    };
    await assert.rejects(
      sandboxPortDialer(gone)('sbx_1', 49999),
      (e: SandboxdError) => e.kind === 'conflict' && /not running/.test(e.message),
    );
    const noAddress = {
      resolve: async () => {
        throw new ProxyError('upstream', 'no address');
      },
    };
    await assert.rejects(sandboxPortDialer(noAddress)('sbx_1', 49999), (e: SandboxdError) => e.kind === 'upstream');
  });

  it("with a runner's tunnel: opens the tunnel to that sandbox and port (never the address); a failing tunnel is upstream", async () => {
    const opened: string[] = [];
    const pipe = new PassThrough();
    const dial = sandboxPortDialer(at('10.0.0.5'), async (id, port) => {
      opened.push(`${id}:${port}`);
      return pipe;
    });
    assert.equal(await dial('sbx_1', 49999), pipe);
    assert.deepEqual(opened, ['sbx_1:49999']);
    const broken = sandboxPortDialer(at('10.0.0.5'), async () => {
      throw new SandboxdError('conflict', 'runner says no');
    });
    await assert.rejects(
      broken('sbx_1', 49999),
      (e: SandboxdError) => e.kind === 'upstream' && /runner says no/.test(e.message),
    );
  });
});
