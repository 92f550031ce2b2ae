/**
 * A reporter for node's test runner (scripts/run-tests.sh): checks that each test file's report
 * reached the runner whole.
 *
 * Each file runs in a process of its own that reports every test to the runner and ends with
 * its own count of them (its `test:summary`). When the runner gets fewer tests than that count,
 * or no count at all, part of the report was lost or never written (the process ended early:
 * process.exit() in a test, or node's --test-force-exit, see scripts/test-watchdog.ts) and the
 * runner does not notice: the file passes if its process exited 0. This reporter writes one
 * line per such file, then a last line `report check: <files> files, <tests> tests, <n>
 * incomplete`; the run is good only with that line and 0 incomplete (a missing line means this
 * check did not run to the end).
 *
 * Made for process isolation (node's default), where each event of a file's process carries
 * the file (`entryFile`) and the runner's own event for the file does not.
 */

/** The parts of node's test events (node:test/reporters) that this check reads. */
export interface ReportEvent {
  type: string;
  data?: {
    file?: string;
    entryFile?: string;
    nesting?: number;
    details?: { type?: string };
    counts?: { tests: number };
  };
}

interface FileReport {
  /** Tests (not suites) of the file that reached the runner. */
  reported: number;
  /** The file's process's own count of its tests; null until its summary arrives. */
  counted: number | null;
}

/** Follows the events of a run and tells which files' reports arrived incomplete. */
export class ReportCheck {
  private readonly files = new Map<string, FileReport>();

  add(event: ReportEvent): void {
    const d = event.data;
    if (!d) return;
    if (event.type === 'test:enqueue' && d.nesting === 0 && d.entryFile === undefined && d.file) {
      this.file(d.file); // the runner's own test for a file: the file runs
    } else if ((event.type === 'test:pass' || event.type === 'test:fail') && d.entryFile) {
      if (d.details?.type !== 'suite') this.file(d.entryFile).reported++;
    } else if (event.type === 'test:summary' && d.entryFile && d.counts) {
      this.file(d.entryFile).counted = d.counts.tests;
    }
  }

  /** One line per file whose report is incomplete, then the closing `report check:` line. */
  verdict(): string[] {
    const lines: string[] = [];
    let tests = 0;
    for (const [file, r] of this.files) {
      tests += r.reported;
      if (r.counted === null) {
        lines.push(
          r.reported === 0
            ? `${file}: reported no test and no summary (no node:test tests, or its process died first)`
            : `${file}: its report stopped after ${r.reported} tests, before its summary (its process ended early)`,
        );
      } else if (r.counted !== r.reported) {
        lines.push(`${file}: ${r.reported} of the ${r.counted} tests its process ran reached the runner`);
      }
    }
    lines.push(`report check: ${this.files.size} files, ${tests} tests, ${lines.length} incomplete`);
    return lines;
  }

  private file(path: string): FileReport {
    let r = this.files.get(path);
    if (!r) {
      r = { reported: 0, counted: null };
      this.files.set(path, r);
    }
    return r;
  }
}

/**
 * The wall time of each test file of a run, which run-tests.sh prints for the slowest after
 * the run (where the suite's time goes): from the runner taking the file up to its process's
 * summary, start-up included. Here rather than in a reporter of its own: a third reporter
 * made node warn of a listener leak on the runner's stream.
 */
export class FileDurations {
  private readonly began = new Map<string, number>();

  /** Follows one event; when a file ends, its line `duration\t<seconds>\t<path>`. */
  add(event: ReportEvent, now = performance.now()): string | null {
    const d = event.data;
    if (!d) return null;
    // The runner's own test for a file (nesting 0, no entryFile) is taken up when the file starts.
    if (event.type === 'test:dequeue' && d.nesting === 0 && !d.entryFile && d.file) this.began.set(d.file, now);
    else if (event.type === 'test:summary' && d.entryFile && this.began.has(d.entryFile)) {
      const s = (now - this.began.get(d.entryFile)!) / 1000;
      this.began.delete(d.entryFile);
      return `duration\t${s.toFixed(1)}\t${d.entryFile}`;
    }
    return null;
  }
}

/**
 * The reporter: `--test-reporter=scripts/test-report-check.ts --test-reporter-destination=<file>`.
 * Writes a `duration` line per file as it ends ({@link FileDurations}), then the verdict.
 */
export default async function* reportCheck(source: AsyncIterable<ReportEvent>): AsyncGenerator<string> {
  const check = new ReportCheck();
  // Each file's wall time too (a `duration` line as it ends), which run-tests.sh reads.
  const durations = new FileDurations();
  for await (const event of source) {
    check.add(event);
    const line = durations.add(event);
    if (line) yield `${line}\n`;
  }
  for (const line of check.verdict()) yield `${line}\n`;
}
