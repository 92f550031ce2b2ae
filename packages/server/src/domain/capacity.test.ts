import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { CAPACITY_RETRY_MS, capacityError, hostFullError, sandboxesFull } from './capacity.js';

describe('capacity errors', () => {
  it('a refusal is a 503 capacity naming the resource, with retryAfterMs in details and the wait in the message', () => {
    const e = sandboxesFull(2000, 2000);
    assert.equal(e.kind, 'capacity');
    assert.equal(e.status, 503);
    assert.equal(
      e.message,
      'The host has no room for more sandboxes: 2000 of 2000 are in use (maxSandboxes); retry in 5 s',
    );
    assert.deepEqual(e.details, { resource: 'sandboxes', retryAfterMs: CAPACITY_RETRY_MS, used: 2000, max: 2000 });
    assert.deepEqual(capacityError('disk', 'x', { freeBytes: 1 }).details, {
      resource: 'disk',
      retryAfterMs: 5000,
      freeBytes: 1,
    });
  });

  it('runtime failures that mean a full host become capacity, naming the resource and no path', () => {
    const cases: Array<[unknown, string]> = [
      [
        new SandboxdError(
          'internal',
          'network: sh -c ... failed (2): RTNETLINK answers: Exchange full; Cannot find device "sv0123456789"',
        ),
        'addresses',
      ],
      [Object.assign(new Error('add port'), { code: 'EXFULL' }), 'addresses'],
      [new SandboxdError('internal', 'network: no free address left in 10.89.0.0/16'), 'addresses'],
      [
        Object.assign(new Error('spawn /usr/bin/crun EAGAIN'), { code: 'EAGAIN', syscall: 'spawn /usr/bin/crun' }),
        'processes',
      ],
      [new Error('sandbox x failed to start: crun: clone: Resource temporarily unavailable'), 'processes'],
      [new Error('/bin/sh: fork: retry: Resource temporarily unavailable'), 'processes'],
      [new Error('crun: mmap: Cannot allocate memory'), 'memory'],
      [new Error('outer', { cause: Object.assign(new Error('inner'), { code: 'ENOMEM' }) }), 'memory'],
    ];
    for (const [err, resource] of cases) {
      const e = hostFullError(err);
      assert.ok(e, `${String(err)} -> capacity`);
      assert.equal(e.kind, 'capacity');
      assert.equal((e.details as { resource: string }).resource, resource, String(err));
      assert.doesNotMatch(e.message, /sv0123|crun|\/bin|10\.89/, 'the runtime words stay in the log');
    }
  });

  it('other failures, and a full disk (the 507 of domain/storage), are not capacity', () => {
    for (const err of [
      new Error('boom'),
      Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }),
      new SandboxdError('internal', 'network: ip link add failed (2): RTNETLINK answers: File exists'),
      new Error('crun: open `/run/x`: Permission denied'),
      null,
      'Exchange fully',
    ])
      assert.equal(hostFullError(err), null, String(err));
  });
});
