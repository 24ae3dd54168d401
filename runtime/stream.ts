/** Streams and events. On the CPU backend both exist so that code runs unchanged; work there is synchronous. */
import type { Device } from "./device.ts";
import { ArgumentError } from "./errors.ts";
import { Resource } from "./resource.ts";

/** An ordered queue of device work (a CUstream). Created by `device.createStream()`. */
export class Stream extends Resource {
  /** The driver handle; 0n on the CPU backend. */
  readonly #handle: bigint;
  readonly device: Device;

  /** @internal use device.createStream() */
  constructor(device: Device, handle: bigint, release: () => void) {
    super(device.owner, release, device);
    this.device = device;
    this.#handle = handle;
  }

  protected get label(): string {
    return "Stream";
  }

  /** The native handle (CUstream), for interop. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /** Blocks until all work queued so far on this stream has finished. */
  synchronize(): void {
    const h = this.handle;
    this.device.activeDriver?.streamSynchronize(h);
  }

  /** true when all queued work has finished (never blocks). */
  query(): boolean {
    const h = this.handle;
    return this.device.activeDriver?.streamQuery(h) ?? true;
  }

  /** Work queued on this stream after this call waits until `event` (recorded elsewhere) has completed. */
  waitEvent(event: Event): void {
    const h = this.handle;
    this.device.activeDriver?.streamWaitEvent(h, event.handle);
  }

  /** Records `event` (or a new timing event, returned) at the current end of this stream. */
  record(event?: Event): Event {
    const ev = event ?? this.device.createEvent();
    ev.record(this);
    return ev;
  }
}

/** A marker in a stream (a CUevent): for ordering across streams and for timing. */
export class Event extends Resource {
  readonly #handle: bigint;
  readonly device: Device;
  readonly timing: boolean;
  /** CPU backend: the host time (ms) of the last record. */
  #hostTime = 0;

  /** @internal use device.createEvent() */
  constructor(device: Device, handle: bigint, timing: boolean, release: () => void) {
    super(device.owner, release, device);
    this.device = device;
    this.#handle = handle;
    this.timing = timing;
  }

  protected get label(): string {
    return "Event";
  }

  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  record(stream: Stream = this.device.stream): void {
    const h = this.handle;
    if (stream.device !== this.device) throw new ArgumentError("stream", "a Stream of the event's device", stream);
    void stream.handle; // DisposedError when closed
    const d = this.device.activeDriver;
    if (d) d.eventRecord(h, stream.handle);
    else this.#hostTime = performance.now();
  }

  synchronize(): void {
    const h = this.handle;
    this.device.activeDriver?.eventSynchronize(h);
  }

  query(): boolean {
    const h = this.handle;
    return this.device.activeDriver?.eventQuery(h) ?? true;
  }

  /** Milliseconds from `start` to this event; both recorded, with timing enabled, and completed. */
  elapsedSince(start: Event): number {
    const h = this.handle;
    const d = this.device.activeDriver;
    return d ? d.eventElapsed(start.handle, h) : this.#hostTime - start.#hostTime;
  }
}
