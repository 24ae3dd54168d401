/** Streams and events. On the CPU backend both exist so that code runs unchanged; work there is synchronous. */
import type { Device } from "./device.ts";
import type { CaptureMode, CaptureStatus } from "./driver.ts";
import { ArgumentError, UnsupportedError } from "./errors.ts";
import { Graph, graphDriver } from "./graph.ts";
import { Resource } from "./resource.ts";
import { checkOptionKeys, optionKeys } from "./options.ts";

const CAPTURE_KEYS = optionKeys("mode");

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

/**
 * An ordered queue of device work (a CUstream). Created by `device.createStream()`; every device also has a
 * default one, `device.stream`. Work queued on one stream runs in order; work on different streams may
 * overlap. On the CPU backend work runs when it is called, and a Stream exists so that code runs unchanged.
 *
 * Every method throws DisposedError once the stream (or its device) is closed.
 *
 * @example Two streams, ordered by an event
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor(new Float32Array(8 * 1024).fill(2), [8, 1024]);
 * using side = dev.createStream();
 * using y = rmsNorm(x, { stream: side });
 * using done = side.record();           // a new event at the end of `side`
 * dev.stream.waitEvent(done);           // later work on dev.stream waits for y
 * ```
 */
export class Stream extends Resource {
  /** The driver handle; 0n on the CPU backend. */
  readonly #handle: bigint;
  /** The device this stream queues work on. */
  readonly device: Device;
  #capturing = false;

  readonly #wrapped: boolean;

  /** @internal use device.createStream() or device.wrapStream() */
  constructor(device: Device, handle: bigint, release: () => void, wrapped = false) {
    super(device.owner, release, device);
    this.device = device;
    this.#handle = handle;
    this.#wrapped = wrapped;
  }

  /** "Stream", for error messages. */
  protected get label(): string {
    return `Stream(${this.device.id}${this.#wrapped ? ", wrapped" : ""})`;
  }

  /** True for a stream made by other code and wrapped (device.wrapStream()). */
  get wrapped(): boolean {
    return this.#wrapped;
  }

  /** True for a Stream (not a Proxy of one, which passes instanceof and then fails on its private fields). */
  static isStream(v: unknown): v is Stream {
    return typeof v === "object" && v !== null && #handle in v;
  }

  /** The native handle (CUstream, hipStream_t), for interop; 0n on the CPU backend. Throws DisposedError when closed. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /**
   * Blocks until all work queued so far on this stream has finished. Throws UnsupportedError while the stream
   * captures, GpuError when queued work failed.
   */
  synchronize(): void {
    const h = this.handle;
    this.assertNotCapturing("Stream.synchronize");
    this.device.activeDriver?.streamSynchronize(h);
  }

