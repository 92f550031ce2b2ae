import type { FastifyPluginAsync } from 'fastify';
import { loadSdkPackage, type SdkPackage } from '../../sdk-package.js';
import type { HttpDeps } from '../deps.js';

/** The public path of the SDK tarball (the console's onboarding shows it with the server's origin). */
export const SDK_TARBALL_PATH = '/sdk/sandboxd-sdk.tgz';

/** True when an If-None-Match header names `etag` (weak or strong, in a list, or `*`). */
function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.split(',').some((t) => {
    const tag = t.trim();
    return tag === '*' || tag.replace(/^W\//, '') === etag;
  });
}

/**
 * `GET /sdk/sandboxd-sdk.tgz`: the SDK as an npm package, public like the console's assets
 * (`npm install http://<server>/sdk/sandboxd-sdk.tgz`). Packed at start-up (see
 * sdk-package.ts); `sdkPackage` replaces the process-wide one. The URL carries no version,
 * so caches revalidate every time (ETag, 304) rather than keep an old SDK after an upgrade.
 */
export const sdkRoutes: FastifyPluginAsync<HttpDeps & { sdkPackage?: () => Promise<SdkPackage> }> = async (app, d) => {
  const pkg = await (d.sdkPackage ?? loadSdkPackage)();
  app.get(SDK_TARBALL_PATH, { schema: { hide: true }, config: { auth: 'none' } }, async (req, reply) => {
    reply
      .header('etag', pkg.etag)
      .header('cache-control', 'public, no-cache')
      .header('x-content-type-options', 'nosniff');
    if (matches(req.headers['if-none-match'], pkg.etag)) return reply.code(304).send();
    return reply
      .type('application/gzip')
      .header('content-disposition', `attachment; filename="${pkg.fileName}"`)
      .send(pkg.tarball);
  });
};
