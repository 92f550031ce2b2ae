import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { forEachFilePart, guarded } from './multipart.js';

const B = 'XyZboundary';
const CT = `multipart/form-data; boundary=${B}`;

/** A multipart body of `parts` (`filename` undefined: a plain field). */
function body(parts: { name: string; filename?: string; data: string | Buffer }[], end = true): Buffer {
  const out: Buffer[] = [];
  for (const p of parts) {
    const disp = `form-data; name="${p.name}"${p.filename === undefined ? '' : `; filename="${p.filename}"`}`;
    out.push(Buffer.from(`--${B}\r\nContent-Disposition: ${disp}\r\nContent-Type: application/octet-stream\r\n\r\n`));
    out.push(Buffer.isBuffer(p.data) ? p.data : Buffer.from(p.data));
    out.push(Buffer.from('\r\n'));
  }
  if (end) out.push(Buffer.from(`--${B}--\r\n`));
  return Buffer.concat(out);
}

/** A source that hands out `buf` in small chunks (the parser sees part boundaries split). */
const source = (buf: Buffer, chunk = 7) =>
  Readable.from(
    (function* () {
      for (let i = 0; i < buf.length; i += chunk) yield buf.subarray(i, i + chunk);
    })(),
  );

async function collect(src: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of src) parts.push(Buffer.from(c));
  return Buffer.concat(parts);
}

describe('envd multipart uploads', () => {
  it('gives each file part in order, its name with its path, streamed one after the other', async () => {
    const seen: [string, string][] = [];
    let active = 0;
    const bin = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const n = await forEachFilePart(
      source(
        body([
          { name: 'file', filename: '/tmp/a.txt', data: 'first' },
          { name: 'note', data: 'a plain field is ignored' },
          { name: 'other', filename: 'x', data: 'another form name is ignored' },
          { name: 'file', filename: 'rel/dir/b.bin', data: bin },
          { name: 'file', filename: 'żółw ünïcode.txt', data: '' },
        ]),
      ),
      CT,
      async (p) => {
        assert.equal(++active, 1, 'one part at a time');
        const data = await collect(p.body);
        await new Promise((r) => setTimeout(r, 5));
        seen.push([p.filename, data.equals(bin) ? '<256 bytes>' : data.toString()]);
        active--;
      },
    );
    assert.equal(n, 3);
    assert.deepEqual(seen, [
      ['/tmp/a.txt', 'first'],
      ['rel/dir/b.bin', '<256 bytes>'],
      ['żółw ünïcode.txt', ''],
    ]);
  });

  it('resolves with no parts for a form without files', async () => {
    assert.equal(await forEachFilePart(source(body([{ name: 'a', data: 'b' }])), CT, async () => {}), 0);
    assert.equal(await forEachFilePart(source(Buffer.from(`--${B}--\r\n`)), CT, async () => {}), 0);
  });

  it('refuses what is not multipart, or has no boundary, as validation', async () => {
    for (const ct of ['text/plain', 'multipart/form-data', 'multipart/form-data; boundary=']) {
      await assert.rejects(
        forEachFilePart(source(body([])), ct, async () => {}),
        (e: unknown) => e instanceof SandboxdError && e.kind === 'validation',
        ct,
      );
    }
  });

  it('a body cut short fails as validation, without an unheard error (the test would fail on one)', async () => {
    await assert.rejects(
      forEachFilePart(source(body([{ name: 'file', filename: 'a', data: 'no end in sight' }], false)), CT, (p) =>
        collect(p.body).then(() => undefined),
      ),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'validation',
    );
    // The same when the part is not read yet as the body ends (the reader is slow to start).
    await assert.rejects(
      forEachFilePart(source(body([{ name: 'file', filename: 'a', data: 'x' }], false), 1 << 20), CT, async (p) => {
        await new Promise((r) => setTimeout(r, 20));
        await collect(p.body);
      }),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'validation',
    );
  });

  it('stops at the first failing part: later parts are not given', async () => {
    const given: string[] = [];
    const boom = new SandboxdError('no_space', 'full');
    await assert.rejects(
      forEachFilePart(
        source(
          body([
            { name: 'file', filename: 'a', data: 'A'.repeat(100_000) },
            { name: 'file', filename: 'b', data: 'B' },
          ]),
        ),
        CT,
        async (p) => {
          given.push(p.filename);
          throw boom;
        },
      ),
      (e: unknown) => e === boom,
    );
    assert.deepEqual(given, ['a']);
  });

  it('rejects when the source errors', async () => {
    const src = new Readable({ read() {} });
    const done = forEachFilePart(src, CT, async (p) => {
      await collect(p.body).catch(() => {});
    });
    src.push(Buffer.from(`--${B}\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc`));
    setTimeout(() => src.destroy(new Error('connection reset')), 10);
    await assert.rejects(done, (e: unknown) => e instanceof SandboxdError && e.kind === 'validation');
  });

  it('guarded() passes bytes and turns errors into validation (sandboxd errors stay)', async () => {
    assert.equal((await collect(guarded(Readable.from([Buffer.from('ab'), Buffer.from('c')])))).toString(), 'abc');
    const failing = async function* () {
      yield new Uint8Array([1]);
      throw new Error('bad gzip');
    };
    await assert.rejects(collect(guarded(failing(), 'gzip body')), /Bad gzip body: bad gzip/);
    const full = new SandboxdError('no_space', 'full');
    const failing2 = async function* () {
      yield new Uint8Array([1]);
      throw full;
    };
    await assert.rejects(collect(guarded(failing2())), (e: unknown) => e === full);
  });
});
