/**
 * Test stand-in for a wildcard DNS record: names under `localhost` resolve to 127.0.0.1,
 * as browsers and curl already do (Node asks the system resolver, which knows only
 * `localhost` itself). A deployment points `*.<publicHost>` at the server instead. Loaded
 * with `--import` (or imported) before E2B's SDK makes its first connection.
 */
import dns from 'node:dns';

const LOCALHOST = /(^|\.)localhost\.?$/i;
const system = dns.lookup;

dns.lookup = function lookup(host, options, callback) {
  const cb = typeof options === 'function' ? options : callback;
  const opts = typeof options === 'function' ? {} : typeof options === 'number' ? { family: options } : (options ?? {});
  if (!LOCALHOST.test(String(host))) return system.call(this, host, options, callback);
  if (opts.all) process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }]);
  else process.nextTick(cb, null, '127.0.0.1', 4);
  return {};
};
