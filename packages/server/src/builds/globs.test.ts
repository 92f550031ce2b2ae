import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DockerIgnore, goClean, hasWildcards, PatternError, segmentMatcher } from './globs.js';

describe('COPY wildcards (Go filepath.Match per segment)', () => {
  it('matches *, ?, classes, ranges, negation and escapes within one segment', () => {
    const yes: [string, string][] = [
      ['*.txt', 'a.txt'],
      ['*', '.hidden'],
      ['*', ''],
      ['a?c', 'abc'],
      ['[a-c]x', 'bx'],
      ['[^a-c]x', 'dx'],
      ['[\\]]', ']'],
      ['arr[[]0].txt', 'arr[0].txt'],
      ['\\*', '*'],
      ['ü?', 'üx'],
      ['[a-cx-z]', 'y'],
    ];
    const no: [string, string][] = [
      ['*.txt', 'a.md'],
      ['a?c', 'ac'],
      ['[^a-c]x', 'ax'],
      ['\\*', 'a'],
      ['[z-a]', 'b'],
      ['*', 'a/b'],
      ['a', 'A'],
    ];
    for (const [p, n] of yes) assert.ok(segmentMatcher(p).test(n), `${p} ~ ${n}`);
    for (const [p, n] of no) assert.ok(!segmentMatcher(p).test(n), `${p} !~ ${n}`);
  });

  it('refuses malformed patterns', () => {
    for (const bad of ['[', '[]', '[a-', '[-a]', 'a\\', '[a'])
      assert.throws(() => segmentMatcher(bad), PatternError, bad);
  });

  it('knows wildcards from escaped characters', () => {
    assert.deepEqual(['a/b', 'a/*', 'a\\*', '[x]', 'x?', 'a\\[b'].map(hasWildcards), [
      false,
      true,
      false,
      true,
      true,
      false,
    ]);
    assert.deepEqual(['', 'a/', '/a/../b', './x', 'a//b'].map(goClean), ['.', 'a', '/b', 'x', 'a/b']);
  });
});

describe('.dockerignore', () => {
  /** patternmatcher's MatchesOrParentMatches, written plainly: each pattern tried on the path and each parent. */
  function naive(patterns: { re: RegExp; exclusion: boolean }[], path: string): boolean {
    const parts = path.split('/');
    const candidates = parts.map((_, i) => parts.slice(0, i + 1).join('/'));
    let matched = false;
    for (const p of patterns) {
      if (p.exclusion !== matched) continue;
      if (candidates.some((c) => p.re.test(c))) matched = !p.exclusion;
    }
    return matched;
  }

  it('excludes by the last deciding pattern, parents included, with ** and exceptions', () => {
    const ig = DockerIgnore.parse(
      [
        '# comment',
        '',
        '  *.log  ',
        'build/',
        '/tmp',
        './cache',
        '**/*.bak',
        'docs/**',
        '!docs/keep.md',
        'a/*/c',
        '!!',
      ].join('\n'),
    );
    const cases: [string, boolean][] = [
      ['x.log', true],
      ['dir/x.log', false],
      ['build', true],
      ['build/out/bin', true],
      ['tmp', true],
      ['tmp/x', true],
      ['cache', true],
      ['a.bak', true],
      ['deep/er/a.bak', true],
      ['docs', false],
      ['docs/x', true],
      ['docs/keep.md', false],
      ['a/b/c', true],
      ['a/b/c/d', true],
      ['a/c', false],
      ['!', false],
      ['src/main.go', false],
      ['', false],
    ];
    for (const [p, want] of cases) assert.equal(ig.excludes(p), want, p);
  });

  it('a walk with matchInfo decides as excludes does', () => {
    const ig = DockerIgnore.parse('node_modules\n!node_modules/keep\nnode_modules/keep/drop\n**/x');
    const walk = (path: string) => {
      let info = ig.matchInfo('', null);
      const parts = path.split('/');
      parts.forEach((_, i) => {
        info = ig.matchInfo(parts.slice(0, i + 1).join('/'), info);
      });
      return ig.excluded(info);
    };
    for (const p of [
      'node_modules',
      'node_modules/a',
      'node_modules/keep',
      'node_modules/keep/a',
      'node_modules/keep/drop',
      'a/x',
      'x',
      'y',
    ]) {
      assert.equal(walk(p), ig.excludes(p), p);
    }
    assert.deepEqual(
      ['node_modules/a', 'node_modules/keep/a', 'node_modules/keep/drop/z', 'q/x/r'].map((p) => ig.excludes(p)),
      [true, false, true, true],
    );
    const plain = [
      { re: /^node_modules$/u, exclusion: false },
      { re: /^node_modules\/keep$/u, exclusion: true },
      { re: /^node_modules\/keep\/drop$/u, exclusion: false },
    ];
    const ig2 = DockerIgnore.parse('node_modules\n!node_modules/keep\nnode_modules/keep/drop');
    for (const p of ['node_modules/a', 'node_modules/keep/a', 'node_modules/keep/drop/z']) {
      assert.equal(ig2.excludes(p), naive(plain, p), p);
    }
  });

  it('refuses a lone ! and malformed patterns by line', () => {
    assert.throws(() => DockerIgnore.parse('ok\n!'), /line 2: "!" alone is not a pattern/);
    assert.throws(() => DockerIgnore.parse('a\nb\n[x'), /line 3: syntax error in pattern "\[x"/);
    assert.equal(DockerIgnore.parse('# only comments\n\n').empty, true);
  });
});
