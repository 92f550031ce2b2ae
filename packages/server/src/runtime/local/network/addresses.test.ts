import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planSubnet } from './addr.js';
import { AddressBook } from './addresses.js';

describe('AddressBook', () => {
  it('hands out the addresses of a /29 round robin, the gateway never, and refuses past the last', () => {
    const book = new AddressBook(planSubnet('10.9.0.0/29'));
    assert.deepEqual(book.counts(), { free: 5, total: 5 });
    const got = ['a', 'b', 'c', 'd', 'e'].map((id) => book.allocate(id));
    assert.deepEqual(got, ['10.9.0.2', '10.9.0.3', '10.9.0.4', '10.9.0.5', '10.9.0.6']);
    assert.equal(book.hasFree(), false);
    assert.throws(() => book.allocate('f'), /no free address left in 10\.9\.0\.0\/29/);
    // A freed address is handed out again only after the ones not used since.
    book.release('b');
    book.release('d');
    assert.deepEqual(book.counts(), { free: 2, total: 5 });
    assert.equal(book.allocate('g'), '10.9.0.3');
    assert.equal(book.allocate('h'), '10.9.0.5');
    assert.deepEqual(book.heldBy('h'), ['10.9.0.5']);
  });

  it("reserves the host's addresses inside the subnet only, and prunes those whose route is gone", () => {
    const book = new AddressBook(planSubnet('10.9.0.0/29'));
    book.reserve('10.9.0.2', '');
    book.reserve('10.9.0.3', 'x');
    book.reserve('10.9.0.3', 'y'); // taken: stays x's
    book.reserve('192.168.1.1', '');
    book.reserve('not-an-address', '');
    assert.deepEqual(book.counts(), { free: 3, total: 5 });
    assert.deepEqual(book.heldBy('x'), ['10.9.0.3']);
    assert.deepEqual(book.heldBy('y'), []);
    book.pruneHostOnly(new Set(['10.9.0.3']));
    assert.deepEqual(book.counts(), { free: 4, total: 5 });
    assert.equal(book.allocate('z'), '10.9.0.2');
    book.clear();
    assert.deepEqual(book.counts(), { free: 5, total: 5 });
    assert.equal(book.allocate('w'), '10.9.0.2');
  });
});
