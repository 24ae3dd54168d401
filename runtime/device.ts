/**
 * Device: opens a backend (CUDA, else HIP, else CPU), owns the context and everything created from it.
 *
 *   using dev = Device.open();                           // CUDA if a device exists, else HIP, else CPU
 *   using dev = Device.open({ backend: "cuda", ordinal: 1 });   // fails loudly when there is none
 *   using dev = Device.open({ backend: "hip" });                // AMD GPU, or BackendUnavailableError
 */
import { LibraryLoadError } from "../ffi/library.ts";
import { ffi } from "../ffi/runtime.ts";
import { openCudaDriver } from "./cuda.ts";
import { openHipDriver } from "./hip.ts";
import type { DeviceInfo, Driver } from "./driver.ts";
import { ArgumentError, BackendUnavailableError, GpuError, UnsupportedError } from "./errors.ts";
import { DeviceBuffer, PinnedBuffer } from "./memory.ts";
import { Module } from "./module.ts";
import { checkOptionKeys, optionKeys, refuseUnknownKeys } from "./options.ts";
import { Owner, Resource } from "./resource.ts";
import { Event, Stream } from "./stream.ts";
import { emptyTensor, type Tensor, tensorFrom, type TensorOptions } from "./tensor.ts";

/** Where a Device runs: an NVIDIA GPU (CUDA driver API), an AMD GPU (HIP) or the float64 CPU backend. */
export type Backend = "cuda" | "hip" | "cpu";

/** Options of Device.open(). */
export interface OpenOptions {
  /** "auto" (default): CUDA when a CUDA device exists, else HIP when an AMD (HIP) device exists, else CPU. */
  backend?: Backend | "auto";
  /** Which GPU (default 0). */
  ordinal?: number;
  /**
   * Run the norm sanity check (ones → LayerNorm gives 0, RMSNorm with weight 1 gives 1): on the CPU before
   * Device.open() returns, on a GPU at the end of loadKernels(); default true. It is registered by the norm ops
   * (the package's main module); a device opened through the low-level layer alone has nothing to check.
   * Throws SanityCheckError.
   */
  sanityCheck?: boolean;
  /**
   * Check mode: after every norm call, count the non-finite values and take the abs-max of
   * input and output on the device, and report them (`device.lastCheck`, and to the callback if one is
   * given). Each checked call synchronizes its stream: for debugging, not for speed. Default false.
   */
  check?: boolean | ((report: CheckReport) => void);
}

/** Options of device.wrapPointer() and device.wrapStream(). */
export interface WrapOptions {
  /**
   * Take ownership (default false): close() then frees the memory (cuMemFree) or destroys the stream. Without it,
   * close() and the device's close release nothing: the memory or stream stays the other code's to free, and must
   * outlive every use through the wrapper.
   */
  own?: boolean;
}

const WRAP_KEYS = optionKeys(...(["own"] satisfies (keyof WrapOptions)[]));
const OPEN_KEYS = optionKeys(...(["backend", "ordinal", "sanityCheck", "check"] satisfies (keyof OpenOptions)[]));
const EVENT_KEYS = optionKeys("timing");

/** Reads WrapOptions once: the `own` flag. */
function readWrapOptions(opts: unknown): boolean {
  if (opts === undefined) return false;
  checkOptionKeys(opts, WRAP_KEYS);
  const own = (opts as WrapOptions).own ?? false;
  if (typeof own !== "boolean") throw new ArgumentError("own", "a boolean", own);
  return own;
}

const hex = (v: bigint): string => `0x${v.toString(16)}`;

/** Non-finite count and abs-max (over the finite values) of one tensor, computed where it lives. */
export interface TensorStats {
  /** Elements looked at (rows × last dim). */
  count: number;
  /** NaN and ±Inf elements. */
  nonFinite: number;
  /** max |v| over the finite elements (0 when there are none). */
  absMax: number;
}

/** What check mode reports for one norm call. */
export interface CheckReport {
  /** The op that was checked, e.g. "layerNorm". */
  op: string;
  /** Statistics of its input, taken before the op ran (it may write in place). */
  input: TensorStats;
  /** Statistics of its output. */
  output: TensorStats;
  /** Human-readable findings (non-finite values, f16 near overflow, …); empty when nothing is suspicious. */
  warnings: string[];
}

