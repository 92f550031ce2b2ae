/**
 * Every error answer of sandboxd carries a known `kind` (the SDK branches on it). Imported
 * for its effect by the harness, so every e2e and security suite checks it: `fetch` in the
 * test process is wrapped, and an error answer of the server (its API, or a refusal of its
 * port proxy) whose JSON body lacks a valid `kind`, or whose `code` is not the status,
 * rejects the fetch with a message naming the request. Answers of programs inside
 * sandboxes (proxied, without `X-Sandboxd-Proxy: error`) are theirs and are not checked.
 */
import { ERROR_STATUS, isErrorKind } from '@sandboxd/protocol';

/** Throws unless `text` is a sandboxd error body for `status`. */
export function assertErrorBody(status: number, text: string, where: string): void {
  let body: { code?: unknown; kind?: unknown; message?: unknown };
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`${where}: error ${status} with a body that is not JSON: ${text.slice(0, 200)}`);
  }
  if (!isErrorKind(body.kind)) throw new Error(`${where}: error ${status} without a valid kind: ${text.slice(0, 300)}`);
  if (body.code !== status || ERROR_STATUS[body.kind] !== status) {
    throw new Error(`${where}: error ${status} whose code or kind says another status: ${text.slice(0, 300)}`);
  }
  if (typeof body.message !== 'string' || body.message === '')
    throw new Error(`${where}: error ${status} without a message`);
}

/** True for an answer of sandboxd itself (not of a program in a sandbox reached through the proxy). */
function fromSandboxd(url: URL, res: Response): boolean {
  if (res.headers.get('x-sandboxd-proxy') === 'error') return true;
  return !/^\d+-sbx_/.test(url.hostname);
}

const CHECKED = Symbol.for('sandboxd.e2e.errorKindCheck');
const g = globalThis as typeof globalThis & { [CHECKED]?: true };
if (!g[CHECKED]) {
  g[CHECKED] = true;
  const original = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const res = await original(input, init);
    const url = new URL(input instanceof Request ? input.url : String(input));
    const json = /\bapplication\/json\b/i.test(res.headers.get('content-type') ?? '');
    if (res.status >= 400 && json && fromSandboxd(url, res) && (init?.method ?? 'GET') !== 'HEAD') {
      assertErrorBody(res.status, await res.clone().text(), `${init?.method ?? 'GET'} ${url.pathname}`);
    }
    return res;
  };
}
