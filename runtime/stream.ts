/** Streams and events. On the CPU backend both exist so that code runs unchanged; work there is synchronous. */
import type { Device } from "./device.ts";
import type { CaptureMode, CaptureStatus } from "./driver.ts";
import { ArgumentError, UnsupportedError } from "./errors.ts";
import { Graph, graphDriver } from "./graph.ts";
import { Resource } from "./resource.ts";

// Streams capturing now, per device: ops check it before they allocate (which would break a global capture).
const capturingStreams = new WeakMap<Device, Set<Stream>>();

/**
 * @internal true while an open stream of `device` is capturing (as begun through Stream.beginCapture). A
 * stream released mid-capture (closed, or by Device.recover()) no longer counts.
 */
export function deviceCapturing(device: Device): boolean {
  const set = capturingStreams.get(device);
  if (!set || set.size === 0) return false;
  for (const s of set) if (s.closed) set.delete(s);
  return set.size > 0;
}

/** An ordered queue of device work (a CUstream). Created by `device.createStream()`. */
export class Stream extends Resource {
  /** The driver handle; 0n on the CPU backend. */
  readonly #handle: bigint;
  readonly device: Device;
  #capturing = false;

  /** @internal use device.createStream() */
  constructor(device: Device, handle: bigint, release: () => void) {
    super(device.owner, release, device);
    this.device = device;
    this.#handle = handle;
  }

  protected get label(): string {
    return "Stream";
  }

  /** True for a Stream (not a Proxy of one, which passes instanceof and then fails on its private fields). */
  static isStream(v: unknown): v is Stream {
    return typeof v === "object" && v !== null && #handle in v;
  }

  /** The native handle (CUstream), for interop. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /** Blocks until all work queued so far on this stream has finished. */
  synchronize(): void {
    const h = this.handle;
    this.assertNotCapturing("Stream.synchronize");
    this.device.activeDriver?.streamSynchronize(h);
  }

  /** true when all queued work has finished (never blocks). */
  query(): boolean {
    const h = this.handle;
    this.assertNotCapturing("Stream.query");
    return this.device.activeDriver?.streamQuery(h) ?? true;
  }

  /** true between beginCapture() and endCapture() (normkit's own record; captureStatus() asks the driver). */
  get capturing(): boolean {
    return this.#capturing;
  }

  /**
   * @internal Throws UnsupportedError naming `what` while this stream captures: a synchronizing call would
   * otherwise invalidate the capture with a driver error far from its cause.
   */
  assertNotCapturing(what: string): void {
    if (this.#capturing) {
      throw new UnsupportedError(
        `${what} while the stream is capturing a graph: captured work only runs when the graph is launched, so ` +
          `nothing can be waited for or read back yet (call it before beginCapture() or after endCapture())`,
      );
    }
  }

  /**
   * Starts recording the work queued on this stream into a graph instead of running it. Until endCapture():
   * no synchronization, no reads to JS memory, no allocation (pass `out` to the norms). In "global" mode
   * (the default, as in PyTorch) the driver also refuses unsafe calls made for other streams meanwhile.
   * Run each op once before capturing it, so that its kernel is loaded and its plan cached.
   */
  beginCapture(opts: { mode?: CaptureMode } = {}): void {
    const h = this.handle;
    const mode = opts.mode ?? "global";
    if (mode !== "global" && mode !== "threadLocal" && mode !== "relaxed") {
      throw new ArgumentError("mode", `"global", "threadLocal" or "relaxed"`, mode);
    }
    if (this.#capturing) throw new UnsupportedError("Stream.beginCapture: this stream is already capturing");
    graphDriver(this.device, "Stream.beginCapture").beginCapture(h, mode);
    this.#capturing = true;
    let set = capturingStreams.get(this.device);
    if (!set) capturingStreams.set(this.device, set = new Set());
    set.add(this);
  }

  /**
   * Ends the capture and returns the recorded Graph. The capture ends even when this throws (GpuError
   * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when an illegal call broke it).
   */
  endCapture(): Graph {
    const h = this.handle;
    if (!this.#capturing) throw new UnsupportedError("Stream.endCapture: this stream is not capturing (call beginCapture() first)");
    const graphs = graphDriver(this.device, "Stream.endCapture");
    let graph: bigint;
    try {
      graph = graphs.endCapture(h);
    } finally {
      this.#capturing = false;
      capturingStreams.get(this.device)?.delete(this);
    }
    return new Graph(this.device, graph, graphs);
  }

  /** Captures what `record` queues on this stream: beginCapture(), record(), endCapture(), even when record throws. */
  capture(record: () => void, opts: { mode?: CaptureMode } = {}): Graph {
    this.beginCapture(opts);
    try {
      record();
    } catch (e) {
      // End the capture so the stream is usable again; the partial graph is of no use.
      try {
        this.endCapture().close();
      } catch {
        // The original error is the one worth reporting.
      }
      throw e;
    }
    return this.endCapture();
  }

  /** What the driver says about this stream's capture ("invalidated" after an illegal call). */
  captureStatus(): CaptureStatus {
    const h = this.handle;
    const d = this.device.activeDriver;
    if (!d || !d.graphs) return "none";
    return d.graphs.captureStatus(h);
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
