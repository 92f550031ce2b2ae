import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  emptyNotebook,
  forgetNotebooks,
  imageUrl,
  isDataFrameHtml,
  type KeyValueStore,
  loadNotebook,
  MAX_TABLE_ROWS,
  parseEvent,
  pickRepresentation,
  saveNotebook,
  stripAnsi,
  svgUrl,
  tableFromData,
  withoutInlineStyles,
} from './notebook-util.js';

/** A Map as storage; `limit` makes setItem throw past that many characters, as a full sessionStorage does. */
function store(limit = Number.POSITIVE_INFINITY): KeyValueStore & { map: Map<string, string> } {
  const map = new Map<string, string>();
  return {
    map,
    getItem: (k) => map.get(k) ?? null,
    setItem: (k, v) => {
      if (v.length > limit) throw new DOMException('quota', 'QuotaExceededError');
      map.set(k, v);
    },
  };
}

describe('notebook helpers', () => {
  it('parseEvent: the relay events typed, tracebacks as text, unknown lines dropped', () => {
    assert.deepEqual(parseEvent({ type: 'stdout', text: 'hi\n', timestamp: 1 }), { type: 'stdout', text: 'hi\n' });
    assert.deepEqual(parseEvent({ type: 'stderr', text: 'oops' }), { type: 'stderr', text: 'oops' });
    assert.deepEqual(parseEvent({ type: 'executionCount', count: 2 }), { type: 'executionCount', count: 2 });
    assert.equal(parseEvent({ type: 'executionCount', count: 'x' }), null);
    assert.deepEqual(parseEvent({ type: 'end' }), { type: 'end' });
    assert.deepEqual(parseEvent({ type: 'result', result: { text: '42', isMainResult: true } }), {
      type: 'result',
      result: { text: '42', isMainResult: true },
    });
    assert.equal(parseEvent({ type: 'result' }), null);
    assert.deepEqual(parseEvent({ type: 'error', name: 'NameError', value: "name 'y'", traceback: 'tb' }), {
      type: 'error',
      name: 'NameError',
      value: "name 'y'",
      traceback: 'tb',
    });
    assert.equal(parseEvent({ type: 'error', name: 'E', value: 'v', traceback: ['a', 'b'] })?.type, 'error');
    assert.deepEqual(parseEvent({ type: 'error', name: 'E', value: 'v', traceback: ['a', 'b'] }), {
      type: 'error',
      name: 'E',
      value: 'v',
      traceback: 'a\nb',
    });
    assert.equal(parseEvent({ type: 'later' }), null);
    assert.equal(parseEvent('text'), null);
    assert.equal(parseEvent(null), null);
  });

  it('stripAnsi: colours and cursor escapes go, text and line breaks stay', () => {
    assert.equal(stripAnsi('\x1b[0;31mNameError\x1b[0m: x'), 'NameError: x');
    assert.equal(stripAnsi('a\x1b[2Kb\x1b]0;title\x07c'), 'abc');
    assert.equal(stripAnsi('10%\r20%\r\ndone\tok'), '10%\n20%\ndone\tok');
    assert.equal(stripAnsi('bell\x07 nul\x00'), 'bell nul');
  });

  it('pickRepresentation: images first, then DataFrames as tables, HTML, and the text forms', () => {
    assert.deepEqual(pickRepresentation({ png: 'iVBORw0KGgo=', text: '<Figure>' }), {
      kind: 'png',
      url: 'data:image/png;base64,iVBORw0KGgo=',
    });
    assert.equal(pickRepresentation({ jpeg: '/9j/4AAQ', html: '<b>x</b>' }).kind, 'jpeg');
    // Not base64: not put in a URL, the next representation is shown.
    assert.equal(pickRepresentation({ png: 'not base64!"', text: 't' }).kind, 'text');
    const svg = pickRepresentation({ svg: '<svg xmlns="http://www.w3.org/2000/svg"><script>x</script></svg>' });
    assert.equal(svg.kind, 'svg');
    assert.ok(svg.kind === 'svg' && svg.url.startsWith('data:image/svg+xml;charset=utf-8,%3Csvg'));
    assert.equal(pickRepresentation({ data: { a: [1, 2] }, html: '<div>x</div>', text: 'df' }).kind, 'table');
    assert.equal(pickRepresentation({ html: '<table border="1" class="dataframe">' }).kind, 'table');
    assert.deepEqual(pickRepresentation({ html: '<p>hi</p>', text: 'x' }), { kind: 'html', html: '<p>hi</p>' });
    assert.equal(pickRepresentation({ markdown: '# T', text: 't' }).kind, 'markdown');
    assert.equal(pickRepresentation({ latex: '$x$' }).kind, 'latex');
    assert.deepEqual(pickRepresentation({ json: { a: 1 } }), { kind: 'json', text: '{\n  "a": 1\n}' });
    assert.deepEqual(pickRepresentation({ text: '42', isMainResult: true }), { kind: 'text', text: '42' });
    assert.equal(pickRepresentation({ javascript: 'alert(1)' }).kind, 'javascript');
    assert.equal(pickRepresentation({ pdf: 'JVBERi0=' }).kind, 'pdf');
    assert.equal(pickRepresentation({ isMainResult: false }).kind, 'empty');
  });

  it('imageUrl, svgUrl and isDataFrameHtml', () => {
    assert.equal(imageUrl('image/png', 'iVBO\nRw0K'), 'data:image/png;base64,iVBORw0K');
    assert.equal(imageUrl('image/png', '"><script>'), null);
    assert.equal(svgUrl('<svg/>#'), 'data:image/svg+xml;charset=utf-8,%3Csvg%2F%3E%23');
    assert.ok(isDataFrameHtml('<div><style scoped></style><table border="1" class="dataframe">'));
    assert.ok(!isDataFrameHtml('<table class="other">'));
  });

  it('withoutInlineStyles: style elements and attributes go, the rest stays', () => {
    assert.equal(
      withoutInlineStyles(
        '<div><style scoped>\n.x { color: red }\n</STYLE ><table class="dataframe"><tr style="text-align: right;"><td style=\'a:b\' id=c>1</td></tr></table></div>',
      ),
      '<div><table class="dataframe"><tr><td id=c>1</td></tr></table></div>',
    );
    assert.equal(withoutInlineStyles('<p data-style="x">style=1</p>'), '<p data-style="x">style=1</p>');
  });

  it('tableFromData: pandas column lists and row objects; capped rows; other shapes refused', () => {
    assert.deepEqual(tableFromData({ a: [1, 2], b: ['x', null] }), {
      columns: ['a', 'b'],
      rows: [
        ['1', 'x'],
        ['2', ''],
      ],
      moreRows: 0,
      moreColumns: 0,
    });
    assert.deepEqual(tableFromData([{ a: 1 }, { a: 2, b: { c: true } }]), {
      columns: ['a', 'b'],
      rows: [
        ['1', ''],
        ['2', '{"c":true}'],
      ],
      moreRows: 0,
      moreColumns: 0,
    });
    const big = tableFromData({ n: Array.from({ length: MAX_TABLE_ROWS + 7 }, (_, i) => i) });
    assert.equal(big?.rows.length, MAX_TABLE_ROWS);
    assert.equal(big?.moreRows, 7);
    assert.equal(tableFromData({ a: 1 }), null);
    assert.equal(tableFromData({}), null);
    assert.equal(tableFromData([1, 2]), null);
    assert.equal(tableFromData('x'), null);
  });

  it('loadNotebook / saveNotebook: per sandbox, checked on load, code kept without outputs when full', () => {
    const s = store();
    assert.deepEqual(loadNotebook(s, 'sbx_a'), emptyNotebook());
    const nb = {
      language: 'javascript' as const,
      contexts: { javascript: 'ctx1' },
      cells: [
        {
          code: 'x',
          count: 3,
          outputs: [
            { type: 'stdout' as const, text: 'out' },
            { type: 'note' as const, tone: 'info' as const, text: 'Interrupted.' },
          ],
        },
      ],
    };
    assert.equal(saveNotebook(s, 'sbx_a', nb), 'all');
    assert.deepEqual(loadNotebook(s, 'sbx_a'), nb);
    assert.deepEqual(loadNotebook(s, 'sbx_b'), emptyNotebook(), 'another sandbox has its own');

    // Broken or foreign content is read as far as it is valid.
    s.setItem('sandboxd.notebook.v1.sbx_c', '{"language":"cobol","contexts":{"r":5,"bash":"c"},"cells":[{"code":1}]}');
    assert.deepEqual(loadNotebook(s, 'sbx_c'), { ...emptyNotebook(), contexts: { bash: 'c' } });
    s.setItem('sandboxd.notebook.v1.sbx_d', 'not json');
    assert.deepEqual(loadNotebook(s, 'sbx_d'), emptyNotebook());

    const small = store(200);
    const withImage = {
      ...nb,
      cells: [{ code: 'plot()', count: 1, outputs: [{ type: 'result' as const, result: { png: 'A'.repeat(500) } }] }],
    };
    assert.equal(saveNotebook(small, 'sbx_e', withImage), 'code');
    assert.deepEqual(loadNotebook(small, 'sbx_e').cells, [{ code: 'plot()', count: 1, outputs: [] }]);
    assert.equal(saveNotebook(store(10), 'sbx_f', withImage), 'none');
    assert.equal(saveNotebook(null, 'sbx_f', withImage), 'none');
  });

  it('forgetNotebooks: every kept notebook is removed (sign-out: outputs may hold secrets), nothing else', () => {
    const kept = new Map<string, string>();
    const all: Storage = {
      get length() {
        return kept.size;
      },
      key: (i: number) => [...kept.keys()][i] ?? null,
      getItem: (k: string) => kept.get(k) ?? null,
      setItem: (k: string, v: string) => void kept.set(k, v),
      removeItem: (k: string) => void kept.delete(k),
      clear: () => kept.clear(),
    };
    saveNotebook(all, 'sbx_a', emptyNotebook());
    saveNotebook(all, 'sbx_b', emptyNotebook());
    all.setItem('other.app.key', 'stays');
    assert.equal(kept.size, 3);
    forgetNotebooks(all);
    assert.deepEqual([...kept.keys()], ['other.app.key']);
    assert.deepEqual(loadNotebook(all, 'sbx_a'), emptyNotebook());
  });
});
