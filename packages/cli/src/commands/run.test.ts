/** `sbx run`'s result printing and image saving (the command itself runs in test/e2e/code-interpreter). */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Result } from '@sandboxd/sdk';
import { resultText, saveResultFiles } from './run.js';

describe('sbx run: results', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-run-unit-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('saves png/jpeg/svg/pdf as result-<n>.<ext>, decoded, never over an earlier file', () => {
    writeFileSync(join(dir, 'result-1.jpg'), 'earlier');
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 1, 2, 3]);
    const a = saveResultFiles(
      new Result({ png: png.toString('base64'), svg: '<svg/>', text: '<Figure>', isMainResult: false }),
      dir,
    );
    assert.deepEqual(a, [join(dir, 'result-2.png'), join(dir, 'result-2.svg')]);
    assert.deepEqual(readFileSync(a[0]), png);
    assert.equal(readFileSync(a[1], 'utf8'), '<svg/>');
    const b = saveResultFiles(new Result({ pdf: Buffer.from('%PDF').toString('base64'), isMainResult: true }), dir);
    assert.deepEqual(b, [join(dir, 'result-3.pdf')]);
    assert.deepEqual(saveResultFiles(new Result({ text: '1', isMainResult: true }), dir), []);
    assert.deepEqual(readdirSync(dir).sort(), ['result-1.jpg', 'result-2.png', 'result-2.svg', 'result-3.pdf']);
  });

  it('prints text, else markdown, html, latex, javascript, json', () => {
    assert.equal(resultText(new Result({ text: 't', html: '<b>', isMainResult: true })), 't');
    assert.equal(resultText(new Result({ markdown: '# m', html: '<b>', isMainResult: true })), '# m');
    assert.equal(resultText(new Result({ html: '<b>', isMainResult: true })), '<b>');
    assert.equal(resultText(new Result({ json: { a: 1 }, isMainResult: true })), '{\n  "a": 1\n}');
    assert.equal(resultText(new Result({ png: 'x', isMainResult: true })), undefined);
  });
});
