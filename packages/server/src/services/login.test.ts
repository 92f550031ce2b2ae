import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parsePasswd } from '../runtime/passwd.js';
import { loginCwd, loginOf } from './login.js';

const entries = parsePasswd(
  ['root:x:0:0:root:/root:/bin/bash', 'user:x:1000:1000::/home/user/:/bin/bash', 'svc:x:999:999:::/bin/sh'].join('\n'),
);

describe('login', () => {
  it('sets HOME, USER and LOGNAME from the sandbox passwd and runs in the home by default', () => {
    assert.deepEqual(loginOf(entries, 'user', '0:0'), {
      user: '1000:1000',
      env: { HOME: '/home/user', USER: 'user', LOGNAME: 'user' },
      cwd: '/home/user',
    });
    assert.deepEqual(loginOf(entries, 'root', '1000:1000', '/tmp'), {
      user: '0:0',
      env: { HOME: '/root', USER: 'root', LOGNAME: 'root' },
      cwd: '/tmp',
    });
  });

  it("no user: the image's user (looked up by uid), left to the runtime", () => {
    assert.deepEqual(loginOf(entries, undefined, '1000:1000'), {
      user: undefined,
      env: { HOME: '/home/user', USER: 'user', LOGNAME: 'user' },
      cwd: '/home/user',
    });
    // An image user that is not in the file: HOME is /, no name.
    assert.deepEqual(loginOf(entries, undefined, '4242:4242'), { user: undefined, env: { HOME: '/' }, cwd: '/' });
  });

  it('numeric users run without an entry; a user without a home gets /; root works without a passwd', () => {
    assert.deepEqual(loginOf(entries, '4242', '0:0'), { user: '4242', env: { HOME: '/' }, cwd: '/' });
    assert.equal(loginOf(entries, 'svc', '0:0').cwd, '/');
    assert.deepEqual(loginOf([], 'root', '0:0'), {
      user: '0:0',
      env: { HOME: '/root', USER: 'root', LOGNAME: 'root' },
      cwd: '/root',
    });
  });

  it('an unknown user name is a validation error naming it', () => {
    assert.throws(() => loginOf(entries, 'ghost', '0:0'), { kind: 'validation', message: /ghost/ });
  });

  it('cwd: absolute as given (normalized), ~ and relative paths under the home', () => {
    assert.equal(loginCwd(undefined, '/home/user'), '/home/user');
    assert.equal(loginCwd('', '/home/user'), '/home/user');
    assert.equal(loginCwd('/tmp/../var/', '/home/user'), '/var');
    assert.equal(loginCwd('~', '/home/user'), '/home/user');
    assert.equal(loginCwd('~/proj', '/home/user'), '/home/user/proj');
    assert.equal(loginCwd('proj/src', '/home/user'), '/home/user/proj/src');
    assert.equal(loginCwd('../other', '/home/user'), '/home/other');
    assert.throws(() => loginCwd('~root/x', '/home/user'), { kind: 'validation' });
    assert.throws(() => loginCwd('/a\0b', '/home/user'), { kind: 'validation' });
  });
});
