/** Name of the session cookie. */
export const SESSION_COOKIE = 'sandboxd_session';

/** Parses a Cookie header into name -> value (first occurrence wins). */
export function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!header) return out;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    const name = part.slice(0, i).trim();
    if (name in out) continue;
    let v = part.slice(i + 1).trim();
    if (v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
    try {
      out[name] = decodeURIComponent(v);
    } catch {
      out[name] = v;
    }
  }
  return out;
}

/** A Set-Cookie value: HttpOnly, SameSite=Lax, Path=/; `maxAgeSec: 0` deletes it. */
export function sessionCookie(value: string, opts: { maxAgeSec: number; secure: boolean }): string {
  const parts = [
    `${SESSION_COOKIE}=${encodeURIComponent(value)}`,
    'Path=/',
    'HttpOnly',
    'SameSite=Lax',
    `Max-Age=${Math.max(0, Math.floor(opts.maxAgeSec))}`,
  ];
  if (opts.secure) parts.push('Secure');
  return parts.join('; ');
}
