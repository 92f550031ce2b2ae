import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ERROR_STATUS, type ErrorKind } from '@sandboxd/protocol';
import {
  AuthenticationError,
  ConcurrencyLimitError,
  ConflictError,
  errorFromResponse,
  InsufficientStorageError,
  InsufficientTokensError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitError,
  SandboxdApiError,
  ServerError,
  ServiceUnavailableError,
  TemplateNotFoundError,
  ValidationError,
} from './errors.js';

describe('errorFromResponse', () => {
  const expected: Record<ErrorKind, new (...a: never[]) => SandboxdApiError> = {
    validation: ValidationError,
    unauthorized: AuthenticationError,
    insufficient_tokens: InsufficientTokensError,
    concurrency_limit: ConcurrencyLimitError,
    not_found: NotFoundError,
    template_not_found: TemplateNotFoundError,
    conflict: ConflictError,
    payload_too_large: PayloadTooLargeError,
    rate_limited: RateLimitError,
    internal: ServerError,
    unavailable: ServiceUnavailableError,
    insufficient_storage: InsufficientStorageError,
  };

  for (const [kind, status] of Object.entries(ERROR_STATUS) as [ErrorKind, number][]) {
    it(`${status} (${kind}) becomes ${expected[kind].name}`, () => {
      const message = kind === 'template_not_found' ? 'Template not found' : `some ${kind}`;
      const e = errorFromResponse(status, { code: status, message, details: { x: 1 } });
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

  it('404 is a template error when the message or details say so, else plain not found', () => {
    assert.ok(
      errorFromResponse(404, { code: 404, message: 'Template not found', details: { image: 'x:1' } }) instanceof
        TemplateNotFoundError,
    );
    assert.ok(
      errorFromResponse(404, { code: 404, message: 'No such thing', details: { image: 'x:1' } }) instanceof
        TemplateNotFoundError,
    );
    const plain = errorFromResponse(404, { code: 404, message: 'Sandbox not found' });
    assert.ok(plain instanceof NotFoundError && !(plain instanceof TemplateNotFoundError));
    assert.ok(errorFromResponse(404, { code: 404, message: 'Template not found' }) instanceof NotFoundError);
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
