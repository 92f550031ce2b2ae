import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { buildConsole, type ConsoleAssets } from '@sandboxd/console';
import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { sessionToken } from '../session-cookie.js';
import type { HttpDeps } from '../deps.js';

/** Browser paths of the console; each answers index.html (the app routes on the client). */
export const CONSOLE_PAGES = [
  '/',
  '/login',
  '/signup',
  '/onboarding',
  '/keys',
  '/sandboxes',
  '/sandboxes/new',
  '/sandboxes/:id',
  '/snapshots',
  '/templates',
  '/builds/new',
  '/builds/:id',
];

/**
 * The Content-Security-Policy of the console; `nonce` only lets xterm.js add its own style
 * elements. `data:` images are the notebook's plots (base64 PNG, JPEG, and SVG shown as an
 * image, where its scripts never run). The notebook's HTML results are `srcdoc` frames with an
 * empty `sandbox` attribute: they inherit this policy, so they load nothing from elsewhere.
 */
export function consoleCsp(nonce: string): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    `style-src 'self' 'nonce-${nonce}'`,
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "manifest-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

let loading: Promise<ConsoleAssets> | null = null;
const gzipped = new WeakMap<Buffer, Buffer>();

/** The bundle, built or read once per process (every server in a test process shares it). */
function loadOnce(): Promise<ConsoleAssets> {
  loading ??= buildConsole().catch((e) => {
    loading = null;
    throw e;
  });
  return loading;
}

function commonHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('x-frame-options', 'DENY')
    .header('cross-origin-opener-policy', 'same-origin');
}

/**
 * The browser console at `/`: index.html for the console's pages (never for `/api/`,
 * `/healthz` or `/metrics`, which keep their own answers) and the bundle under `/assets/`.
 * The bundle is built at start when its sources changed (cached in packages/console/dist).
 */
export const consoleRoutes: FastifyPluginAsync<HttpDeps> = async (app, d) => {
  const assets = await loadOnce();
  const opts = { schema: { hide: true }, config: { auth: 'none' as const } };

  const page = async (req: FastifyRequest, reply: FastifyReply) => {
    const nonce = randomBytes(18).toString('base64');
    // Tells the app whether to ask for the account, so a signed-out visit makes no 401 request.
    // A cookie sent twice (session-cookie.ts) is no session: the app shows the sign-in page.
    let token: string | undefined;
    try {
      token = sessionToken(req);
    } catch {
      token = undefined;
    }
    const signedIn = token
      ? await d.services.auth.fromSession(token).then(
          () => true,
          () => false,
        )
      : false;
    const html = assets.indexHtml.replace('%NONCE%', nonce).replace('%BOOT%', signedIn ? 'signed-in' : 'signed-out');
    return commonHeaders(reply)
      .header('content-security-policy', consoleCsp(nonce))
      .header('cache-control', 'no-store')
      .type('text/html; charset=utf-8')
      .send(html);
  };
  for (const url of CONSOLE_PAGES) app.get(url, opts, page);

  app.get<{ Params: { file: string } }>('/assets/:file', opts, async (req, reply) => {
    const f = assets.files.get(req.params.file);
    if (!f) throw new SandboxdError('not_found', `No console asset ${req.params.file}`);
    // Names carry a content hash, except the icon.
    const immutable = f.name !== 'favicon.svg';
    commonHeaders(reply)
      .header('cache-control', immutable ? 'public, max-age=31536000, immutable' : 'public, max-age=3600')
      .header('vary', 'accept-encoding')
      .type(f.contentType);
    // Compressed on first use: the script is mostly xterm.js and shrinks about four times.
    let gz = gzipped.get(f.body);
    if (!gz) {
      gz = gzipSync(f.body, { level: 9 });
      gzipped.set(f.body, gz);
    }
    if (/\bgzip\b/.test(String(req.headers['accept-encoding'] ?? '')) && gz.length < f.body.length) {
      return reply.header('content-encoding', 'gzip').send(gz);
    }
    return reply.send(f.body);
  });
};
