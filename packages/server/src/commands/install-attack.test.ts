/**
 * Attacks on what `sandboxd install` writes (docs/security.md, "Operator surfaces"): links
 * planted at the config's path, at its temporary file's name, or at its directory, and a
 * directory another user owns. Each must be refused or not followed, leaving the link's
 * target as it was; the config is 0600 whatever the umask.
 */
import assert from 'node:assert/strict';
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync as readdir,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { codeOwnerCheck, type HostProbe, INSTALL_PATHS, install, parseInstallArgs } from './install.js';

const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-install-attack-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const fresh = () => {
  const root = join(tmp, `root${n++}`);
  mkdirSync(root);
  const victim = join(tmp, `victim${n}`);
  writeFileSync(victim, 'root:*:19000:0:99999:7:::\n', { mode: 0o640 });
  return { root, victim, at: (p: string) => join(root, p) };
};
const host: HostProbe = {
  uid: () => 0,
  kernel: () => '6.1.0',
  exists: () => true,
  read: () => null,
  which: (c) => `/usr/bin/${c}`,
  freeBytes: () => 2 ** 40,
};
const quiet = () => {};
const untouched = (victim: string) => {
  assert.equal(readFileSync(victim, 'utf8'), 'root:*:19000:0:99999:7:::\n');
  assert.equal(statSync(victim).mode & 0o777, 0o640);
};

describe('sandboxd install: links and owners at the paths it writes', () => {
  it('a config path that is a link (e.g. to /etc/shadow) is refused, with or without --force', () => {
    for (const force of [false, true]) {
      const { root, victim, at } = fresh();
      mkdirSync(at(INSTALL_PATHS.configDir), { recursive: true, mode: 0o700 });
      symlinkSync(victim, at(INSTALL_PATHS.config));
      assert.throws(
        () => install({ ...parseInstallArgs(['--root', root]), force }, quiet, host),
        /config\.json is a symbolic link: remove it/,
      );
      untouched(victim);
      assert.ok(lstatSync(at(INSTALL_PATHS.config)).isSymbolicLink(), 'the link is left as it was');
    }
  });

  it('a link planted at the temporary file name is not written through; the config is 0600 under umask 0', () => {
    const { root, victim, at } = fresh();
    mkdirSync(at(INSTALL_PATHS.configDir), { recursive: true, mode: 0o700 });
    symlinkSync(victim, `${at(INSTALL_PATHS.config)}.tmp-${process.pid}`);
    const old = process.umask(0);
    try {
      install(parseInstallArgs(['--root', root]), quiet, host);
    } finally {
      process.umask(old);
    }
    untouched(victim);
    const st = lstatSync(at(INSTALL_PATHS.config));
    assert.ok(st.isFile());
    assert.equal(st.mode & 0o777, 0o600);
    assert.match(readFileSync(at(INSTALL_PATHS.config), 'utf8'), /"apiKey": "sk_/);
  });

  it('a launcher or unit that is a link is replaced by a file; what it named is not written', () => {
    const { root, victim, at } = fresh();
    for (const p of [INSTALL_PATHS.launcher, INSTALL_PATHS.unit]) {
      mkdirSync(dirname(at(p)), { recursive: true });
      symlinkSync(victim, at(p));
    }
    install(parseInstallArgs(['--root', root]), quiet, host);
    untouched(victim);
    for (const p of [INSTALL_PATHS.launcher, INSTALL_PATHS.unit]) assert.ok(lstatSync(at(p)).isFile(), p);
    assert.equal(lstatSync(at(INSTALL_PATHS.launcher)).mode & 0o777, 0o755);
  });

  it('a config dir that is a link is refused, and nothing is written', () => {
    const { root, at } = fresh();
    const elsewhere = join(tmp, `elsewhere${n}`);
    mkdirSync(elsewhere);
    chmodSync(elsewhere, 0o777);
    mkdirSync(dirname(at(INSTALL_PATHS.configDir)), { recursive: true });
    symlinkSync(elsewhere, at(INSTALL_PATHS.configDir));
    assert.throws(() => install(parseInstallArgs(['--root', root]), quiet, host), /etc\/sandboxd is a symbolic link/);
    assert.deepEqual(readdir(elsewhere), []);
    assert.equal(statSync(elsewhere).mode & 0o777, 0o777, 'its mode is not changed either');
  });

  it('a config dir or data dir owned by another user is refused (it could swap files under the secrets)', {
    skip: process.getuid?.() !== 0 ? 'needs root (chown)' : false,
  }, () => {
    for (const which of [INSTALL_PATHS.configDir, INSTALL_PATHS.dataDir]) {
      const { root, at } = fresh();
      mkdirSync(at(which), { recursive: true, mode: 0o700 });
      chownSync(at(which), 12345, 12345);
      assert.throws(
        () => install(parseInstallArgs(['--root', root]), quiet, host),
        /is owned by uid 12345, not 0: chown it/,
      );
      assert.equal(readdir(at(which)).length, 0);
    }
  });
});

describe('sandboxd install: the code the root service runs', () => {
  it('this checkout and its Node.js are checked, and the result is among the host checks', () => {
    const out: string[] = [];
    const r = install(parseInstallArgs(['--root', fresh().root, '--dry-run']), (x) => out.push(x), host);
    const c = r.checks.find((x) => x.name === 'code owner');
    assert.ok(c, 'a "code owner" check');
    assert.match(out.join(''), /code owner/);
  });

  it('a checkout another user owns, or a dir above it others can write, is reported missing (that user could become root)', {
    skip: process.getuid?.() !== 0 ? 'needs root (chown)' : false,
  }, () => {
    const home = join(tmp, `home${n++}`);
    const code = join(home, 'sandboxd', 'packages', 'server');
    mkdirSync(code, { recursive: true });
    chmodSync(home, 0o755);
    assert.equal(codeOwnerCheck([code]).ok, true, 'root-owned, 0755: ok');
    chownSync(join(home, 'sandboxd'), 12345, 12345);
    const c = codeOwnerCheck([code]);
    assert.equal(c.ok, false);
    assert.match(c.detail, /sandboxd \(uid 12345, mode 755\)/);
    assert.match(c.fix ?? '', /where only root can write/);
    chownSync(join(home, 'sandboxd'), 0, 0);
    chmodSync(home, 0o777);
    assert.match(codeOwnerCheck([code]).detail, /home\d+ \(uid 0, mode 777\)/);
    chmodSync(home, 0o1777);
    assert.equal(codeOwnerCheck([code]).ok, true, 'a sticky dir (like /tmp) is fine');
  });
});
