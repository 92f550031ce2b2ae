import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { formatProblems, toHttpError } from './errors.js';

describe('toHttpError', () => {
  it('maps SandboxdError kinds to their statuses', () => {
    assert.deepEqual(toHttpError(new SandboxdError('tokens', 'x')).body, { code: 402, kind: 'tokens', message: 'x' });
    assert.equal(toHttpError(new SandboxdError('concurrency', 'x')).status, 403);
  });
  it('never leaks internals of unknown errors', () => {
    const r = toHttpError(new Error('ENOENT /var/lib/secret'));
    assert.deepEqual(r.body, { code: 500, kind: 'internal', message: 'Internal server error' });
    assert.equal(r.internal, true);
  });
  it('maps fastify body errors', () => {
    assert.equal(
      toHttpError(Object.assign(new Error('x'), { code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 })).status,
      413,
    );
    assert.equal(
      toHttpError(Object.assign(new Error('x'), { code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', statusCode: 415 })).status,
      400,
    );
  });
});

describe('formatProblems', () => {
  it('names unknown fields and collapses union branches', () => {
    const p = formatProblems(
      [
        { keyword: 'boolean', instancePath: '/foo', message: 'schema is false' },
        { keyword: 'additionalProperties', instancePath: '', params: { additionalProperties: ['foo'] } },
        { keyword: 'type', instancePath: '/volumes/~1a', message: 'must be string' },
        { keyword: 'minimum', instancePath: '/volumes/~1a/sizeGb', message: 'must be >= 1' },
        { keyword: 'anyOf', instancePath: '/volumes/~1a', message: 'must match a schema in anyOf' },
      ],
      'body',
    );
    assert.deepEqual(p, [
      { in: 'body', path: '/foo', message: 'is not an allowed field' },
      { in: 'body', path: '/volumes/~1a/sizeGb', message: 'must be >= 1' },
    ]);
  });
  it('names unknown fields even when the validator stopped before its summary error', () => {
    const capped = Array.from({ length: 8 }, (_, i) => ({
      keyword: 'boolean',
      schemaPath: '#/additionalProperties',
      instancePath: `/k${i}`,
      message: 'schema is false',
    }));
    const p = formatProblems(capped, 'query');
    assert.equal(p.length, 8);
    assert.deepEqual(p[0], { in: 'query', path: '/k0', message: 'is not an allowed field' });
    assert.deepEqual(formatProblems([], 'body'), [{ in: 'body', path: '', message: 'is invalid' }]);
  });
});
