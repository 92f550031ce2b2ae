import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import type { Services } from '../../services/index.js';
import type { Process } from './gen/process_pb.js';

/** What the process service uses (filled in by its implementation). */
export interface EnvdProcessDeps {
  services: Services;
}

/** envd's `process.Process` over sandboxd's process and terminal services. */
export function processService(_d: EnvdProcessDeps): Partial<ServiceImpl<typeof Process>> {
  const no = (): never => {
    throw new ConnectError('not implemented yet', Code.Unimplemented);
  };
  return { list: no, start: no, connect: no, update: no, sendInput: no, sendSignal: no, closeStdin: no };
}