const CPU_INFO: DeviceInfo = {
  ordinal: 0,
  name: "CPU (float64 reference backend)",
  arch: "cpu",
  computeCapability: [0, 0],
  multiprocessors: 1,
  totalMemory: 0,
  warpSize: 1,
  maxThreadsPerBlock: 1,
  maxBlockDim: [1, 1, 1],
  maxGridDim: [1, 1, 1],
  maxSharedPerBlock: 0,
  maxSharedPerBlockOptin: 0,
  l2CacheBytes: 0,
};

// One driver per backend and process, loaded on first use; the failure reason is kept for fallbacks.
type Loaded = { driver: Driver } | { error: string };
function loadDriver(open: () => Driver): Loaded {
  try {
    return { driver: open() };
  } catch (e) {
    if (!(e instanceof LibraryLoadError || e instanceof GpuError)) throw e;
    return { error: e.message };
  }
}
let cuda: Loaded | undefined;
let hip: Loaded | undefined;
const cudaDriver = (): Loaded => (cuda ??= loadDriver(openCudaDriver));
const hipDriver = (): Loaded => (hip ??= loadDriver(openHipDriver));

/** The driver's device `ordinal`, or why it cannot be had. */
function pick(loaded: Loaded, ordinal: number, label: string): { driver: Driver } | { reason: string } {
  if (!("driver" in loaded)) return { reason: loaded.error };
  // A GPU poisoned by a failed recover(): say so before any driver call (those would fail less clearly).
  const dead = poisonedGpus.get(loaded.driver)?.get(ordinal);
  if (dead) throw restartError(dead, `Device.open(${loaded.driver.backend}:${ordinal})`);
  const count = loaded.driver.deviceCount();
  if (ordinal < count) return { driver: loaded.driver };
  return {
    reason: count === 0 ? `no ${label} device found` : `${label} device ${ordinal} requested, ${count} present`,
  };
}

// The context current on this thread, so that switching devices costs a driver call only when needed.
let currentContext = 0n;

// Every retained context, so that a reset (recover()) can release the children of every Device sharing
// the primary context: the reset frees their memory too.
const liveContexts = new Set<Context>();

// GPUs (driver, ordinal) whose context recover() could not bring back: this process cannot use them any more.
const poisonedGpus = new WeakMap<Driver, Map<number, GpuError>>();

/**
 * A driver error seen on the context current on this thread: after a sticky one (a faulting kernel) every
 * Device on that context refuses further use at once, without driver calls (which would all fail anyway).
 */
function noteDriverError(driver: Driver, e: GpuError): void {
  if (!e.sticky || currentContext === 0n) return;
  for (const c of liveContexts) if (c.driver === driver && c.handle === currentContext) c.faulted ??= e;
}

// Drivers whose errors this runtime listens to. A listener already there (another instance of this module over
// the same driver object, as tests make) keeps being called.
const listening = new WeakSet<Driver>();
function listenForErrors(driver: Driver): void {
  if (listening.has(driver)) return;
  listening.add(driver);
  const earlier = driver.onError;
  driver.onError = earlier
    ? (e) => {
      earlier(e);
      noteDriverError(driver, e);
    }
    : (e) => noteDriverError(driver, e);
}

/** The error every use of a context that hit a sticky error throws until recover() finds out more. */
function faultedError(cause: GpuError, what: string): GpuError {
  return new GpuError(
    cause.backend,
    `${what} (the context is unusable since ${cause.call} failed)`,
    cause.code,
    cause.codeName,
    cause.description,
  );
}

/** The error every use of a poisoned GPU throws: restart the process. */
function restartError(cause: GpuError, what: string): GpuError {
  return new GpuError(
    cause.backend,
    `${what} (poisoned by ${cause.call})`,
    cause.code,
    cause.codeName,
    cause.description,
    {
      restartRequired: true,
    },
  );
}

// The sanity check Device.open() runs (registered by ops/diag.ts: the runtime knows no norms).
let sanityCheckHook: ((device: Device) => void) | undefined;

/** @internal ops/diag.ts registers the norm sanity check here. */
export function setSanityCheck(fn: (device: Device) => void): void {
  sanityCheckHook = fn;
}

/** A retained primary context. `alive` turns false once released: later releases of children are no-ops. */
class Context {
  alive = true;
  /** True while a reset drops the children: their memory goes with the reset, no driver call is made. */
  suspended = false;
  /** Set when recover() found the context unusable after a reset: every use throws it (restartRequired). */
  poisoned: GpuError | undefined;
  /** Set by a sticky error on this context: every use throws (sticky) until recover() resets the context. */
  faulted: GpuError | undefined;
  /** Clears the owning Device's caches (prepared kernels, plans) after a reset; weak, so no Device is kept alive. */
  dropCaches: () => void = () => {};
  constructor(readonly driver: Driver, public handle: bigint, readonly ordinal: number, readonly children: Owner) {
    liveContexts.add(this);
  }

