import type { FastifyPluginAsync, RouteHandlerMethod } from 'fastify';
import { loadPythonWheel, type PythonWheel } from '../../python-wheel.js';
import { loadSdkPackage, type SdkPackage } from '../../sdk-package.js';
import type { HttpDeps } from '../deps.js';

/** The public path of the SDK tarball (the console's onboarding shows it with the server's origin). */
export const SDK_TARBALL_PATH = '/sdk/sandboxd-sdk.tgz';

/** A stable path that redirects (302) to the current Python wheel, `/sdk/sandboxd-<version>-py3-none-any.whl`. */
export const PYTHON_WHEEL_LATEST_PATH = '/sdk/python';

/** The public path of a wheel (pip needs the URL to end in the wheel's file name). */
export const pythonWheelPath = (w: Pick<PythonWheel, 'fileName'>) => `/sdk/${w.fileName}`;

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
 *
 * `GET /sdk/sandboxd-<version>-py3-none-any.whl`: the Python SDK as a wheel, built at
 * start-up (python-wheel.ts; `pythonWheel` replaces the process-wide one), public too
 * (`pip install http://<server>/sdk/sandboxd-<version>-py3-none-any.whl`); the same
 * revalidation, as a wheel's bytes may change under one version between two builds of the
 * server. `GET /sdk/python` redirects to it, a URL that stays the same across versions.
 * Any other name under `/sdk/` is the usual 404.
 */
export const sdkRoutes: FastifyPluginAsync<
  HttpDeps & { sdkPackage?: () => Promise<SdkPackage>; pythonWheel?: () => Promise<PythonWheel> }
> = async (app, d) => {
  const [pkg, wheel] = await Promise.all([(d.sdkPackage ?? loadSdkPackage)(), (d.pythonWheel ?? loadPythonWheel)()]);
  const opts = { schema: { hide: true }, config: { auth: 'none' as const } };
  /** The download itself: ETag and 304, no sniffing, a file name for whoever saves it. */
  const download =
    (file: { etag: string; fileName: string }, type: string, body: Buffer): RouteHandlerMethod =>
    async (req, reply) => {
      reply
        .header('etag', file.etag)
        .header('cache-control', 'public, no-cache')
        .header('x-content-type-options', 'nosniff');
      if (matches(req.headers['if-none-match'], file.etag)) return reply.code(304).send();
      return reply.type(type).header('content-disposition', `attachment; filename="${file.fileName}"`).send(body);
    };
  app.get(SDK_TARBALL_PATH, opts, download(pkg, 'application/gzip', pkg.tarball));
  app.get(pythonWheelPath(wheel), opts, download(wheel, 'application/zip', wheel.wheel));
  app.get(PYTHON_WHEEL_LATEST_PATH, opts, async (_req, reply) =>
    reply
      .header('cache-control', 'no-cache')
      .header('x-content-type-options', 'nosniff')
      .redirect(pythonWheelPath(wheel), 302),
  );
};
