/** FileService's per-sandbox shares (watches, transfers) over a scripted driver: the counting, not the files. */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import type { FileRead, FileWatch } from '../runtime/files.js';
import { type FileShares, FileService } from './files.js';

const SHARES: FileShares = { watchesPerSandbox: 2, fileTransfersPerSandbox: 2 };

/** A FileService over a driver whose reads, writes and watches the test ends. */
function scripted(shares: FileShares | null = SHARES) {
  const reads: Readable[] = [];
  const writes: Array<{ finish: () => void; fail: () => void }> = [];
  const watches: Array<{ end: () => void }> = [];
  const lists: Array<() => void> = [];
  let failNext = false;
  const files = {
    list(): Promise<never> {
      return new Promise((resolve) => {
        lists.push(() => resolve({ entries: [], truncated: false } as never));
      });
    },
    async read(): Promise<FileRead> {
      if (failNext) {
        failNext = false;
        throw new Error('read failed');
      }
      const body = new Readable({ read() {} });
      reads.push(body);
      return { unsatisfiable: false, size: 1, start: 0, end: 0, body };
    },
    write(): Promise<never> {
      return new Promise((resolve, reject) => {
        writes.push({ finish: () => resolve({ path: '/f' } as never), fail: () => reject(new Error('no space')) });
      });
    },
    async watch(): Promise<FileWatch> {
      const ends: Array<() => void> = [];
      watches.push({
        end: () => {
          for (const l of ends) l(); // listeners stay: a second end must not free a second slot
        },
      });
      return { onEvent() {}, onEnd: (l) => void ends.push(l), close() {} };
    },
  };
  const service = new FileService(
    {
      driver: { files } as never,
      clock: { now: () => 0 } as never,
      storage: { check: async () => undefined } as never,
      shares: shares ?? undefined,
    },
    { get: async (_a: string, id: string) => ({ id, state: 'started', stopAt: Number.MAX_SAFE_INTEGER }) as never },
  );
  return { service, reads, writes, watches, lists, failNextRead: () => (failNext = true) };
}

const tick = () => new Promise((r) => setImmediate(r));
const body = async function* () {};

describe('FileService shares', () => {
  it('file transfers: at most the share in flight per sandbox (429 naming it), reads and writes together; other sandboxes apart; a finished, destroyed or failed one frees its slot', async () => {
    const { service, reads, writes, failNextRead } = scripted();
    await service.read('acc', 'sbx_a', '/f');
    const writing = service.write('acc', 'sbx_a', '/g', body());
    await tick();
    const refused = (e: SandboxdError) => {
      assert.equal(e.kind, 'rate_limited');
      assert.match(e.message, /already has 2 file transfers/);
      assert.deepEqual(e.details, { limit: 'fileTransfersPerSandbox', max: 2 });
      return true;
    };
    await assert.rejects(service.read('acc', 'sbx_a', '/f'), refused);
    await assert.rejects(service.write('acc', 'sbx_a', '/f', body()), refused);
    await service.read('acc', 'sbx_b', '/f'); // another sandbox is apart
    reads[0].destroy(); // the client went
    await tick();
    await service.read('acc', 'sbx_a', '/f');
    writes[0].finish();
    await writing;
    const failing = service.write('acc', 'sbx_a', '/g', body());
    await tick();
    writes[1].fail();
    await assert.rejects(failing, /no space/);
    reads[2].push(null); // read to its end
    reads[2].resume();
    await tick();
    await tick();
    failNextRead();
    await assert.rejects(service.read('acc', 'sbx_a', '/f'), /read failed/);
    await service.read('acc', 'sbx_a', '/f');
    await service.read('acc', 'sbx_a', '/f');
    await assert.rejects(service.read('acc', 'sbx_a', '/f'), { kind: 'rate_limited' });
  });

  it('a listing holds a transfer slot until it answers', async () => {
    const { service, lists } = scripted();
    const listing = [
      service.list('acc', 'sbx_a', '/', { depth: 10 }),
      service.list('acc', 'sbx_a', '/', { depth: 10 }),
    ];
    await tick();
    await assert.rejects(
      service.read('acc', 'sbx_a', '/f'),
      /already has 2 file transfers \(uploads, downloads, listings\)/,
    );
    lists[0]();
    await listing[0];
    await service.read('acc', 'sbx_a', '/f');
    lists[1]();
    await listing[1];
  });

  it('watches: at most the share per sandbox (409 naming it); other sandboxes apart; an ended watch frees its slot', async () => {
    const { service, watches } = scripted();
    await service.watch('acc', 'sbx_a', '/w', { recursive: false });
    await service.watch('acc', 'sbx_a', '/w', { recursive: true });
    await assert.rejects(service.watch('acc', 'sbx_a', '/w', { recursive: false }), (e: SandboxdError) => {
      assert.equal(e.kind, 'conflict');
      assert.match(e.message, /already has 2 watches open/);
      assert.deepEqual(e.details, { open: 2, limit: 'watchesPerSandbox', max: 2 });
      return true;
    });
    await service.watch('acc', 'sbx_b', '/w', { recursive: false });
    watches[0].end();
    watches[0].end(); // its release is given back once
    await service.watch('acc', 'sbx_a', '/w', { recursive: false });
    await assert.rejects(service.watch('acc', 'sbx_a', '/w', { recursive: false }), { kind: 'conflict' });
  });

  it('without shares the defaults apply (16 watches, 32 transfers)', async () => {
    const { service } = scripted(null);
    for (let i = 0; i < 32; i++) await service.read('acc', 'sbx_a', '/f');
    await assert.rejects(service.read('acc', 'sbx_a', '/f'), {
      kind: 'rate_limited',
      details: { limit: 'fileTransfersPerSandbox', max: 32 },
    });
    for (let i = 0; i < 16; i++) await service.watch('acc', 'sbx_a', '/w', { recursive: false });
    await assert.rejects(service.watch('acc', 'sbx_a', '/w', { recursive: false }), { kind: 'conflict' });
  });
});