  activate(): Driver {
    if (this.poisoned) throw restartError(this.poisoned, "device use");
    if (this.faulted) throw faultedError(this.faulted, "device use");
    if (currentContext !== this.handle) {
      this.driver.setCurrent(this.handle);
      currentContext = this.handle;
    }
    return this.driver;
  }

  /** For releasing children: the driver if the context still exists, else null (the memory went with it). */
  forRelease(): Driver | null {
    // A context with a sticky error frees nothing (every call would fail): a reset or the process's end does.
    return this.alive && !this.suspended && !this.poisoned && !this.faulted ? this.activate() : null;
  }

  release(): void {
    if (!this.alive) return;
    this.alive = false;
    liveContexts.delete(this);
    if (currentContext === this.handle) currentContext = 0n;
    // A poisoned context is not released: the call would fail, and the process has to restart anyway.
    if (this.poisoned) return;
    try {
      this.driver.releaseContext(this.ordinal);
    } catch (e) {
      // After a sticky error the release may fail too: close() still has to work.
      if (!(this.faulted && e instanceof GpuError)) throw e;
    }
  }
}

/** Devices opened so far per backend:ordinal, for each Device's distinct id. */
const openedCount = new Map<string, number>();
function nextDeviceId(backend: Backend, ordinal: number): string {
  const key = `${backend}:${ordinal}`;
  const n = (openedCount.get(key) ?? 0) + 1;
  openedCount.set(key, n);
  return n === 1 ? key : `${key}#${n}`;
}

/**
 * A GPU (or the CPU backend) and everything made on it: its context, default stream, memory, tensors, modules.
 * Closing it (or `using`) releases all of them; using any of them afterwards throws DisposedError. On a GPU, the
 * norms need `await loadKernels(dev)` once after opening (it reads the kernels of the GPU's architecture).
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open();                  // CUDA, else HIP, else the CPU backend
 * await loadKernels(dev);                     // this GPU's kernels (a no-op on the CPU)
 * console.log(dev.backend, dev.name);
 * using x = dev.tensor(new Float32Array(4 * 512).fill(0.5), [4, 512]);
 * using y = rmsNorm(x);
 * console.log(await y.toArray());
 * ```
 */
export class Device extends Resource {
  /** Where this device runs: "cuda", "hip" or "cpu". */
  readonly backend: Backend;
  /** What the device can do (name, architecture, limits), read at open. */
  readonly info: DeviceInfo;
  /**
   * This Device in messages: backend:ordinal, and #n for the n-th Device opened on the same one in this process
   * ("cpu:0", "cpu:0#2"), so that two Devices of one GPU (or two CPU devices) are told apart.
   */
  readonly id: string;
  /** Why "auto" fell back to the CPU, when it did. */
  readonly fallbackReason: string | undefined;
  /** @internal owns every resource created from this device */
  readonly owner: Owner;
  readonly #context: Context | null;
  #stream: Stream | undefined;
  /** @internal per-device caches of higher layers (loaded modules, prepared kernels) */
  readonly cache: Map<string, unknown> = new Map();
  /** Check mode (OpenOptions.check): null when off; else called with each report (a no-op for `true`). */
  readonly check: ((report: CheckReport) => void) | null;
  /** The latest check-mode report (device check mode or an op's `check: true`). */
  lastCheck: CheckReport | undefined;

  private constructor(
    backend: Backend,
    info: DeviceInfo,
    context: Context | null,
    owner: Owner,
    check: OpenOptions["check"],
    fallback?: string,
  ) {
    super(new Owner(), () => {
      // Children first (buffers, streams, modules…), then the context they live in.
      try {
        owner.releaseAll();
      } finally {
        context?.release();
      }
    }, null);
    this.owner = owner;
    this.backend = backend;
    this.info = info;
    this.id = nextDeviceId(backend, info.ordinal);
    this.#context = context;
    this.fallbackReason = fallback;
    this.check = check ? (typeof check === "function" ? check : () => {}) : null;
  }

