import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { ProcessSelectorSchema, Signal } from './gen/process_pb.js';
import {
  DEFAULT_KEEPALIVE_MS,
  describeSelector,
  endEvent,
  keepAliveMs,
  MAX_DEADLINE_MS,
  selectorOf,
  signalOf,
  startDeadlineMs,
} from './process-wire.js';

const code = (c: Code) => (e: unknown) => e instanceof ConnectError && e.code === c;

describe('envd process wire', () => {
  it('an exit reads as envd reports it: exit status n (the error unless 0), signals as Go names them', () => {
    assert.deepEqual(endEvent({ exitCode: 0, signal: null }), { exitCode: 0, exited: true, status: 'exit status 0' });
    assert.deepEqual(endEvent({ exitCode: 3, signal: null }), {
      exitCode: 3,
      exited: true,
      status: 'exit status 3',
      error: 'exit status 3',
    });
    assert.deepEqual(endEvent({ exitCode: 137, signal: 'SIGKILL' }), {
      exitCode: -1,
      exited: false,
      status: 'signal: killed',
      error: 'signal: killed',
    });
    assert.equal(endEvent({ exitCode: 143, signal: 'SIGTERM' }).status, 'signal: terminated');
    assert.equal(endEvent({ exitCode: 129, signal: 'SIGHUP' }).status, 'signal: hangup');
    assert.equal(endEvent({ exitCode: 162, signal: 'SIGRTMIN' }).status, 'signal: SIGRTMIN');
    // Killed at the deadline (the runtime reports 124 without a signal): killed, as envd's context kill.
    assert.deepEqual(endEvent({ exitCode: 124, signal: null, timedOut: true }), {
      exitCode: -1,
      exited: false,
      status: 'signal: killed',
      error: 'signal: killed',
    });
  });

  it('signals: SIGKILL and SIGTERM; anything else is InvalidArgument', () => {
    assert.equal(signalOf(Signal.SIGKILL), 'SIGKILL');
    assert.equal(signalOf(Signal.SIGTERM), 'SIGTERM');
    assert.throws(() => signalOf(Signal.UNSPECIFIED), code(Code.InvalidArgument));
    assert.throws(() => signalOf(2 as Signal), code(Code.InvalidArgument));
  });

  it('selectors name a pid or a tag; an empty one is InvalidArgument', () => {
    assert.deepEqual(selectorOf(create(ProcessSelectorSchema, { selector: { case: 'pid', value: 42 } })), { pid: 42 });
    assert.deepEqual(selectorOf(create(ProcessSelectorSchema, { selector: { case: 'tag', value: 'web' } })), {
      tag: 'web',
    });
    assert.throws(() => selectorOf(undefined), code(Code.InvalidArgument));
    assert.throws(() => selectorOf(create(ProcessSelectorSchema, {})), code(Code.InvalidArgument));
    assert.throws(
      () => selectorOf(create(ProcessSelectorSchema, { selector: { case: 'pid', value: 0 } })),
      code(Code.InvalidArgument),
    );
    assert.throws(
      () => selectorOf(create(ProcessSelectorSchema, { selector: { case: 'tag', value: '' } })),
      code(Code.InvalidArgument),
    );
    assert.equal(describeSelector({ pid: 7 }), 'process with pid 7');
    assert.equal(describeSelector({ tag: 'a"b' }), 'process with tag "a\\"b"');
  });

  it('headers: keep-alive seconds (envd default otherwise), the Start deadline in ms (none: 0)', () => {
    assert.equal(keepAliveMs('50'), 50_000);
    assert.equal(keepAliveMs(null), DEFAULT_KEEPALIVE_MS);
    assert.equal(keepAliveMs('0'), DEFAULT_KEEPALIVE_MS);
    assert.equal(keepAliveMs('-5'), DEFAULT_KEEPALIVE_MS);
    assert.equal(keepAliveMs('soon'), DEFAULT_KEEPALIVE_MS);
    assert.equal(keepAliveMs('999999999'), MAX_DEADLINE_MS);
    assert.equal(startDeadlineMs('60000'), 60_000);
    assert.equal(startDeadlineMs(null), 0);
    assert.equal(startDeadlineMs('1e3'), 0);
    assert.equal(startDeadlineMs('9999999999'), MAX_DEADLINE_MS);
  });
});
