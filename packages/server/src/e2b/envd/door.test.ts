import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, it } from 'node:test';
import { refuse } from './door.js';

/** What `refuse` wrote: status, headers, body. */
function answer(headers: Record<string, string>, url = '/process.Process/Start') {
  const out = { status: 0, headers: {} as Record<string, unknown>, body: Buffer.alloc(0) };
  const res = {
    headersSent: false,
    writeHead(status: number, h: Record<string, unknown>) {
      out.status = status;
      out.headers = h;
      return this;
    },
    end(b: string | Buffer) {
      out.body = Buffer.from(b);
    },
  } as unknown as ServerResponse;
  refuse({ method: 'POST', url, headers } as unknown as IncomingMessage, res, 404, 'Sandbox x not found');
  return out;
}

describe('envd door refusals', () => {
  it("unary Connect calls get Connect's error JSON with the HTTP status", () => {
    const a = answer({ 'content-type': 'application/json' }, '/process.Process/List');
    assert.equal(a.status, 404);
    assert.deepEqual(JSON.parse(a.body.toString()), { code: 'not_found', message: 'Sandbox x not found' });
  });

  it('streaming Connect calls get a 200 whose one end-of-stream envelope carries the error', () => {
    const a = answer({ 'content-type': 'application/connect+json' });
    assert.equal(a.status, 200);
    assert.equal(a.headers['content-type'], 'application/connect+json');
    assert.equal(a.body[0], 2);
    assert.equal(a.body.readUInt32BE(1), a.body.length - 5);
    assert.deepEqual(JSON.parse(a.body.subarray(5).toString()), {
      error: { code: 'not_found', message: 'Sandbox x not found' },
    });
  });

  it("envd's HTTP paths get envd's {code, message} (with sandboxd's kind)", () => {
    const a = answer({}, '/files?path=/x');
    assert.equal(a.status, 404);
    assert.deepEqual(JSON.parse(a.body.toString()), {
      code: 404,
      kind: 'not_found',
      message: 'Sandbox x not found',
    });
  });
});
