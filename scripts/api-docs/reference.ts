/** docs/api-reference.md: the hand-written rules, a marker line, and the part generated from the OpenAPI document. */
import { renderApiMarkdown } from './markdown.js';
import { Slugger } from './slug.js';

/** The line after which the file is generated. */
export const MARKER =
  '<!-- Everything below this line is generated from spec/openapi.json by scripts/gen-api-docs.ts: do not edit it by hand. -->';

/**
 * The whole reference: `current`'s part above the marker, kept as written, then the marker
 * and the part generated from `spec`. Throws when `current` has no marker line.
 */
export function apiReference(current: string, spec: Record<string, unknown>): string {
  const at = current.indexOf(`\n${MARKER}\n`);
  if (at < 0) throw new Error(`docs/api-reference.md has no marker line; add this line below the rules:\n${MARKER}`);
  const hand = current.slice(0, at).trimEnd();
  const slugger = new Slugger();
  slugger.claimHeadings(hand);
  return `${hand}\n\n${MARKER}\n\n${renderApiMarkdown(spec, slugger).trimEnd()}\n`;
}