  /**
   * Opens a device: with the default `backend: "auto"`, the CUDA GPU `ordinal` when there is one, else the HIP
   * (AMD) GPU, else the CPU backend (`fallbackReason` then says why). Then runs the norm sanity check unless
   * `sanityCheck: false` (on a GPU, at the end of loadKernels(), which loads the kernels it needs). Needs
   * --allow-ffi under Deno for the GPU backends (without it "auto" opens the CPU).
   *
   * @param options Backend, ordinal, sanity check and check mode (see OpenOptions); all optional.
   * @throws {ArgumentError} for an unknown backend or a bad option.
   * @throws {BackendUnavailableError} when the backend asked for ("cuda" or "hip") cannot be used here.
   * @throws {GpuError} when the driver fails to open the device.
   * @throws {SanityCheckError} when the sanity check (on the CPU backend here) gets a wrong value.
   *
   * @example
   * ```ts
   * import { Device } from "@normkit/normkit";
   * using dev = Device.open();                                   // best available
   * using gpu1 = Device.open({ backend: "cuda", ordinal: 1 });   // or BackendUnavailableError
   * using cpu = Device.open({ backend: "cpu", check: (r) => console.log(r.warnings) });
   * ```
   */
  static open(options?: OpenOptions | null): Device {
    const opts = options ?? {};
    if (typeof opts !== "object") {
      throw new ArgumentError(
        "options",
        "an options object { backend?, ordinal?, sanityCheck?, check? } or nothing",
        opts,
      );
    }
    refuseUnknownKeys(opts, OPEN_KEYS);
    // Each option read once: an object with getters cannot pass one value to the checks and another to the open.
    const backend = opts.backend ?? "auto";
    const ordinal = opts.ordinal ?? 0;
    const sanityCheck = opts.sanityCheck;
    const check = opts.check;
    if (!["auto", "cuda", "hip", "cpu"].includes(backend)) {
      throw new ArgumentError("backend", `"auto", "cuda", "hip" or "cpu"`, backend);
    }
    if (!Number.isInteger(ordinal) || ordinal < 0) throw new ArgumentError("ordinal", "an integer ≥ 0", ordinal);
    if (sanityCheck !== undefined && typeof sanityCheck !== "boolean") {
      throw new ArgumentError("sanityCheck", "a boolean", sanityCheck);
    }
    if (check !== undefined && typeof check !== "boolean" && typeof check !== "function") {
      throw new ArgumentError("check", "a boolean or a function (report) => void", check);
    }
    const dev = Device.#pickAndOpen(backend, ordinal, check);
    if (sanityCheck !== false && sanityCheckHook) {
      try {
        sanityCheckHook(dev);
      } catch (e) {
        dev.close();
        throw e;
      }
    }
    return dev;
  }

