import { reportFatal, serveProcess } from '../serving.js';
import { type Command, UsageError } from './command.js';

export const serve: Command = {
  summary: 'serve the API, console and port proxy (or, with SANDBOXD_ROLE=runner, a runner)',
  usage: 'usage: sandboxd serve\n\nSettings come from SANDBOXD_* variables and the file SANDBOXD_CONFIG names.',
  async run(args) {
    if (args.length) throw new UsageError(`takes no arguments (got "${args.join(' ')}")`);
    try {
      await serveProcess();
      return 0;
    } catch (e) {
      reportFatal(e);
      return 1;
    }
  },
};
