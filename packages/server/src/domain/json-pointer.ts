/** `s` as one reference token of a JSON Pointer (RFC 6901): `~` as `~0`, `/` as `~1`. */
export function pointerToken(s: string): string {
  return s.replace(/~/g, '~0').replace(/\//g, '~1');
}
