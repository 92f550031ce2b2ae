/**
 * Runs one command (skopeo) inside a fresh network namespace (`unshare --net -- node
 * netns-pull.ts ...`) whose only way out is the pull's dial guard, reached over its Unix
 * socket. Go skips an HTTP proxy for `localhost` and literal loopback addresses, so a
 * registry redirecting to `http://127.0.0.1:<port>/` would otherwise reach the host's own
 * services; here such an address is the namespace's own loopback, where nothing listens but
 * this process: the proxy port skopeo is given, and the listeners the operator's loopback
 * registry needs (each tunnelled to that registry through the guard, which checks it).
 *
 * Standalone (node builtins only, run by Node's type stripping). Arguments:
 * `<guard socket> <listeners JSON: [{bind, port, target}]> -- <command> <args...>`; the
 * guard's token comes in `SBX_GUARD_TOKEN`. Exits with the command's status.
 */
import { spawn, spawnSync } from 'node:child_process';
import { connect, createServer, type Server, type Socket } from 'node:net';

interface Listener {
  bind: string;
  port: number;
  target: string;
}

const [sock, listenersJson, dashes, cmd, ...args] = process.argv.slice(2);
const token = process.env.SBX_GUARD_TOKEN ?? '';
if (!sock || dashes !== '--' || !cmd) {
  process.stderr.write('usage: netns-pull.ts <guard socket> <listeners JSON> -- <command> <args...>\n');
  process.exit(2);
}
const auth = `Basic ${Buffer.from(`sbx:${token}`).toString('base64')}`;

/** Pipes `client` to the guard, first asking it (CONNECT) for `target` when given. */
function toGuard(client: Socket, target?: string): void {
  const up = connect(sock);
  client.on('error', () => up.destroy());
  up.on('error', () => client.destroy());
  // Ends travel through the pipes; destroying on 'close' would drop what is still buffered.
  if (!target) {
    client.pipe(up);
    up.pipe(client);
    return;
  }
  client.pause();
  up.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\nProxy-Authorization: ${auth}\r\n\r\n`);
  let head = Buffer.alloc(0);
  const onData = (d: Buffer) => {
    head = Buffer.concat([head, d]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (head.length > 8192) up.destroy();
      return;
    }
    up.off('data', onData);
    if (!/^HTTP\/1\.[01] 200/.test(head.subarray(0, end).toString('latin1'))) {
      client.destroy();
      return;
    }
    const rest = head.subarray(end + 4);
    if (rest.length) client.write(rest);
    up.pipe(client);
    client.pipe(up);
    client.resume();
  };
  up.on('data', onData);
}

function listen(bind: string, port: number, onConn: (s: Socket) => void): Promise<Server | null> {
  return new Promise((resolve) => {
    const server = createServer(onConn);
    server.once('error', () => resolve(null));
    server.listen(port, bind, () => resolve(server));
  });
}

async function main(): Promise<void> {
  const lo = spawnSync('ip', ['link', 'set', 'lo', 'up'], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (lo.status !== 0) {
    process.stderr.write('netns-pull: cannot bring lo up\n');
    process.exit(1);
  }
  const servers: Server[] = [];
  const proxy = await listen('127.0.0.1', 0, (c) => toGuard(c));
  if (!proxy) process.exit(1);
  servers.push(proxy);
  for (const l of JSON.parse(listenersJson) as Listener[]) {
    const s = await listen(l.bind, l.port, (c) => toGuard(c, l.target));
    if (s) servers.push(s);
  }
  const addr = proxy.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  const url = `http://sbx:${token}@127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HTTPS_PROXY: url,
    HTTP_PROXY: url,
    https_proxy: url,
    http_proxy: url,
  };
  delete env.SBX_GUARD_TOKEN;
  delete env.NO_PROXY;
  delete env.no_proxy;
  // setpriv: the command dies with this process (as runTool's tools die with sandboxd).
  const child = spawn('setpriv', ['--pdeathsig', 'SIGKILL', '--', cmd, ...args], { env, stdio: 'inherit' });
  child.on('error', (e) => {
    process.stderr.write(`netns-pull: ${e.message}\n`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => {
    for (const s of servers) s.close();
    process.exit(code ?? 128 + (signal === 'SIGKILL' ? 9 : 15));
  });
}

void main();
