/**
 * What a sandbox of the egress suite runs: a Python program (the debian image has python3)
 * that tries a list of connections and prints one JSON result each. Every try is bounded
 * (2-3 s) and never throws: `{ok: false, error}` says how it failed.
 */
export type Probe =
  | { op: 'resolve'; name: string }
  | { op: 'http'; to: string; host: string; port?: number }
  | { op: 'https'; to: string; sni: string | null; host?: string }
  /** `timeout`: seconds to wait for an answer (default 2); `attempts`: sends of the query before giving up (default 1). */
  | { op: 'dns'; server: string; name: string; timeout?: number; attempts?: number }
  | { op: 'udp'; to: string; port: number }
  /** Resolves `n0.<suffix>` .. `n<count-1>.<suffix>` (32 at a time); `answers`: how many resolved. */
  | { op: 'resolveMany'; suffix: string; count: number }
  /**
   * A noisy sandbox: opens `conns` TCP connections to `connTo`:`connPort` and sends nothing
   * on them (`held`: still open after 1 s, `closed`: closed by the other end), then sends DNS
   * queries for `q<i>.<suffix>` to `server`:53 for `seconds` (at most 10,000 a second and
   * 100,000 in all; `sent`), counting the REFUSED answers (`refused`); then closes all.
   */
  | { op: 'flood'; server: string; suffix: string; seconds: number; connTo: string; connPort: number; conns: number };

export interface ProbeResult {
  ok: boolean;
  error?: string;
  addrs?: string[];
  status?: number;
  body?: string;
  rcode?: number;
  /** dns: which send of the query was answered (1 = the first). */
  attempt?: number;
  answers?: number;
  held?: number;
  closed?: number;
  sent?: number;
  refused?: number;
}

export const PROBE_PY = String.raw`
import json, random, socket, ssl, struct, sys, time
from concurrent.futures import ThreadPoolExecutor

def read_all(s):
    data = b''
    while len(data) < 65536:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data

def http_result(data):
    head, _, body = data.partition(b'\r\n\r\n')
    line = head.split(b'\r\n')[0].decode('latin1')
    return {'ok': True, 'status': int(line.split(' ')[1]), 'body': body.decode('latin1')}

def run(o):
    k = o['op']
    try:
        if k == 'resolve':
            infos = socket.getaddrinfo(o['name'], 80, socket.AF_INET, socket.SOCK_STREAM)
            return {'ok': True, 'addrs': sorted({i[4][0] for i in infos})}
        if k == 'http':
            s = socket.create_connection((o['to'], o.get('port', 80)), timeout=3)
            s.sendall(('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % o['host']).encode())
            return http_result(read_all(s))
        if k == 'https':
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            raw = socket.create_connection((o['to'], 443), timeout=3)
            s = ctx.wrap_socket(raw, server_hostname=o['sni'])
            s.sendall(('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % (o.get('host') or o['sni'] or 'x')).encode())
            return http_result(read_all(s))
        if k == 'dns':
            qid = random.randint(0, 65535)
            q = struct.pack('>HHHHHH', qid, 0x0100, 1, 0, 0, 0)
            q += b''.join(bytes([len(p)]) + p.encode() for p in o['name'].split('.')) + b'\0' + struct.pack('>HH', 1, 1)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(o.get('timeout', 2))
            for attempt in range(o.get('attempts', 1)):
                s.sendto(q, (o['server'], 53))
                try:
                    d = s.recv(4096)
                except socket.timeout:
                    if attempt + 1 < o.get('attempts', 1):
                        continue
                    raise
                return {'ok': True, 'rcode': d[3] & 15, 'answers': struct.unpack('>H', d[6:8])[0], 'attempt': attempt + 1}
        if k == 'udp':
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(2)
            s.sendto(b'ping', (o['to'], o['port']))
            return {'ok': True, 'body': s.recv(512).decode()}
        if k == 'flood':
            cs = []
            for _ in range(min(o['conns'], 1000)):
                c = socket.create_connection((o['connTo'], o['connPort']), timeout=3)
                c.setblocking(False)
                cs.append(c)
            time.sleep(1)
            closed = 0
            for c in cs:
                try:
                    if c.recv(1) == b'':
                        closed += 1
                except BlockingIOError:
                    pass
                except OSError:
                    closed += 1
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setblocking(False)
            sent = refused = 0
            end = time.time() + min(o['seconds'], 30)
            while time.time() < end and sent < 100000:
                for _ in range(500):
                    q = struct.pack('>HHHHHH', sent & 0xffff, 0x0100, 1, 0, 0, 0)
                    q += b''.join(bytes([len(p)]) + p.encode() for p in ('q%d.%s' % (sent, o['suffix'])).split('.')) + b'\0' + struct.pack('>HH', 1, 1)
                    try:
                        s.sendto(q, (o['server'], 53))
                        sent += 1
                    except BlockingIOError:
                        pass
                while True:
                    try:
                        d = s.recv(4096)
                        if len(d) > 3 and d[3] & 15 == 5:
                            refused += 1
                    except BlockingIOError:
                        break
                time.sleep(0.05)
            for c in cs:
                c.close()
            return {'ok': True, 'held': len(cs) - closed, 'closed': closed, 'sent': sent, 'refused': refused}
        if k == 'resolveMany':
            def one(name):
                try:
                    socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)
                    return 1
                except Exception:
                    return 0
            with ThreadPoolExecutor(32) as ex:
                names = ['n%d.%s' % (i, o['suffix']) for i in range(min(o['count'], 5000))]
                return {'ok': True, 'answers': sum(ex.map(one, names))}
        return {'ok': False, 'error': 'unknown op'}
    except Exception as e:
        return {'ok': False, 'error': type(e).__name__ + ': ' + str(e)}

probes = json.loads(sys.argv[1])
if len(sys.argv) > 2 and sys.argv[2] == 'parallel':
    with ThreadPoolExecutor(32) as ex:
        print(json.dumps(list(ex.map(run, probes))))
else:
    print(json.dumps([run(o) for o in probes]))
`;

/**
 * The shell command that runs `probes` with {@link PROBE_PY}: one after another, or with
 * `parallel` 32 at a time (results still in order; for probes that do not depend on each other).
 */
export function probeCommand(probes: Probe[], opts: { parallel?: boolean } = {}): string {
  const q = (s: string) => `'${s.replace(/'/g, `'"'"'`)}'`;
  return `python3 -c ${q(PROBE_PY)} ${q(JSON.stringify(probes))}${opts.parallel ? ' parallel' : ''}`;
}
