import { Readable } from 'node:stream';
import type { ProcessEvent } from '@sandboxd/protocol';
import type {
  FollowEvent,
  FollowOptions,
  OutputChunk,
  ProcessFollower,
  ProcessFollowing,
  StartEvent,
} from '../runtime/processes/types.js';

/** Bytes of NDJSON a response holds before the process it follows is paused. */
const HIGH_WATER = 64 * 1024;

/** Something a reader can follow: a process of the process service, bound to its sandbox. */
export type Followable = (follower: ProcessFollower, o: FollowOptions) => Promise<ProcessFollowing>;

/**
 * A process's events as an `application/x-ndjson` body, one JSON object a line, flushed as
 * produced. Backpressure goes to the process: while the client does not read, the body's
 * buffer fills, the process is paused, and so slowed inside the sandbox. When the client
 * goes (the body is destroyed), it stops following; the process goes on. When the process's
 * holder can no longer be reached (a runner link broke) the body is cut (no clean end, no
 * `exit`): the client reconnects through `/processes/{pid}/output`. Rejects like `follow`
 * (`not_found`) before any byte is written.
 */
export async function followProcess(follow: Followable, o: FollowOptions): Promise<Readable> {
  let following: ProcessFollowing | null = null;
  let wantsMore = false;
  let gone = false;
  const body = new Readable({
    highWaterMark: HIGH_WATER,
    read: () => {
      if (following) following.drained();
      else wantsMore = true;
    },
    destroy: (err, cb) => {
      gone = true;
      following?.detach();
      cb(err);
    },
  });
  const follower: ProcessFollower = {
    send: (ev) => body.push(`${JSON.stringify(ndjsonEvent(ev))}\n`),
    end: () => body.push(null),
    lost: (reason) => body.destroy(new Error(reason)),
  };
  following = await follow(follower, o);
  if (gone) following.detach();
  else if (wantsMore) following.drained();
  return body;
}

/** A process event as its NDJSON line's object. */
function ndjsonEvent(ev: FollowEvent): ProcessEvent | StartEvent {
  if (ev.type === 'output') return outputEvent(ev);
  if (ev.type === 'exit') return { type: 'exit', exitCode: ev.exit.exitCode, signal: ev.exit.signal };
  return ev;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The NDJSON event of an output chunk: `data` when it is valid UTF-8, else `dataBase64`. */
export function outputEvent(c: OutputChunk): ProcessEvent {
  try {
    return { type: c.stream, data: utf8.decode(c.chunk) };
  } catch {
    return { type: c.stream, dataBase64: c.chunk.toString('base64') };
  }
}
