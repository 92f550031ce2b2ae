import { Command } from 'commander';
import { AuthenticationError, SandboxdClient } from '@sandboxd/sdk';
import { configPath, effectiveUrl, loadLogin, saveLogin } from '../config.js';
import { withExamples, type Context } from '../context.js';
import { CliError, promptSecret } from '../ui.js';

/** `sbx login`: checks an API key against the server and stores it with the URL (mode 600). */
export function loginCommand(ctx: Context): Command {
  const cmd = new Command('login')
    .description('store an API key and server URL in ~/.config/sandboxd/config.json')
    .option('--key <key>', 'API key (default: prompt, or one line from stdin)')
    .action(async (o: { key?: string }) => {
      const apiUrl = effectiveUrl(ctx.globals(), loadLogin());
      const apiKey = (o.key ?? (await promptSecret(`API key for ${apiUrl}: `))).trim();
      if (!apiKey) throw new CliError('no API key given');
      let client: SandboxdClient;
      try {
        client = new SandboxdClient({ apiKey, apiUrl });
      } catch (e) {
        throw new CliError((e as Error).message);
      }
      const account = await client.account.get().catch((e: unknown) => {
        if (e instanceof AuthenticationError) throw new CliError(`the server at ${apiUrl} rejected this API key`);
        throw e;
      });
      saveLogin({ apiUrl, apiKey });
      const p = ctx.out;
      process.stdout.write(
        `Logged in to ${p.bold(apiUrl)} as ${p.bold(account.email)} (plan ${account.plan}, ${account.balance} tokens)\n`,
      );
      process.stdout.write(p.dim(`Saved to ${configPath()}\n`));
    });
  return withExamples(cmd, 'sbx login --api-url http://localhost:8080', 'echo "$SANDBOX_API_KEY" | sbx login');
}
