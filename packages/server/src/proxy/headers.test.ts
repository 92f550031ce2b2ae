import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { findCookie, withoutCookie } from './headers.js';

const req = (cookie?: string) => ({ headers: cookie === undefined ? {} : { cookie } }) as IncomingMessage;

describe('cookies of proxied requests', () => {
  it('findCookie: the first value of the name that is accepted, so a planted one cannot shadow the real one', () => {
    const good = (v: string) => v.startsWith('good');
    assert.equal(findCookie(req('t=planted; a=good-other; t=good1; t=good2'), 't', good), 'good1');
    assert.equal(findCookie(req('t=good0; t=good1'), 't', good), 'good0', 'first occurrence wins');
    assert.equal(findCookie(req('t=planted'), 't', good), undefined);
    assert.equal(findCookie(req('a=good'), 't', good), undefined, 'other names are never answered');
    assert.equal(findCookie(req(), 't', good), undefined);
    assert.equal(findCookie(req(''), 't', good), undefined);
  });

  it('findCookie: malformed headers do not throw; values are as sent', () => {
    const any = () => true;
    assert.equal(findCookie(req('t=%zz%; u'), 't', any), '%zz%');
    assert.equal(findCookie(req(';;=;t;  t = v ;'), 't', any), 'v');
    assert.equal(findCookie(req('t="q"'), 't', any), '"q"');
    assert.equal(findCookie(req('t=a%20b'), 't', any), 'a%20b');
  });

  it('withoutCookie drops every value of the name and keeps the rest as sent', () => {
    assert.equal(withoutCookie('app=1; t=x; other=%41; t=y', 't'), 'app=1; other=%41');
    assert.equal(withoutCookie('t=x', 't'), '');
  });
});
