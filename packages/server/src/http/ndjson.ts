import { Readable } from 'node:stream';
import type { ProcessEvent } from '@sandboxd/protocol';
import { outputEvent } from '../services/process-output.js';
import type { FollowEvent, ProcessFollower, StartEvent, TrackedProcess } from '../services/processes.js';

/** Bytes of NDJSON a response holds before the process it follows is paused. */
const HIGH_WATER = 64 * 1024;

/**
 * A process's events as an `application/x-ndjson` body, one JSON object a line, flushed as
 * produced. Backpressure goes to the process: while the client does not read, the body's
 * buffer fills, the process is paused, and so slowed inside the sandbox. When the client
 * goes (the body is destroyed), it stops following; the process goes on.
 */
export function followProcess(p: TrackedProcess, o: { reconnect: boolean; follow: boolean }): Readable {
  let detach = () => {};
  const body = new Readable({
    highWaterMark: HIGH_WATER,
    read: () => p.drained(follower),
    destroy: (err, cb) => {
      detach();
      cb(err);
    },
  });
  const follower: ProcessFollower = {
    send: (ev) => body.push(`${JSON.stringify(ndjsonEvent(ev))}\n`),
    end: () => body.push(null),
  };
  detach = p.attach(follower, o);
  return body;
}

/** A process event as its NDJSON line's object. */
function ndjsonEvent(ev: FollowEvent): ProcessEvent | StartEvent {
  if (ev.type === 'output') return outputEvent(ev);
  if (ev.type === 'exit') return { type: 'exit', exitCode: ev.exit.exitCode, signal: ev.exit.signal };
  return ev;
}