  /** True when all queued work has finished (never blocks). Throws UnsupportedError while the stream captures. */
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
   *
   * @param opts.mode How strictly the driver refuses unsafe calls meanwhile (default "global").
   * @throws {ArgumentError} for an unknown mode.
   * @throws {UnsupportedError} when the stream already captures, or on the CPU backend (nothing to capture).
   * @throws {GpuError} when the driver refuses to start the capture.
   */
  beginCapture(opts: { mode?: CaptureMode } = {}): void {
    checkOptionKeys(opts, CAPTURE_KEYS);
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
   *
   * @throws {UnsupportedError} when the stream is not capturing.
   * @throws {GpuError} when the capture was invalidated.
   */
  endCapture(): Graph {
    const h = this.handle;
    if (!this.#capturing) {
      throw new UnsupportedError("Stream.endCapture: this stream is not capturing (call beginCapture() first)");
    }
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

  /**
   * Captures what `record` queues on this stream: beginCapture(), record(), endCapture(), even when `record`
   * throws (its error is then rethrown and the partial graph discarded). Inside `record`, pass `out` tensors
   * to the ops (no allocation) and `stream: this` (or use the stream the capture runs on).
   *
   * @param record Queues the work to capture; it runs once, now.
   * @param opts.mode How strictly the driver refuses unsafe calls meanwhile (default "global").
   * @returns The captured Graph; `instantiate()` it to launch it.
   * @throws {UnsupportedError} on the CPU backend, or when the stream already captures.
   * @throws {GpuError} when the driver invalidated the capture (an illegal call inside `record`).
   *
   * @example Capture a norm once, replay it
   * ```ts
   * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
   * using dev = Device.open({ backend: "cuda" });
   * await loadKernels(dev);
   * using stream = dev.createStream();
   * using x = dev.tensor(new Float32Array(4 * 1024).map(() => Math.random()), [4, 1024]);
   * using w = dev.tensor(new Float32Array(1024).fill(1), [1024]);
   * using y = dev.empty([4, 1024]);
   * rmsNorm(x, { weight: w, out: y, stream });          // once outside the capture: loads the kernel
   * using graph = stream.capture(() => rmsNorm(x, { weight: w, out: y, stream }));
   * using exec = graph.instantiate();
   * exec.launch(stream);                                // reads x, writes y, in one driver call
   * ```
   */
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

  /** What the driver says about this stream's capture ("invalidated" after an illegal call); "none" on the CPU backend. */
  captureStatus(): CaptureStatus {
    const h = this.handle;
    const d = this.device.activeDriver;
    if (!d || !d.graphs) return "none";
    return d.graphs.captureStatus(h);
  }

  /**
   * Work queued on this stream after this call waits until `event` (recorded elsewhere) has completed.
   * Throws DisposedError when either is closed.
   */
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

/**
 * A marker in a stream (a CUevent): for ordering across streams and for timing. Created by
 * `device.createEvent()` or `stream.record()`. Every method throws DisposedError once it (or its device) is closed.
 *
 * @example Timing work on a stream
 * ```ts
 * import { Device, layerNorm, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor(new Float32Array(64 * 4096).map(() => Math.random()), [64, 4096]);
 * using y = dev.empty([64, 4096]);
 * const stream = dev.stream;
 * using start = dev.createEvent();
 * using stop = dev.createEvent();
 * start.record(stream);
 * layerNorm(x, { out: y, stream });
 * stop.record(stream);
 * stop.synchronize();
 * console.log(`${stop.elapsedSince(start)} ms`);
 * ```
 */
export class Event extends Resource {
  readonly #handle: bigint;
  /** The device this event belongs to. */
  readonly device: Device;
  /** Whether the event records time (elapsedSince() needs it on both events). */
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

  /** "Event", for error messages. */
  protected get label(): string {
    return "Event";
  }

  /** The native handle (CUevent, hipEvent_t), for interop; 0n on the CPU backend. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /**
   * Marks the current end of `stream` (default: the device's stream): the event completes when the work
   * queued there so far has finished. Recording again moves the marker.
   *
   * @throws {ArgumentError} when `stream` belongs to another device.
   */
  record(stream: Stream = this.device.stream): void {
    const h = this.handle;
    if (stream.device !== this.device) throw new ArgumentError("stream", "a Stream of the event's device", stream);
    void stream.handle; // DisposedError when closed
    const d = this.device.activeDriver;
    if (d) d.eventRecord(h, stream.handle);
    else this.#hostTime = performance.now();
  }

  /** Blocks until the work before the recorded marker has finished. Throws GpuError when that work failed. */
  synchronize(): void {
    const h = this.handle;
    this.device.activeDriver?.eventSynchronize(h);
  }

  /** True when the work before the recorded marker has finished (never blocks). */
  query(): boolean {
    const h = this.handle;
    return this.device.activeDriver?.eventQuery(h) ?? true;
  }

  /**
   * Milliseconds from `start` to this event; both recorded, with timing enabled, and completed. On the CPU
   * backend: the host time between the two record() calls. Throws GpuError when the driver cannot tell.
   */
  elapsedSince(start: Event): number {
    const h = this.handle;
    const d = this.device.activeDriver;
    return d ? d.eventElapsed(start.handle, h) : this.#hostTime - start.#hostTime;
  }
}
