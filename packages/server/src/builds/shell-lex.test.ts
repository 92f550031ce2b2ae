// biome-ignore-all lint/suspicious/noTemplateCurlyInString: Dockerfile ${VAR} substitutions, not templates
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { processWord, processWords, ShellLexError } from './shell-lex.js';

const ENV: Record<string, string> = { HOME: '/root', EMPTY: '', NAME: 'world', FILE: 'archive.tar.gz', SP: 'a  b' };
const env = (n: string) => ENV[n];
const word = (w: string, esc = '\\') => processWord(w, env, esc);

describe('Dockerfile word expansion (BuildKit shell.Lex)', () => {
  it('substitutes $NAME and ${NAME}; unset is empty; $ alone and digits stay as the shell has them', () => {
    const cases: [string, string][] = [
      ['plain', 'plain'],
      ['$HOME', '/root'],
      ['${HOME}/x', '/root/x'],
      ['$HOME.d', '/root.d'],
      ['pre$NAME-post', 'preworld-post'],
      ['$UNSET', ''],
      ['a${UNSET}b', 'ab'],
      ['$', '$'],
      ['a$.b', 'a$.b'],
      ['x$1y', 'xy'],
      ['$EMPTY|', '|'],
    ];
    for (const [w, want] of cases) assert.equal(word(w), want, w);
  });

  it('supports the default, alternative and error forms with and without the colon', () => {
    const cases: [string, string][] = [
      ['${UNSET:-def}', 'def'],
      ['${EMPTY:-def}', 'def'],
      ['${NAME:-def}', 'world'],
      ['${UNSET-def}', 'def'],
      ['${EMPTY-def}', ''],
      ['${UNSET:+alt}', ''],
      ['${EMPTY:+alt}', ''],
      ['${NAME:+alt}', 'alt'],
      ['${EMPTY+alt}', 'alt'],
      ['${UNSET:-$HOME}', '/root'],
      ['${UNSET:-${ALSO:-deep}}', 'deep'],
      ['${NAME:?must be set}', 'world'],
      ['${EMPTY?x}', ''],
    ];
    for (const [w, want] of cases) assert.equal(word(w), want, w);
    assert.throws(() => word('${UNSET:?give NAME}'), /UNSET: give NAME/);
    assert.throws(() => word('${EMPTY:?}'), /EMPTY: is not allowed to be empty/);
    assert.throws(() => word('${UNSET?}'), /UNSET: is not allowed to be unset/);
  });

  it('trims prefixes and suffixes and replaces by glob patterns', () => {
    const cases: [string, string][] = [
      ['${FILE#*.}', 'tar.gz'],
      ['${FILE##*.}', 'gz'],
      ['${FILE%.*}', 'archive.tar'],
      ['${FILE%%.*}', 'archive'],
      ['${FILE/a/A}', 'Archive.tar.gz'],
      ['${FILE//a/A}', 'Archive.tAr.gz'],
      ['${FILE/?r/__}', '__chive.tar.gz'],
      ['${NAME/o/$}', 'w$rld'],
      ['${NAME#\\*}', 'world'],
    ];
    for (const [w, want] of cases) assert.equal(word(w), want, w);
    assert.throws(() => word('${FILE#\\x}'), /invalid pattern/);
    assert.throws(() => word('${FILE:#x}'), /unsupported modifier/);
  });

  it('removes quotes: single quotes are literal, double quotes substitute and escape only " $ and the escape', () => {
    const cases: [string, string][] = [
      ["'$HOME'", '$HOME'],
      ['"$HOME"', '/root'],
      ['"a b"', 'a b'],
      [`"it's"`, "it's"],
      [`'say "hi"'`, 'say "hi"'],
      ['"\\$HOME"', '$HOME'],
      ['"a\\"b"', 'a"b'],
      ['"a\\\\b"', 'a\\b'],
      ['"a\\tb"', 'a\\tb'],
      ["'a\\tb'", 'a\\tb'],
      ['x"y"z', 'xyz'],
    ];
    for (const [w, want] of cases) assert.equal(word(w), want, w);
  });

  it('the escape character makes the next one literal outside quotes; a trailing one is dropped', () => {
    assert.equal(word('\\$HOME'), '$HOME');
    assert.equal(word('\\${HOME}'), '${HOME}');
    assert.equal(word('a\\ b'), 'a b');
    assert.equal(word('a\\tb'), 'atb');
    assert.equal(word('\\\\$HOME'), '\\/root');
    assert.equal(word('end\\'), 'end');
    // With `# escape=\``, the backslash is an ordinary character.
    assert.equal(word('C:\\dir\\$HOME', '`'), 'C:\\dir\\/root');
    assert.equal(word('`$HOME', '`'), '$HOME');
  });

  it('keeps other characters, Unicode included', () => {
    assert.equal(word('héllo wörld ✓'), 'héllo wörld ✓');
    assert.equal(word("안'녕'"), '안녕');
  });

  it('refuses unterminated quotes and braces and bad substitutions with a ShellLexError', () => {
    for (const bad of ['"open', "'open", 'a${HOME', '${}', '${:x}', '${HOME:=x}', '${HOME:x}', '"a\\"']) {
      assert.throws(() => word(bad), ShellLexError, bad);
    }
  });

  it('splits words at unquoted whitespace after substitution, keeping quoted spaces', () => {
    const words = (w: string) => processWords(w, env);
    assert.deepEqual(words('80 443/tcp'), ['80', '443/tcp']);
    assert.deepEqual(words('$SP c'), ['a', 'b', 'c']);
    assert.deepEqual(words('"$SP" c'), ['a  b', 'c']);
    assert.deepEqual(words("'x y'z"), ['x yz']);
    assert.deepEqual(words('a\\ b'), ['a b']);
    assert.deepEqual(words('   '), []);
  });

  it('keeps quotes, escapes and unset variables as written in heredoc-detection mode', () => {
    const o = { rawQuotes: true, rawEscapes: true, skipUnsetEnv: true };
    assert.deepEqual(processWords(`RUN cat <<"EOF" $UNSET '$HOME'`, env, '\\', o), [
      'RUN',
      'cat',
      '<<"EOF"',
      '$UNSET',
      "'$HOME'",
    ]);
  });
});
