// Creates a sandbox, runs a command in it, prints the output and deletes the sandbox.
//
//   export SANDBOX_API_KEY=sk_...                  # from the server's first start, or `sbx keys create`
//   export SANDBOX_API_URL=http://localhost:8080   # the default
//   node hello.mjs
import { Sandbox } from '@sandboxd/sdk';

const image = process.env.SANDBOX_IMAGE ?? 'local/debian:bookworm';

const sandbox = await Sandbox.create({ image, env: { NAME: 'sandboxd' }, timeoutMs: 120_000 });
console.log(`created ${sandbox.id} (${sandbox.name}) from ${sandbox.image}`);
try {
  const result = await sandbox.exec('echo "Hello from $NAME!"');
  process.stdout.write(result.stdout);
  console.log(`exit code ${result.exitCode}`);
} finally {
  await sandbox.delete();
  console.log(`deleted ${sandbox.id}`);
}
