import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConcurrencyLimitError, ConnectionError, NotFoundError } from '@sandboxd/sdk';
import { cut, failureOf, stripAnsi, toolError } from './results.js';

describe('MCP tool results', () => {
  it('cut keeps the first and the last half and says how much was left out', () => {
    assert.deepEqual(cut('short', 10), { text: 'short', omitted: 0 });
    const r = cut(`${'a'.repeat(50)}${'b'.repeat(50)}`, 10);
    assert.equal(r.omitted, 90);
    assert.equal(r.text, 'aaaaa\n[... 90 characters cut here ...]\nbbbbb');
  });

  it("an API error becomes an isError result with the API's kind, status, message and details, and a hint", () => {
    const e = new ConcurrencyLimitError('Concurrency limit reached: 1 sandboxes running', {
      status: 403,
      kind: 'concurrency',
      details: { limit: 1 },
    });
    const r = toolError(e);
    assert.equal(r.isError, true);
    const t = (r.content[0] as { text: string }).text;
    assert.match(
      t,
      /^Error \(concurrency, HTTP 403\): Concurrency limit reached: 1 sandboxes running\ndetails: \{"limit":1\}\n/,
    );
    assert.match(t, /delete_sandbox or pause_sandbox/);
    assert.deepEqual(r.structuredContent, {
      error: {
        kind: 'concurrency',
        code: 403,
        message: 'Concurrency limit reached: 1 sandboxes running',
        details: { limit: 1 },
      },
    });
    assert.deepEqual(failureOf(new NotFoundError('Sandbox not found', { status: 404, kind: 'not_found' })), {
      kind: 'not_found',
      code: 404,
      message: 'Sandbox not found',
    });
    assert.equal(failureOf(new ConnectionError('down', { status: 0, kind: 'connection' })).kind, 'connection');
    assert.equal(failureOf(new RangeError('port must be an integer')).kind, 'validation');
    assert.equal(failureOf(new Error('boom')).kind, 'internal');
  });

  it('long details are cut; colours are removed from tracebacks', () => {
    const r = toolError(
      new NotFoundError('x', { status: 404, kind: 'not_found', details: { big: 'y'.repeat(10_000) } }),
    );
    assert.ok((r.content[0] as { text: string }).text.length < 2500);
    assert.equal(
      stripAnsi('\u001b[0;31mZeroDivisionError\u001b[0m: division by zero'),
      'ZeroDivisionError: division by zero',
    );
  });
});
