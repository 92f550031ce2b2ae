/**
 * GitHub's heading anchors (as github-slugger makes them): lower case, punctuation other
 * than `-` and `_` dropped, spaces to `-`; a repeated slug gets `-1`, `-2`, ... in order.
 */
export class Slugger {
  private readonly seen: Map<string, number>;

  constructor(seen?: Map<string, number>) {
    this.seen = new Map(seen);
  }

  /** The anchor of the next heading with this text. */
  slug(text: string): string {
    const base = text
      .toLowerCase()
      .replace(/<[^>]*>/g, '')
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    let slug = base;
    let n = this.seen.get(base) ?? 0;
    while (this.seen.has(slug)) slug = `${base}-${++n}`;
    this.seen.set(base, n);
    if (slug !== base) this.seen.set(slug, 0);
    return slug;
  }

  /** A copy that goes on from the same headings without changing this one. */
  fork(): Slugger {
    return new Slugger(this.seen);
  }

  /** Claims the slugs of the Markdown headings in `text` (fenced code skipped). */
  claimHeadings(text: string): void {
    let fenced = false;
    for (const line of text.split('\n')) {
      if (/^(```|~~~)/.test(line)) fenced = !fenced;
      const m = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
      if (m) this.slug(m[1]);
    }
  }
}
