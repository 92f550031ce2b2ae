/**
 * The servers of the fake internet (test/e2e/fake-internet.ts), run inside its network
 * namespace: a DNS server (dns-packet) answering A records from a table (and a wildcard; TTL 600 s),
 * and on every address HTTP on 80 and 8080 and HTTPS on 443 (a certificate of the fake
 * internet's own CA), each answering JSON `{ip, port, host}` (the address it was reached on,
 * the Host it got; for a target under `/echo`, also the request's `method`, `target` and
 * `headers`: a service that reflects requests; `/redirect?to=URL` answers 302 to URL),
 * and a UDP echo on 443 and 9999.
 * Questions for names under `silent` are never answered (they stay pending at the asker).
 * Every DNS question and request is printed as a JSON line (of the silent ones only the
 * first: a flood of them would flood the log); `ready` once all listen.
 * argv[2]: JSON `{dns: ip, records: {name: ip}, wildcards: {suffix: ip}, silent: suffix, addrs: [ip], cert, key}`.
 */
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { createServer as createHttp, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttps } from 'node:https';
import * as dnsPacket from 'dns-packet';

const cfg = JSON.parse(process.argv[2]) as {
  dns: string;
  records: Record<string, string>;
  wildcards: Record<string, string>;
  silent: string;
  addrs: string[];
  cert: string;
  key: string;
};
const log = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);

function lookup(name: string): string | undefined {
  if (cfg.records[name]) return cfg.records[name];
  for (const [suffix, ip] of Object.entries(cfg.wildcards)) if (name.endsWith(`.${suffix}`)) return ip;
  return undefined;
}

let silentSeen = false;
const dns = createSocket('udp4');
dns.on('message', (msg, rinfo) => {
  let q: dnsPacket.Packet;
  try {
    q = dnsPacket.decode(msg);
  } catch {
    return;
  }
  const question = q.questions?.[0];
  if (!question) return;
  const name = question.name.toLowerCase().replace(/\.$/, '');
  if (name.endsWith(`.${cfg.silent}`)) {
    if (!silentSeen) log({ dns: name, type: question.type, from: rinfo.address });
    silentSeen = true;
    return;
  }
  log({ dns: name, type: question.type, from: rinfo.address });
  const ip = lookup(name);
  const answers: dnsPacket.Answer[] =
    ip && question.type === 'A' ? [{ type: 'A', name: question.name, ttl: 600, class: 'IN', data: ip }] : [];
  const out = dnsPacket.encode({
    type: 'response',
    id: q.id,
    flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (ip ? 0 : 3),
    questions: q.questions,
    answers,
  });
  dns.send(out, rinfo.port, rinfo.address);
});

const handler = (port: number) => (req: IncomingMessage, res: ServerResponse) => {
  const body: Record<string, unknown> = {
    ip: req.socket.localAddress,
    port,
    host: req.headers.host ?? null,
    from: req.socket.remoteAddress,
  };
  // `/redirect?to=URL`: a 302 to URL (a redirect the sandbox follows, or not).
  if (req.url?.startsWith('/redirect?to=')) {
    log({ http: { ...body, target: req.url } });
    res.writeHead(302, { location: decodeURIComponent(req.url.slice('/redirect?to='.length)) });
    res.end();
    return;
  }
  // `/echo...`: the request itself (method, target, headers), as echo services answer it.
  if (req.url?.startsWith('/echo')) Object.assign(body, { method: req.method, target: req.url, headers: req.headers });
  log({ http: body });
  res.setHeader('content-type', 'application/json');
  req.resume();
  req.on('end', () => res.end(JSON.stringify(body)));
};

/** UDP echo on 443 (where QUIC would be) and 9999: answers `<its address>:<port>`. */
const udpEcho = (addr: string, port: number) =>
  new Promise<void>((r) => {
    const u = createSocket('udp4');
    u.on('message', (_m, rinfo) => u.send(`${addr}:${port}`, rinfo.port, rinfo.address));
    u.bind(port, addr, () => r());
  });

const tls = { cert: readFileSync(cfg.cert), key: readFileSync(cfg.key) };
const listening: Promise<void>[] = [
  new Promise((r) => dns.bind(53, cfg.dns, () => r())),
  ...cfg.addrs.flatMap((addr) => [
    new Promise<void>((r) => createHttp(handler(80)).listen(80, addr, () => r())),
    new Promise<void>((r) => createHttp(handler(8080)).listen(8080, addr, () => r())),
    new Promise<void>((r) => createHttps(tls, handler(443)).listen(443, addr, () => r())),
    udpEcho(addr, 443),
    udpEcho(addr, 9999),
  ]),
];
await Promise.all(listening);
log({ ready: true });
