import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Services } from '../../services/index.js';
import type { EnvdCall } from './context.js';

/** What envd's HTTP paths use (filled in by their implementation). */
export interface EnvdRestDeps {
  services: Services;
}

/** envd's plain HTTP paths: `/health`, `/files` (download, upload). False: not a path of envd. */
export function envdRest(_d: EnvdRestDeps) {
  return async (_call: EnvdCall, req: IncomingMessage, res: ServerResponse): Promise<boolean> => {
    const path = new URL(req.url ?? '/', 'http://envd').pathname;
    if (path === '/health' && req.method === 'GET') {
      res.writeHead(204).end();
      return true;
    }
    return false;
  };
}
