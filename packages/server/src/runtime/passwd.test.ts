import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { findUser, parsePasswd } from './passwd.js';

const PASSWD = [
  'root:x:0:0:root:/root:/bin/bash',
  '# a comment',
  'daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin',
  'broken line',
  'bad:x:abc:1::/:/bin/sh',
  'user:x:1000:1000::/home/user:/bin/bash\r',
  'nohome:x:1001:1001:::/bin/sh',
  '',
].join('\n');

describe('passwd', () => {
  it('parses entries, skipping comments and malformed lines', () => {
    const e = parsePasswd(PASSWD);
    assert.deepEqual(
      e.map((x) => [x.name, x.uid, x.gid, x.home, x.shell]),
      [
        ['root', 0, 0, '/root', '/bin/bash'],
        ['daemon', 1, 1, '/usr/sbin', '/usr/sbin/nologin'],
        ['user', 1000, 1000, '/home/user', '/bin/bash'],
        ['nohome', 1001, 1001, '', '/bin/sh'],
      ],
    );
  });

  it('finds users by name, root, uid, or uid:gid (the gid then wins)', () => {
    const e = parsePasswd(PASSWD);
    assert.equal(findUser(e, 'user')?.home, '/home/user');
    assert.equal(findUser(e, 'root')?.uid, 0);
    assert.equal(findUser(e, '1000')?.name, 'user');
    assert.deepEqual(findUser(e, '1000:5') && [findUser(e, '1000:5')?.name, findUser(e, '1000:5')?.gid], ['user', 5]);
    assert.equal(findUser(e, 'nobody'), undefined);
    assert.equal(findUser(e, '4242'), undefined);
    // A root renamed in the file is still uid 0.
    assert.equal(findUser(parsePasswd('toor:x:0:0::/root:/bin/sh'), 'root')?.name, 'toor');
    assert.equal(findUser([], 'root'), undefined);
  });
});
