import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { simpleWords } from './simple-command.js';

const env = ['PATH=/usr/bin:/bin', 'HOME=/root'];

describe('simpleWords', () => {
  it('splits plain commands into their words', () => {
    assert.deepEqual(simpleWords('python3 --version', env), ['python3', '--version']);
    assert.deepEqual(simpleWords('  ls\t-la  /tmp ', env), ['ls', '-la', '/tmp']);
    assert.deepEqual(simpleWords('dd if=/dev/zero of=/tmp/x bs=1M count=1', env)?.length, 5);
    assert.deepEqual(simpleWords('./run.sh a,b c:d e@f 50% +x', env)?.[0], './run.sh');
  });

  it('leaves to the shell what the shell would change', () => {
    for (const c of [
      '',
      '   ',
      'echo hi', // builtin
      'cd /tmp',
      'true',
      'exit 3',
      'test -f x',
      '[ -f x ]',
      '. ./env.sh',
      'A=1 env', // assignment
      'if',
      'ls *', // glob
      'ls ~', // tilde
      'echo $HOME',
      'ls `pwd`',
      "ls 'a b'",
      'ls "a"',
      'ls a\\ b',
      'ls > out',
      'ls | wc',
      'ls; ls',
      'ls && ls',
      'ls &',
      '(ls)',
      'ls # comment',
      'ls\nls',
      'ls {a,b}',
      'ls [ab]',
      'ls a?',
      '!ls',
    ])
      assert.equal(simpleWords(c, env), null, JSON.stringify(c));
  });

  it('leaves to the shell an environment with names the shell would not export', () => {
    assert.equal(simpleWords('ls', [...env, 'A-B=1']), null);
    assert.equal(simpleWords('ls', [...env, '1A=1']), null);
    assert.deepEqual(simpleWords('ls', [...env, 'A_1=x y $z']), ['ls']);
  });

  it('never lets through a character the shell treats specially', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (c) => {
        const w = simpleWords(c, env);
        if (w === null) return;
        assert.match(c, /^[ \tA-Za-z0-9_./,:@%+=-]*$/);
        assert.deepEqual(
          w.join(' '),
          c
            .trim()
            .split(/[ \t]+/)
            .join(' '),
        );
      }),
      { numRuns: 2000 },
    );
  });
});
