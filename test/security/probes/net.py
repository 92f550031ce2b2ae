"""Tries every target at once and reports what happened to each. Argument: base64 JSON
{"targets": [{"proto": "tcp"|"udp", "host": str, "port": int, "scope": str?, "bind_dev": str?}],
 "timeout": seconds}. Result per target: "connected:<first bytes>", "reply:<bytes>",
"refused", "timeout" or "error:<errno name>"; printed as a JSON list in target order."""
import base64, errno, json, selectors, socket, sys, time

def _refuse_on_host():
    """These probes attack the machine they run on: only ever inside a sandbox, whose root is
    an unprivileged uid of the host (a uid_map not starting with "0 0"), or inside gVisor,
    whose user-space kernel shows its own identity map and names itself Linux 4.4.0 of
    "#1 SMP Sun Jan 10 15:06:54 PST 2016" (a host kernel never does)."""
    import os
    with open('/proc/self/uid_map') as f:
        first = f.read().split()
    u = os.uname()
    gvisor = u.release == '4.4.0' and u.version.startswith('#1 SMP Sun Jan 10 15:06:54 PST 2016')
    if first[:2] == ['0', '0'] and not gvisor:
        raise SystemExit('refusing to run outside a sandbox')


_refuse_on_host()

spec = json.loads(base64.b64decode(sys.argv[1]))
timeout = float(spec.get('timeout', 2))
targets = spec['targets']
res = [None] * len(targets)
sel = selectors.DefaultSelector()
socks = {}


def err(e):
    return 'refused' if e == errno.ECONNREFUSED else 'error:' + errno.errorcode.get(e, str(e))


for i, t in enumerate(targets):
    fam = socket.AF_INET6 if ':' in t['host'] else socket.AF_INET
    typ = socket.SOCK_STREAM if t['proto'] == 'tcp' else socket.SOCK_DGRAM
    try:
        s = socket.socket(fam, typ)
    except OSError as e:
        res[i] = err(e.errno)
        continue
    s.setblocking(False)
    try:
        if t.get('bind_dev'):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, t['bind_dev'].encode())
        addr = (t['host'], t['port'])
        if fam == socket.AF_INET6:
            scope = socket.if_nametoindex(t['scope']) if t.get('scope') else 0
            addr = (t['host'], t['port'], 0, scope)
        if typ == socket.SOCK_STREAM:
            rc = s.connect_ex(addr)
            if rc not in (0, errno.EINPROGRESS):
                res[i] = err(rc)
                s.close()
                continue
            sel.register(s, selectors.EVENT_WRITE, i)
        else:
            s.connect(addr)
            s.send(b'escape-probe\n')
            sel.register(s, selectors.EVENT_READ, i)
        socks[i] = s
    except OSError as e:
        res[i] = err(e.errno)
        s.close()

deadline = time.time() + timeout
while socks and time.time() < deadline:
    for key, ev in sel.select(max(0.0, deadline - time.time())):
        i = key.data
        s = key.fileobj
        t = targets[i]
        if t['proto'] == 'tcp' and ev & selectors.EVENT_WRITE and res[i] is None:
            e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if e:
                res[i] = err(e)
            else:
                res[i] = 'connected:'
                sel.modify(s, selectors.EVENT_READ, i)
                continue
        elif ev & selectors.EVENT_READ:
            try:
                data = s.recv(200)
                res[i] = ('connected:' if t['proto'] == 'tcp' else 'reply:') + data.decode('latin1')
            except OSError as e:
                res[i] = res[i] + '<' + err(e.errno) + '>' if res[i] else err(e.errno)
        sel.unregister(s)
        s.close()
        del socks[i]
for i, s in socks.items():
    if res[i] is None:
        res[i] = 'timeout'
    s.close()
print(json.dumps(res))