  static #pickAndOpen(backend: Backend | "auto", ordinal: number, check: OpenOptions["check"]): Device {
    if (backend === "cpu") return new Device("cpu", CPU_INFO, null, new Owner(), check);
    let cudaReason: string | undefined;
    if (backend !== "hip") {
      const c = pick(cudaDriver(), ordinal, "CUDA");
      if ("driver" in c) return Device.#openGpu("cuda", c.driver, ordinal, check);
      if (backend === "cuda") throw new BackendUnavailableError("cuda", c.reason);
      cudaReason = c.reason;
    }
    // HIP is only tried when CUDA has no device: a machine with both uses CUDA unless told otherwise.
    const h = pick(hipDriver(), ordinal, "HIP");
    if ("driver" in h) return Device.#openGpu("hip", h.driver, ordinal, check);
    if (backend === "hip") throw new BackendUnavailableError("hip", h.reason);
    return new Device("cpu", CPU_INFO, null, new Owner(), check, `CUDA: ${cudaReason}; HIP: ${h.reason}`);
  }

  static #openGpu(backend: "cuda" | "hip", driver: Driver, ordinal: number, check: OpenOptions["check"]): Device {
    const dead = poisonedGpus.get(driver)?.get(ordinal);
    if (dead) throw restartError(dead, `Device.open(${backend}:${ordinal})`);
    listenForErrors(driver);
    const info = driver.deviceInfo(ordinal);
    const owner = new Owner();
    const ctx = new Context(driver, driver.retainContext(ordinal), ordinal, owner);
    const dev = new Device(backend, info, ctx, owner, check);
    const ref = new WeakRef(dev);
    ctx.dropCaches = () => ref.deref()?.cache.clear();
    return dev;
  }

  /** @internal Tests: a Device over the given driver (a test double), as Device.open() makes one for a real driver. */
  static openWithDriver(driver: Driver, ordinal = 0): Device {
    return Device.#openGpu(driver.backend, driver, ordinal, undefined);
  }

  /** How many CUDA devices this machine has (0 when the driver is missing). */
  static cudaDeviceCount(): number {
    const c = cudaDriver();
    return "driver" in c ? c.driver.deviceCount() : 0;
  }

  /** How many HIP (AMD) devices this machine has (0 when the runtime is missing or finds none). */
  static hipDeviceCount(): number {
    const h = hipDriver();
    return "driver" in h ? h.driver.deviceCount() : 0;
  }

  /** "Device(id)", for error messages. */
  protected get label(): string {
    return `Device(${this.id})`;
  }

  /** True for a Device (not a Proxy of one, nor an object that only looks like one). */
  static isDevice(v: unknown): v is Device {
    return typeof v === "object" && v !== null && #context in v;
  }

  /** The device's name, e.g. "NVIDIA H200" (info.name). */
  get name(): string {
    return this.info.name;
  }

  /**
   * True after recover() found the context still unusable after a reset (a sticky error the driver cannot
   * clear in-process): every use of the device then throws GpuError with `restartRequired`, as does
   * Device.open() of the same GPU in this process. close() still works (it makes no driver calls then).
   */
  get poisoned(): boolean {
    return this.#context?.poisoned !== undefined;
  }

  /**
   * @internal The driver, after making this device's context current; null on the CPU backend.
   * Every driver call of the runtime goes through here.
   */
  get activeDriver(): Driver | null {
    this.assertOpen();
    return this.#context ? this.#context.activate() : null;
  }

  /**
   * @internal For release functions that call the driver directly (graphs): whether a release may call it now
   * (false while recover() resets the context, which drops everything, or after a sticky error, when every call
   * fails; true on a device without a context of its own, e.g. a test double). It does not hold the Device, so a
   * forgotten resource releasing through it does not keep the Device alive.
   */
  get canRelease(): () => boolean {
    const ctx = this.#context;
    return ctx ? () => ctx.forRelease() !== null : () => true;
  }

  /** The device's default stream (non-blocking), where ops and copies go unless told otherwise. */
  get stream(): Stream {
    this.assertOpen();
    // Closing the default stream is allowed (using/close on it); the next use gets a fresh one.
    if (!this.#stream || this.#stream.closed) this.#stream = this.createStream();
    return this.#stream;
  }

  /**
   * A new stream of this device, for work that may overlap the default stream's. It takes no arguments
   * (ArgumentError for any).
   */
  createStream(...none: unknown[]): Stream {
    // It takes no options (no priority, no flags): one given is refused, not silently ignored.
    if (none.length > 0) {
      throw new ArgumentError("createStream options", "none (createStream takes no arguments)", none[0]);
    }
    const d = this.activeDriver;
    if (!d) return new Stream(this, 0n, () => {});
    const h = d.streamCreate();
    const ctx = this.#context!; // the release must not capture the Device: it would keep it from being collected
    return new Stream(this, h, () => ctx.forRelease()?.streamDestroy(h));
  }

  /** An event; `timing: false` makes it cheaper when only used for ordering. */
  createEvent(opts?: { timing?: boolean }): Event {
    checkOptionKeys(opts, EVENT_KEYS);
    const timing = opts?.timing ?? true;
    if (typeof timing !== "boolean") throw new ArgumentError("timing", "a boolean", timing);
    const d = this.activeDriver;
    if (!d) return new Event(this, 0n, timing, () => {});
    const h = d.eventCreate(timing);
    const ctx = this.#context!;
    return new Event(this, h, timing, () => ctx.forRelease()?.eventDestroy(h));
  }

  /**
   * Device memory (host memory on the CPU backend), uninitialized on GPUs.
   *
   * @param bytes The size, an integer ≥ 0.
   * @throws {ArgumentError} for a bad size.
   * @throws {GpuError} when the GPU is out of memory (CUDA_ERROR_OUT_OF_MEMORY).
   */
  alloc(bytes: number): DeviceBuffer {
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new ArgumentError("bytes", "an integer ≥ 0", bytes);
    const d = this.activeDriver;
    if (!d) return new DeviceBuffer(this, bytes, 0n, hostMemory(bytes), () => {});
    if (bytes === 0) return new DeviceBuffer(this, 0, 0n, null, () => {});
    const ptr = d.memAlloc(bytes);
    const ctx = this.#context!;
    return new DeviceBuffer(this, bytes, ptr, null, () => ctx.forRelease()?.memFree(ptr));
  }

  /**
   * Device memory allocated by other code (another library's cuMemAlloc, a framework's tensor) as a DeviceBuffer,
   * without a copy. `ptr` must be memory of this device's context (checked with cuPointerGetAttribute; on HIP,
   * memory of this device, with hipPointerGetAttributes), and
   * `bytes` from it must lie inside its allocation. Nothing is taken over unless `own: true` (then `ptr` must
   * be the start of the allocation, and close() frees it). Make a Tensor over it with
   * `new Tensor(buf, shape, { dtype, rowStride, byteOffset })`. Overlap checks of the ops compare absolute
   * addresses, so two wrappers of one allocation are held to the same in-place rules as one buffer.
   * GPU only (the CPU backend wraps host memory with wrapHost()).
   */
  wrapPointer(ptr: bigint, bytes: number, opts?: WrapOptions): DeviceBuffer {
    if (typeof ptr !== "bigint" || ptr <= 0n || ptr >= 1n << 64n) {
      throw new ArgumentError("ptr", "a device address: a bigint > 0n", ptr);
    }
    if (!Number.isSafeInteger(bytes) || bytes < 1) throw new ArgumentError("bytes", "an integer ≥ 1", bytes);
    const own = readWrapOptions(opts);
    const d = this.activeDriver;
    if (!d) {
      throw new UnsupportedError(
        "wrapPointer on the CPU backend: it has no device memory (wrap a typed array with device.wrapHost())",
      );
    }
    if (!d.pointerInfo) {
      throw new UnsupportedError(`wrapPointer on ${this.backend}: no pointer query is bound for this backend`);
    }
    let info;
    try {
      info = d.pointerInfo(ptr);
    } catch (e) {
      if (!(e instanceof GpuError) || e.sticky) throw e;
      throw new ArgumentError(
        "ptr",
        "device memory the driver knows (e.g. from cuMemAlloc)",
        `${hex(ptr)}: ${e.codeName}`,
      );
    }
    const ctx = this.#context!;
    if (info.context !== ctx.handle) {
      throw new ArgumentError(
        "ptr",
        `memory of ${this.id}'s context (${hex(ctx.handle)})`,
        `${hex(ptr)}, memory of context ${hex(info.context)}`,
      );
    }
    const room = info.base + BigInt(info.bytes) - ptr;
    if (BigInt(bytes) > room) {
      throw new ArgumentError("bytes", `at most ${room} (the rest of the allocation at ${hex(ptr)})`, bytes);
    }
    if (own && ptr !== info.base) {
      throw new ArgumentError(
        "own",
        `false for a pointer inside an allocation (only its start ${hex(info.base)} can be freed)`,
        own,
      );
    }
    return new DeviceBuffer(this, bytes, ptr, null, own ? () => ctx.forRelease()?.memFree(ptr) : () => {}, true);
  }

  /**
   * CPU backend: the bytes of a typed array (or any ArrayBufferView) as a DeviceBuffer, without a copy: tensors
   * over it read and write the array itself. Closing it releases nothing. Views of one ArrayBuffer that overlap
   * are held to the ops' overlap rules. On a GPU backend: UnsupportedError (use wrapPointer()).
   */
  wrapHost(view: ArrayBufferView): DeviceBuffer {
    if (!ArrayBuffer.isView(view)) throw new ArgumentError("view", "a typed array or DataView", view);
    if (this.activeDriver) {
      throw new UnsupportedError(
        `wrapHost on ${this.id}: only the CPU backend computes in host memory (use wrapPointer())`,
      );
    }
    const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    return new DeviceBuffer(this, bytes.byteLength, 0n, bytes, () => {}, true);
  }

  /**
   * A stream made by other code (a CUstream / hipStream_t handle) as a Stream, for the ops' `stream` option and
   * for copies. It must belong to this device's context. Closing it destroys nothing unless `own: true`.
   * The legacy and per-thread default streams (handles 0n, 1n, 2n) can be wrapped but never owned. GPU only.
   */
  wrapStream(handle: bigint, opts?: WrapOptions): Stream {
    if (typeof handle !== "bigint" || handle < 0n || handle >= 1n << 64n) {
      throw new ArgumentError("handle", "a stream handle: a bigint ≥ 0n", handle);
    }
    const own = readWrapOptions(opts);
    if (own && handle <= 2n) {
      throw new ArgumentError("own", "false for a default stream (0n, 1n, 2n: it cannot be destroyed)", own);
    }
    const d = this.activeDriver;
    if (!d) throw new UnsupportedError("wrapStream on the CPU backend: it has no native streams");
    const ctx = this.#context!;
    return new Stream(this, handle, own ? () => ctx.forRelease()?.streamDestroy(handle) : () => {}, true);
  }

  /**
   * Page-locked host memory for asynchronous copies (ordinary memory on the CPU backend).
   *
   * @param bytes The size, an integer ≥ 1.
   * @throws {ArgumentError} for a bad size.
   * @throws {GpuError} when the driver cannot pin that much.
   */
  pinned(bytes: number): PinnedBuffer {
    if (!Number.isSafeInteger(bytes) || bytes < 1) throw new ArgumentError("bytes", "an integer ≥ 1", bytes);
    const d = this.activeDriver;
    if (!d) return new PinnedBuffer(this, bytes, 0n, hostMemory(bytes), () => {});
    const addr = d.hostAlloc(bytes);
    let view: Uint8Array;
    try {
      view = new Uint8Array(ffi!.viewMemory(addr, bytes));
    } catch (e) {
      d.hostFree(addr);
      throw e;
    }
    const ctx = this.#context!;
    return new PinnedBuffer(this, bytes, addr, view, () => ctx.forRelease()?.hostFree(addr));
  }

  /**
   * Loads PTX (text or bytes), a cubin or a fatbin into this device's context (HIP: a code object).
   *
   * @throws {ArgumentError} for an empty or non-binary, non-text image.
   * @throws {UnsupportedError} on the CPU backend.
   * @throws {GpuError} when the driver refuses the image (e.g. no code for this GPU's architecture).
   */
  loadModule(image: Uint8Array | string): Module {
    // The argument first: bad input is an ArgumentError on every backend.
    let bytes: Uint8Array;
    if (typeof image === "string" && image !== "") bytes = new TextEncoder().encode(image + "\0");
    else if (image instanceof Uint8Array && image.byteLength > 0) bytes = image;
    else throw new ArgumentError("image", "PTX text or non-empty PTX/cubin/fatbin bytes", image);
    const d = this.activeDriver;
    if (!d) throw new UnsupportedError("the CPU backend cannot load GPU modules");
    // The driver reads PTX up to a NUL: make sure one is there.
    if (bytes[0] !== 0x7f && bytes[0] !== 0x50 && bytes[bytes.length - 1] !== 0 && isText(bytes)) {
      const z = new Uint8Array(bytes.length + 1);
      z.set(bytes);
      bytes = z;
    }
    const h = d.moduleLoad(bytes);
    const ctx = this.#context!;
    return new Module(this, h, () => ctx.forRelease()?.moduleUnload(h));
  }

  /**
   * A new tensor holding `values` (row-major, rows × last dim, no padding), converted to `opts.dtype` (default
   * f32, rounded to nearest-even), or with `opts.bits: true` the element bits as they are (a Uint16Array for
   * f16/bf16). The upload is done when it returns: `values` may be reused.
   *
   * @param values Exactly as many numbers as the shape has elements (an Array or a typed array).
   * @param shape The dimensions (at least one); the last is the one the norms normalize by default.
   * @param opts dtype, rowStride (padded rows), bits, and the stream of the upload.
   * @throws {ArgumentError} for a bad shape, dtype or row stride, a values count that does not match the shape,
   *   or a Uint16Array for a 16-bit dtype without `bits` saying whether it holds bits or numbers.
   * @throws {DisposedError} when the device is closed.
   * @throws {GpuError} when the GPU is out of memory.
   *
   * @example
   * ```ts
   * import { Device } from "@normkit/normkit";
   * using dev = Device.open();
   * using x = dev.tensor(new Float32Array(8 * 4096).map(() => Math.random()), [8, 4096]);
   * using h = dev.tensor([0.5, -1, 2, 3], [2, 2], { dtype: "f16" });
   * using b = dev.tensor(new Uint16Array([0x3f80, 0x4000]), [2], { dtype: "bf16", bits: true });   // 1, 2
   * ```
   */
  tensor(values: ArrayLike<number>, shape: readonly number[], opts: TensorOptions = {}): Tensor {
    return tensorFrom(this, values, shape, opts);
  }

  /**
   * A new tensor with uninitialized values, e.g. for an op's `out`.
   * Throws as tensor() does, but takes no values.
   */
  empty(shape: readonly number[], opts: TensorOptions = {}): Tensor {
    return emptyTensor(this, shape, opts);
  }

  /** Blocks until all work on this device has finished. Throws GpuError when queued work failed. */
  synchronize(): void {
    this.activeDriver?.synchronize();
  }

  /**
   * Drops everything and resets the GPU's primary context; after a sticky error, finds out whether that helped.
   *
   * Releases every buffer, pinned buffer, stream, event, module, graph and tensor this device created (they
   * become closed: using them throws DisposedError; no driver call is made for them, their memory goes with
   * the reset, and nothing is freed twice). Other Devices open on the same GPU share the primary context: their
   * resources are released too. Then resets the primary context (cuDevicePrimaryCtxReset), re-reads its handle
   * and checks it with a synchronize and a small allocation; if that works, a fresh default stream is made and
   * the device is usable again.
   *
   * After a sticky error (GpuError `sticky`, e.g. a kernel that touched an illegal address) the NVIDIA driver
   * does NOT come back (checked on driver 580.159.04, H200: the reset returns success, then retain, alloc and
   * synchronize keep failing): in-process recovery is impossible and the process must be restarted. recover()
   * then throws a GpuError with `sticky` and `restartRequired` saying so, and this device and every other
   * Device on the GPU become `poisoned`: every later use throws the same kind of error, as does Device.open()
   * of that GPU; close() still works. To survive a faulting kernel, run the GPU work in a child process and
   * start a new one (tests/unit/recovery.test.ts does that).
   *
   * Without an error recover() works as "drop everything and start with a clean context". On the CPU backend
   * only the release and the new default stream happen.
   */
  recover(): void {
    this.assertOpen();
    const ctx = this.#context;
    if (ctx?.poisoned) throw restartError(ctx.poisoned, "device.recover()");
    const peers = ctx ? [...liveContexts].filter((c) => c.driver === ctx.driver && c.ordinal === ctx.ordinal) : [];
    // No driver calls while dropping the children: their memory goes with the reset (and a broken context
    // would fail every free).
    for (const c of peers) c.suspended = true;
    let first: unknown;
    try {
      for (const owner of ctx ? peers.map((c) => c.children) : [this.owner]) {
        try {
          owner.releaseAll();
        } catch (e) {
          first ??= e;
        }
      }
      if (ctx) {
        for (const c of peers) c.dropCaches(); // prepared kernels and plans point into the dropped modules
        currentContext = 0n;
        try {
          ctx.driver.resetContext(ctx.ordinal);
          // The reset keeps the retain count; retain + release reads the (re-initialized) context's handle.
          const handle = ctx.driver.retainContext(ctx.ordinal);
          ctx.driver.releaseContext(ctx.ordinal);
          for (const c of peers) c.handle = handle, c.faulted = undefined;
          // Is it usable? After a sticky error the reset "succeeds" and the context still is not.
          ctx.activate();
          ctx.driver.synchronize();
          ctx.driver.memFree(ctx.driver.memAlloc(256));
        } catch (e) {
          if (!(e instanceof GpuError)) throw e;
          currentContext = 0n;
          // A recoverable failure (e.g. out of memory at the check) says nothing about the context: the device
          // stays usable and recover() may be called again (what a failed reset dropped goes with the next one).
          if (!e.sticky) throw e;
          const err = new GpuError(e.backend, `device.recover(): ${e.call}`, e.code, e.codeName, e.description, {
            restartRequired: true,
          });
          for (const c of peers) c.poisoned = err;
          const byOrdinal = poisonedGpus.get(ctx.driver) ?? new Map<number, GpuError>();
          poisonedGpus.set(ctx.driver, byOrdinal.set(ctx.ordinal, err));
          currentContext = 0n;
          throw err;
        }
      }
    } finally {
      for (const c of peers) c.suspended = false;
    }
    this.cache.clear();
    this.#stream = this.createStream();
    if (first !== undefined) throw first;
  }

  /** Free and total device memory in bytes (cuMemGetInfo). */
  memoryInfo(): { free: number; total: number } {
    const d = this.activeDriver;
    return d ? d.memInfo() : { free: 0, total: 0 };
  }
}

/** The CPU backend's memory: the engine's RangeError (a size past its ArrayBuffer limit, or no memory) named. */
function hostMemory(bytes: number): Uint8Array {
  try {
    return new Uint8Array(bytes);
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    // (Not the engine's own message: it differs between engines and says less.)
    throw new ArgumentError(
      "bytes",
      "a size the CPU backend can allocate in host memory (the JavaScript engine refused it)",
      bytes,
    );
  }
}

function isText(b: Uint8Array): boolean {
  // PTX starts with comments or directives; cubins are ELF (0x7f 'E'), fatbins start with 0x50 0xED 0x55 0xBA.
  return b[0] === 0x2f || b[0] === 0x2e || b[0] === 0x0a || b[0] === 0x20 || b[0] === 0x09;
}
