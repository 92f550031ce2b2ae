/**
 * A reporter for node's test runner (scripts/run-tests.sh): one line per test file, its
 * wall time in seconds (from the runner taking it up to its process's summary: start-up
 * included) and its path, written as each file ends. run-tests.sh prints the slowest after
 * the run, to show where the suite's time goes.
 */
import type { ReportEvent } from './test-report-check.js';

export default async function* testDurations(source: AsyncIterable<ReportEvent>): AsyncGenerator<string> {
  const began = new Map<string, number>();
  for await (const event of source) {
    const d = event.data;
    if (!d) continue;
    // The runner's own test for a file (nesting 0, no entryFile) is taken up when the file starts.
    if (event.type === 'test:dequeue' && d.nesting === 0 && !d.entryFile && d.file)
      began.set(d.file, performance.now());
    else if (event.type === 'test:summary' && d.entryFile && began.has(d.entryFile)) {
      const s = (performance.now() - began.get(d.entryFile)!) / 1000;
      began.delete(d.entryFile);
      yield `${s.toFixed(1)}\t${d.entryFile}\n`;
    }
  }
}
