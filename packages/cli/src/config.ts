/**
 * Where `sbx` keeps its login (`~/.config/sandboxd/config.json`, mode 600) and how it
 * builds an SDK client: flag, then environment, then the config file.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { DEFAULT_API_URL, SandboxdClient } from '@sandboxd/sdk';
import { CliError } from './ui.js';

/** What `sbx login` stores. */
export interface StoredLogin {
  apiUrl?: string;
  apiKey?: string;
}

/** Options every verb accepts. */
export interface GlobalOptions {
  apiUrl?: string;
}

/** `$XDG_CONFIG_HOME/sandboxd/config.json`, else `~/.config/sandboxd/config.json`. */
export function configPath(): string {
  const base = process.env.XDG_CONFIG_HOME || join(homedir(), '.config');
  return join(base, 'sandboxd', 'config.json');
}

/** The stored login, or `{}` when there is none. Throws CliError for a malformed file. */
export function loadLogin(path = configPath()): StoredLogin {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return {};
  }
  try {
    const v = JSON.parse(text) as StoredLogin;
    return {
      apiUrl: typeof v.apiUrl === 'string' ? v.apiUrl : undefined,
      apiKey: typeof v.apiKey === 'string' ? v.apiKey : undefined,
    };
  } catch {
    throw new CliError(`${path} is not valid JSON; fix it or run "sbx login" again`);
  }
}

/** Writes the login readable by its owner only (dir 700, file 600), replacing the file atomically. */
export function saveLogin(login: StoredLogin, path = configPath()): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(login, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

/** The API URL in effect: `--api-url`, `SANDBOX_API_URL`, the stored login, the default. */
export function effectiveUrl(g: GlobalOptions, stored = loadLogin()): string {
  return g.apiUrl || process.env.SANDBOX_API_URL || stored.apiUrl || DEFAULT_API_URL;
}

/**
 * An SDK client for the verbs: the key from `SANDBOX_API_KEY`, else the stored login.
 * Throws CliError when there is no key.
 */
export function makeClient(g: GlobalOptions): SandboxdClient {
  const stored = loadLogin();
  const apiKey = process.env.SANDBOX_API_KEY || stored.apiKey;
  if (!apiKey) throw new CliError('not logged in: run "sbx login" or set SANDBOX_API_KEY');
  try {
    return new SandboxdClient({ apiKey, apiUrl: effectiveUrl(g, stored) });
  } catch (e) {
    throw new CliError((e as Error).message);
  }
}
