import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ERROR_STATUS, type ErrorKind } from '@sandboxd/protocol';
import {
  AuthenticationError,
  BadRequestError,
  CapacityError,
  ConcurrencyLimitError,
  QuotaExceededError,
  ConflictError,
  errorFromResponse,
  InsufficientStorageError,
  InsufficientTokensError,
  NoSpaceError,
  NoCodeInterpreterError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionError,
  RangeNotSatisfiableError,
  RateLimitError,
  SandboxdApiError,
  ServerError,
  ServiceUnavailableError,
  TemplateNotFoundError,
  UnsupportedError,
  UpstreamError,
  ValidationError,
} from './errors.js';

describe('errorFromResponse', () => {
  const expected: Record<ErrorKind, new (...a: never[]) => SandboxdApiError> = {
    validation: ValidationError,
    unauthorized: AuthenticationError,
    tokens: InsufficientTokensError,
    concurrency: ConcurrencyLimitError,
    quota: QuotaExceededError,
    permission: PermissionError,
    not_found: NotFoundError,
    template_not_found: TemplateNotFoundError,
    request_timeout: BadRequestError,
    conflict: ConflictError,
    no_code_interpreter: NoCodeInterpreterError,
    payload_too_large: PayloadTooLargeError,
    range_not_satisfiable: RangeNotSatisfiableError,
    rate_limited: RateLimitError,
    headers_too_large: BadRequestError,
    internal: ServerError,
    unsupported: UnsupportedError,
    upstream: UpstreamError,
    unavailable: ServiceUnavailableError,
    capacity: CapacityError,
    upstream_timeout: UpstreamError,
    insufficient_storage: InsufficientStorageError,
    no_space: NoSpaceError,
  };

  for (const [kind, status] of Object.entries(ERROR_STATUS) as [ErrorKind, number][]) {
    it(`${status} (${kind}) becomes ${expected[kind].name}`, () => {
      const message = `some ${kind}`;
      const e = errorFromResponse(status, { code: status, kind, message, details: { x: 1 } });
      assert.ok(e instanceof expected[kind], `${e.constructor.name}`);
      assert.ok(e instanceof SandboxdApiError);
      assert.equal(e.status, status);
      assert.equal(e.code, status);
      assert.equal(e.message, message);
      assert.deepEqual(e.details, { x: 1 });
      assert.equal(e.kind, kind);
      assert.equal(e.name, expected[kind].name);
    });
  }

  it('the kind decides, never the message: of two 404s only kind template_not_found is a template error', () => {
    const template = errorFromResponse(404, { code: 404, kind: 'template_not_found', message: 'No such image' });
    assert.ok(template instanceof TemplateNotFoundError);
    const plain = errorFromResponse(404, {
      code: 404,
      kind: 'not_found',
      message: 'Template not found',
      details: { image: 'x:1' },
    });
    assert.ok(plain instanceof NotFoundError && !(plain instanceof TemplateNotFoundError));
    assert.equal(plain.kind, 'not_found');
    // Two kinds share 503: the kind tells a full host from a server shutting down.
    assert.ok(errorFromResponse(503, { code: 503, kind: 'capacity', message: 'x' }) instanceof CapacityError);
    const down = errorFromResponse(503, { code: 503, kind: 'unavailable', message: 'x' });
    assert.ok(down instanceof ServiceUnavailableError && !(down instanceof CapacityError));
  });

  it('an answer without a kind (not from sandboxd, or a kind newer than this SDK) falls back to its status', () => {
    const bare = errorFromResponse(404, { code: 404, message: 'Template not found' });
    assert.ok(bare instanceof NotFoundError && !(bare instanceof TemplateNotFoundError));
    assert.equal(bare.kind, 'not_found');
    const newer = errorFromResponse(409, { code: 409, kind: 'some_future_kind', message: 'x' });
    assert.ok(newer instanceof ConflictError);
    assert.equal(newer.kind, 'conflict');
  });

  it('validation details become problems', () => {
    const problems = [{ in: 'body', path: '/image', message: 'is required' }];
    const e = errorFromResponse(400, { code: 400, message: 'Invalid request', details: problems });
    assert.ok(e instanceof ValidationError);
    assert.deepEqual(e.problems, problems);
    assert.deepEqual((errorFromResponse(400, { code: 400, message: 'x' }) as ValidationError).problems, []);
  });

  it('answers that are not error bodies still give a typed error with a message', () => {
    const gw = errorFromResponse(502, '<html>bad gateway</html>', { statusText: 'Bad Gateway' });
    assert.ok(gw instanceof ServerError);
    assert.equal(gw.message, 'HTTP 502 Bad Gateway');
    const teapot = errorFromResponse(418, undefined);
    assert.equal(teapot.constructor, SandboxdApiError);
    assert.equal(teapot.kind, 'unknown');
    assert.equal(teapot.message, 'HTTP 418');
  });

  it('Retry-After (seconds) becomes retryAfterMs', () => {
    assert.equal(errorFromResponse(429, { code: 429, message: 'slow down' }, { retryAfter: '2' }).retryAfterMs, 2000);
    assert.equal(
      errorFromResponse(429, { code: 429, message: 'slow down' }, { retryAfter: 'soon' }).retryAfterMs,
      undefined,
    );
  });
});
