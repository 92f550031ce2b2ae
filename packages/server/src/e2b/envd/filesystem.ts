import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import type { Services } from '../../services/index.js';
import type { Filesystem } from './gen/filesystem_pb.js';

/** What the filesystem service uses (filled in by its implementation). */
export interface EnvdFilesystemDeps {
  services: Services;
}

/** envd's `filesystem.Filesystem` over sandboxd's file service. */
export function filesystemService(_d: EnvdFilesystemDeps): Partial<ServiceImpl<typeof Filesystem>> {
  const no = (): never => {
    throw new ConnectError('not implemented yet', Code.Unimplemented);
  };
  return { stat: no, makeDir: no, move: no, listDir: no, remove: no, watchDir: no };
}
