import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { commandOf } from './processes.js';

describe('commandOf', () => {
  it('lists /bin/sh -c commands by their command, other argv as a shell would read it', () => {
    assert.equal(commandOf(['/bin/sh', '-c', 'echo hi; exit 2']), 'echo hi; exit 2');
    assert.equal(commandOf(['/bin/bash', '-l', '-c', 'sleep 5']), "/bin/bash -l -c 'sleep 5'");
    assert.equal(commandOf(['/bin/echo', "it's", '', 'a=b']), "/bin/echo 'it'\\''s' '' a=b");
  });
});
