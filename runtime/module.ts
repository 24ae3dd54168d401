/**
 * Modules (PTX, cubin or fatbin loaded into a context), kernels with prepared argument blocks, launch
 * configurations and launch(). A Kernel's argument block and pointer array are allocated once; a launch
 * writes the values into them and calls the driver: no allocation per launch.
 */
import { ffi } from "../ffi/runtime.ts";
import type { Device } from "./device.ts";
import { ArgumentError, DisposedError, UnsupportedError } from "./errors.ts";
import { Resource } from "./resource.ts";
import { optionKeys, refuseUnknownKeys } from "./options.ts";
import { Stream } from "./stream.ts";

/** The C type of one kernel parameter. "ptr" is a device pointer. */
export type ArgType = "ptr" | "i32" | "u32" | "i64" | "u64" | "f32" | "f64";

/** Anything with a device address: a DeviceBuffer or a Tensor. */
export interface DevicePointer {
  /** The device address (CUdeviceptr). */
  readonly ptr: bigint;
}

/** A value for one parameter: a number (ints and floats), a bigint (64-bit ints, raw pointers), a buffer or null. */
export type KernelArg = number | bigint | DevicePointer | null;

type Dim3 = readonly [number, number, number];

function dim3(name: string, v: number | readonly number[]): Dim3 {
  if (typeof v !== "number" && !Array.isArray(v)) throw new ArgumentError(name, "1 to 3 positive integers", v);
  const a = typeof v === "number" ? [v] : [...v];
  if (a.length < 1 || a.length > 3 || !a.every((x) => Number.isInteger(x) && x >= 1 && x <= 0xffffffff)) {
    throw new ArgumentError(name, "1 to 3 positive integers", v);
  }
  return [a[0], a[1] ?? 1, a[2] ?? 1];
}

/** Portable thread-block clusters have up to 8 CTAs; sm_90 also runs 16 once a kernel opts in. */
export const MAX_PORTABLE_CLUSTER = 8;
/** The largest cluster LaunchConfig accepts (non-portable: the kernel opts in at launch). */
export const MAX_CLUSTER = 16;

const LAUNCH_CONFIG_KEYS = optionKeys("grid", "block", "sharedBytes", "cluster");

/**
 * Grid, block, dynamic shared memory and cluster size of a launch (cuda.core's LaunchConfig). The constructor
 * checks the values themselves; the limits of a device are checked at launch (validateFor()).
 *
 * @example
 * ```ts
 * import { LaunchConfig } from "@normkit/normkit/gpu";
 * const n = 1 << 20;
 * const config = new LaunchConfig({ grid: [Math.ceil(n / 256)], block: [256] });
 * config.threadsPerBlock;                                                     // 256
 * const clustered = new LaunchConfig({ grid: [132 * 2], block: [512], sharedBytes: 64 * 1024, cluster: 2 });
 * ```
 */
export class LaunchConfig {
  /** Blocks along x, y and z (missing dimensions are 1). */
  readonly grid: readonly [number, number, number];
  /** Threads per block along x, y and z (missing dimensions are 1). */
  readonly block: readonly [number, number, number];
  /** Dynamic shared memory per block, in bytes. */
  readonly sharedBytes: number;
  /**
   * Thread-block cluster size along x (1 = no cluster; 2–8 need compute capability 9.0+; 9–16 are
   * non-portable: the kernel opts in at launch, and the driver refuses them where the GPU has no such clusters).
   */
  readonly cluster: number;
  #validFor: Device | null = null;

  /**
   * A launch configuration; the values are checked here, the device's limits at launch.
   * @param opts.grid Blocks: a number or 1 to 3 positive integers (x, y, z).
   * @param opts.block Threads per block: a number or 1 to 3 positive integers (x, y, z).
   * @param opts.sharedBytes Dynamic shared memory per block in bytes (default 0).
   * @param opts.cluster Thread-block cluster size along x (default 1); grid x must be a multiple of it.
   * @throws {ArgumentError} naming the value that is not as described.
   */
  constructor(opts: {
    grid: number | readonly number[];
    block: number | readonly number[];
    sharedBytes?: number;
    cluster?: number;
  }) {
    if (typeof opts !== "object" || opts === null) {
      throw new ArgumentError("LaunchConfig options", "{ grid, block, sharedBytes?, cluster? }", opts);
    }
    refuseUnknownKeys(opts, LAUNCH_CONFIG_KEYS);
    this.grid = dim3("grid", opts.grid);
    this.block = dim3("block", opts.block);
    const shared = opts.sharedBytes ?? 0;
    if (!Number.isInteger(shared) || shared < 0) throw new ArgumentError("sharedBytes", "an integer ≥ 0", shared);
    this.sharedBytes = shared;
    const cluster = opts.cluster ?? 1;
    if (!Number.isInteger(cluster) || cluster < 1 || cluster > MAX_CLUSTER) {
      throw new ArgumentError("cluster", `an integer 1–${MAX_CLUSTER}`, cluster);
    }
    if (this.grid[0] % cluster !== 0) {
      throw new ArgumentError("grid[0]", `a multiple of the cluster size ${cluster}`, this.grid[0]);
    }
    this.cluster = cluster;
  }

  /** block x × y × z. */
  get threadsPerBlock(): number {
    return this.block[0] * this.block[1] * this.block[2];
  }

  /** Throws ArgumentError naming the limit this configuration breaks on `device`. */
  validateFor(device: Device): void {
    if (this.#validFor === device) return;
    const info = device.info;
    for (let i = 0; i < 3; i++) {
      if (this.grid[i] > info.maxGridDim[i]) {
        throw new ArgumentError(`grid[${i}]`, `at most ${info.maxGridDim[i]} on ${info.name}`, this.grid[i]);
      }
      if (this.block[i] > info.maxBlockDim[i]) {
        throw new ArgumentError(`block[${i}]`, `at most ${info.maxBlockDim[i]} on ${info.name}`, this.block[i]);
      }
    }
    if (this.threadsPerBlock > info.maxThreadsPerBlock) {
      throw new ArgumentError(
        "block",
        `at most ${info.maxThreadsPerBlock} threads on ${info.name}`,
        this.threadsPerBlock,
      );
    }
    if (this.sharedBytes > info.maxSharedPerBlockOptin) {
      throw new ArgumentError(
        "sharedBytes",
        `at most ${info.maxSharedPerBlockOptin} on ${info.name}`,
        this.sharedBytes,
      );
    }
    if (this.cluster > 1 && info.computeCapability[0] < 9) {
      throw new ArgumentError("cluster", `1 on ${info.name} (clusters need compute capability 9.0+)`, this.cluster);
    }
    this.#validFor = device;
  }
}

/**
 * Code loaded into a device's context (cuModuleLoadData): PTX, a cubin or a fatbin, made by
 * `device.loadModule(image)`. Closing it unloads the code; its kernels then throw DisposedError.
 *
 * @example Your own kernel
 * ```ts
 * import { Device, LaunchConfig, launch } from "@normkit/normkit/gpu";
 * // scale.cu: extern "C" __global__ void scale_f32(const float* x, float* y, float a, long long n)
 * // built with: nvcc -ptx -arch=sm_80 scale.cu -o scale.ptx
 * using dev = Device.open({ backend: "cuda" });
 * using mod = dev.loadModule(await Deno.readTextFile("scale.ptx"));
 * const scale = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
 * const n = 1 << 20;
 * using x = dev.alloc(4 * n);
 * using y = dev.alloc(4 * n);
 * x.fill32(0x3f800000);                                   // 1.0f
 * launch(dev.stream, new LaunchConfig({ grid: [Math.ceil(n / 256)], block: [256] }), scale, x, y, 2, n);
 * dev.stream.synchronize();
 * ```
 */
export class Module extends Resource {
  /** The device whose context holds the code. */
  readonly device: Device;
  readonly #handle: bigint;
  readonly #kernels = new Map<string, bigint>();

  /** @internal use device.loadModule() */
  constructor(device: Device, handle: bigint, release: () => void) {
    super(device.owner, release, device);
    this.device = device;
    this.#handle = handle;
  }

  /** "Module", for error messages. */
  protected get label(): string {
    return "Module";
  }

  /** The native handle (CUmodule, hipModule_t), for interop. Throws DisposedError when closed. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /**
   * A kernel of this module with its parameter types, declared once (`extern "C"` names).
   *
   * @param name The kernel's symbol name.
   * @param argTypes The C type of each parameter, in order.
   * @throws {ArgumentError} for an unknown argument type.
   * @throws {GpuError} when the module has no kernel of that name (CUDA_ERROR_NOT_FOUND).
   */
  kernel(name: string, argTypes: readonly ArgType[]): Kernel {
    const h = this.handle;
    if (typeof name !== "string" || name === "") {
      throw new ArgumentError("name", "a kernel's name (a non-empty string)", name);
    }
    if (!Array.isArray(argTypes)) {
      throw new ArgumentError("argTypes", "an array of ptr, i32, u32, i64, u64, f32, f64", argTypes);
    }
    let fn = this.#kernels.get(name);
    if (fn === undefined) {
      fn = this.device.activeDriver!.moduleFunction(h, name);
      this.#kernels.set(name, fn);
    }
    return new Kernel(this, name, fn, argTypes);
  }
}

const SLOT = 8; // every argument gets an 8-byte, 8-aligned slot: enough for any scalar or pointer
// 64-bit integers from numbers are written as two 32-bit halves (no BigInt per launch) on little-endian hosts.
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const TWO_32 = 4294967296;

/**
 * @internal A kernel's argument block: one 8-byte slot per argument, and the array of slot addresses that
 * cuLaunchKernel / hipModuleLaunchKernel take. A Kernel fills its own for launch(args); an op that repeats
 * launches keeps one per validated call (Kernel.argBlock()), written once, so that a model's calls taking turns
 * (each layer its own weight) launch without rewriting anything. The arrays' addresses are taken once: the
 * block must stay reachable while a launch may read it, which the driver does before cuLaunchKernel returns.
 */
export class ArgBlock {
  readonly i32: Int32Array;
  readonly u32: Uint32Array;
  readonly f32: Float32Array;
  readonly f64: Float64Array;
  readonly u64: BigUint64Array;
  readonly i64: BigInt64Array;
  readonly #slots: BigUint64Array;
  /** The address of the slot-address array (the kernelParams argument). */
  readonly address: bigint;

  constructor(n: number) {
    const block = new ArrayBuffer(Math.max(n, 1) * SLOT);
    this.i32 = new Int32Array(block);
    this.u32 = new Uint32Array(block);
    this.f32 = new Float32Array(block);
    this.f64 = new Float64Array(block);
    this.u64 = new BigUint64Array(block);
    this.i64 = new BigInt64Array(block);
    this.#slots = new BigUint64Array(new ArrayBuffer(Math.max(n, 1) * 8));
    const base = ffi!.addressOf(this.u64);
    for (let i = 0; i < this.#slots.length; i++) this.#slots[i] = base + BigInt(i * SLOT);
    this.address = ffi!.addressOf(this.#slots);
  }

  // ---- trusted writes: for the ops, which validated every value (slot and type as declared) themselves ----

  /** A "ptr" slot (0n for null). No checks. */
  setPtr(i: number, v: bigint): void {
    this.u64[i] = v;
  }

  /** An "i32" slot. No checks. */
  setI32(i: number, v: number): void {
    this.i32[i * 2] = v;
  }

  /** An "i64" or "u64" slot from a safe integer (two's complement, so negatives too). No checks. */
  setI64(i: number, v: number): void {
    if (LITTLE_ENDIAN) {
      this.u32[i * 2] = v >>> 0; // v mod 2^32
      this.u32[i * 2 + 1] = Math.floor(v / TWO_32); // stored mod 2^32: the high word, negatives included
    } else {
      this.i64[i] = BigInt(v);
    }
  }

  /** An "f32" slot. No checks. */
  setF32(i: number, v: number): void {
    this.f32[i * 2] = v;
  }
}

/**
 * A kernel function with a prepared argument block, made by `module.kernel(name, argTypes)`. Not a native
 * resource of its own (the Module is): once the module is closed, its methods throw DisposedError.
 */
export class Kernel {
  /** The module the kernel's code is in. */
  readonly module: Module;
  /** The kernel's symbol name. */
  readonly name: string;
  /** The C type of each parameter, as declared. */
  readonly argTypes: readonly ArgType[];
  readonly #fn: bigint;
  /** The block launch(args) writes. */
  readonly #args: ArgBlock;
  #dynamicSharedLimit: number;
  /** Whether the kernel was let launch clusters above MAX_PORTABLE_CLUSTER (once, on first need). */
  #nonPortableClusters = false;
  #dependentLaunch = false;
  /** The most threads per block this kernel can be launched with (registers permitting), as the driver reports. */
  readonly maxThreadsPerBlock: number;

  /** @internal use module.kernel() */
  constructor(module: Module, name: string, fn: bigint, argTypes: readonly ArgType[]) {
    argTypes.forEach((t, i) => {
      if (!["ptr", "i32", "u32", "i64", "u64", "f32", "f64"].includes(t)) {
        throw new ArgumentError(`argTypes[${i}]`, "one of ptr, i32, u32, i64, u64, f32, f64", t);
      }
    });
    this.module = module;
    this.name = name;
    this.argTypes = [...argTypes];
    this.#fn = fn;
    this.#args = new ArgBlock(argTypes.length);
    const d = module.device.activeDriver!;
    this.maxThreadsPerBlock = d.kernelAttribute(fn, "maxThreadsPerBlock");
    this.#dynamicSharedLimit = d.kernelAttribute(fn, "maxDynamicSharedBytes");
  }

  /**
   * Programmatic dependent launch (CUDA, compute capability 9.0+; default false): launches of this kernel may
   * be scheduled while the previous kernel of the stream still runs, which hides the launch gap between
   * small kernels. Only for kernels that execute `griddepcontrol.wait` (cudaGridDependencySynchronize)
   * before touching any global memory: without it the kernel would read its input before it is written.
   * Setting true elsewhere throws UnsupportedError.
   */
  get dependentLaunch(): boolean {
    return this.#dependentLaunch;
  }

  set dependentLaunch(on: boolean) {
    if (typeof on !== "boolean") throw new ArgumentError("dependentLaunch", "a boolean", on);
    const d = this.module.device;
    if (on && (d.backend !== "cuda" || d.info.computeCapability[0] < 9)) {
      throw new UnsupportedError(
        `programmatic dependent launch needs a CUDA device of compute capability 9.0+, not ${d.info.name}`,
      );
    }
    this.#dependentLaunch = on;
  }

  /** Registers, static shared memory, … as the driver reports them. */
  attribute(name: "registers" | "staticSharedBytes" | "maxThreadsPerBlock" | "maxDynamicSharedBytes"): number {
    if (this.module.closed) throw new DisposedError(`Module of kernel ${this.name}`);
    return this.module.device.activeDriver!.kernelAttribute(this.#fn, name);
  }

  /**
   * Resident blocks per multiprocessor for a block size and dynamic shared memory. Above the kernel's
   * dynamic shared-memory limit it opts in first, as a launch would (the driver answers 0 otherwise).
   */
  occupancy(blockThreads: number, dynamicSharedBytes = 0): number {
    if (this.module.closed) throw new DisposedError(`Module of kernel ${this.name}`);
    this.#optIn(dynamicSharedBytes);
    return this.module.device.activeDriver!.occupancy(this.#fn, blockThreads, dynamicSharedBytes);
  }

  /**
   * Above 48 KiB a kernel must opt in to more dynamic shared memory, once: before a launch, and before an
   * occupancy query, whose answer would otherwise be that of a launch that cannot run (0 blocks, and so
   * a different persistent grid on the first call than on the next).
   */
  #optIn(bytes: number, cluster = 1): void {
    if (bytes > this.#dynamicSharedLimit) {
      this.module.device.activeDriver!.setKernelMaxDynamicShared(this.#fn, bytes);
      this.#dynamicSharedLimit = bytes;
    }
    if (cluster > MAX_PORTABLE_CLUSTER && !this.#nonPortableClusters) {
      this.module.device.activeDriver!.allowNonPortableClusters(this.#fn);
      this.#nonPortableClusters = true;
    }
  }

  /**
   * Clusters of `cluster` blocks (2–16; above 8 the kernel first opts in to non-portable sizes) resident on the
   * whole device at once, for a block size and dynamic shared memory (cuOccupancyMaxActiveClusters: what a
   * persistent cluster grid should launch). CUDA, 9.0+.
   */
  activeClusters(blockThreads: number, dynamicSharedBytes: number, cluster: number): number {
    if (this.module.closed) throw new DisposedError(`Module of kernel ${this.name}`);
    if (!Number.isInteger(cluster) || cluster < 2 || cluster > MAX_CLUSTER) {
      throw new ArgumentError("cluster", `an integer 2–${MAX_CLUSTER}`, cluster);
    }
    const d = this.module.device;
    if (d.backend !== "cuda" || d.info.computeCapability[0] < 9) {
      throw new UnsupportedError(
        `thread-block clusters need a CUDA device of compute capability 9.0+, not ${d.info.name}`,
      );
    }
    this.#optIn(dynamicSharedBytes, cluster);
    return d.activeDriver!.activeClusters(this.#fn, blockThreads, dynamicSharedBytes, cluster);
  }

  /** @internal The block launch(args) writes: trusted callers may write it with set*() for a one-off launch. */
  get args(): ArgBlock {
    return this.#args;
  }

  /** @internal A fresh argument block of this kernel's size, for an op to write once and launch again and again. */
  argBlock(): ArgBlock {
    return new ArgBlock(this.argTypes.length);
  }

  #write(args: readonly KernelArg[]): void {
    const types = this.argTypes, a = this.#args;
    if (args.length !== types.length) {
      throw new ArgumentError(
        `arguments of ${this.name}`,
        `${types.length} values (${types.join(", ")})`,
        `${args.length} values`,
      );
    }
    for (let i = 0; i < types.length; i++) {
      const v = args[i];
      const t = types[i];
      if (t === "ptr") {
        if (v === null) a.u64[i] = 0n;
        else if (typeof v === "bigint") a.u64[i] = v;
        else if (typeof v === "object" && typeof v.ptr === "bigint") a.u64[i] = v.ptr;
        else throw new ArgumentError(`${this.name} argument ${i}`, "a DeviceBuffer, Tensor, bigint address or null", v);
      } else if (t === "i64" || t === "u64") {
        if (typeof v === "bigint") (t === "i64" ? a.i64 : a.u64)[i] = v;
        else if (typeof v === "number" && Number.isSafeInteger(v)) a.setI64(i, v);
        else throw new ArgumentError(`${this.name} argument ${i}`, `an integer (${t})`, v);
      } else if (typeof v !== "number") {
        throw new ArgumentError(`${this.name} argument ${i}`, `a number (${t})`, v);
      } else if (t === "f32") a.f32[i * 2] = v;
      else if (t === "f64") a.f64[i] = v;
      else if (t === "i32") {
        if (!Number.isInteger(v) || v < -0x80000000 || v > 0x7fffffff) {
          throw new ArgumentError(`${this.name} argument ${i}`, "an i32", v);
        }
        a.i32[i * 2] = v;
      } else {
        if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) {
          throw new ArgumentError(`${this.name} argument ${i}`, "a u32", v);
        }
        a.u32[i * 2] = v;
      }
    }
  }

  /**
   * Queues the kernel on `stream` with `config` and one value per parameter. Prefer the free function `launch()`.
   * Throws as launch() does.
   */
  launch(stream: Stream, config: LaunchConfig, args: readonly KernelArg[]): void {
    this.checkLaunch(stream, config);
    this.#write(args);
    this.launchWritten(stream, config, this.#args);
  }

  /**
   * @internal What launch() checks before writing the arguments: the module is open, the stream is the
   * module's device's, `config` fits the device and this kernel. Throws DisposedError or ArgumentError.
   */
  checkLaunch(stream: Stream, config: LaunchConfig): void {
    const device = this.module.device;
    if (this.module.closed) throw new DisposedError(`Module of kernel ${this.name}`);
    if (!Stream.isStream(stream) || stream.device !== device) {
      throw new ArgumentError("stream", `a Stream of the module's device (${device.id})`, stream);
    }
    if (!(config instanceof LaunchConfig)) throw new ArgumentError("config", "a LaunchConfig", config);
    config.validateFor(device);
    if (config.threadsPerBlock > this.maxThreadsPerBlock) {
      throw new ArgumentError(
        "block",
        `at most ${this.maxThreadsPerBlock} threads for kernel ${this.name}`,
        config.threadsPerBlock,
      );
    }
  }

  /**
   * @internal Queues the kernel with an argument block as written: for trusted callers that ran
   * checkLaunch(stream, config) for this kernel (and an open module) and wrote every slot of `args` (one of
   * this kernel's argBlock()s) with its set*().
   */
  launchWritten(stream: Stream, config: LaunchConfig, args: ArgBlock): void {
    const d = this.module.device.activeDriver;
    if (!d) throw new UnsupportedError("kernels cannot run on the CPU backend");
    this.#optIn(config.sharedBytes, config.cluster);
    const g = config.grid, b = config.block;
    if (config.cluster > 1 || this.#dependentLaunch) {
      d.launchEx(
        this.#fn,
        g[0],
        g[1],
        g[2],
        b[0],
        b[1],
        b[2],
        config.sharedBytes,
        stream.handle,
        args.address,
        config.cluster,
        this.#dependentLaunch,
      );
    } else {
      d.launch(this.#fn, g[0], g[1], g[2], b[0], b[1], b[2], config.sharedBytes, stream.handle, args.address);
    }
  }
}

/**
 * Queues `kernel` on `stream` with `config` and one value per parameter (cuda.core's launch()). Returns at once:
 * the kernel runs after the work queued before it on the stream.
 *
 * @param stream The stream to queue on; a stream of the kernel's module's device.
 * @param config Grid, block, dynamic shared memory and cluster size.
 * @param kernel The kernel, from `module.kernel()`.
 * @param args One value per declared parameter: numbers, bigints, a DeviceBuffer/Tensor (or anything with a
 *   `ptr`) or null for "ptr".
 * @throws {ArgumentError} for a stream of another device, a configuration over the device's or the kernel's
 *   limits, or an argument that does not fit its declared type (the launch is then not made).
 * @throws {DisposedError} when the module or the stream is closed.
 * @throws {UnsupportedError} on the CPU backend (kernels run on GPUs only).
 * @throws {GpuError} when the driver refuses the launch.
 *
 * @example
 * ```ts
 * import { Device, LaunchConfig, launch } from "@normkit/normkit/gpu";
 * // scale.cu: extern "C" __global__ void scale_f32(const float* x, float* y, float a, long long n)
 * // built with: nvcc -ptx -arch=sm_80 scale.cu -o scale.ptx
 * using dev = Device.open({ backend: "cuda" });
 * using mod = dev.loadModule(await Deno.readTextFile("scale.ptx"));
 * const scale = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
 * const n = 1 << 20;
 * using x = dev.alloc(4 * n);
 * using y = dev.alloc(4 * n);
 * x.fill32(0x3f800000);                                   // 1.0f
 * launch(dev.stream, new LaunchConfig({ grid: [Math.ceil(n / 256)], block: [256] }), scale, x, y, 2, n);
 * dev.stream.synchronize();
 * ```
 */
export function launch(stream: Stream, config: LaunchConfig, kernel: Kernel, ...args: KernelArg[]): void {
  if (!(kernel instanceof Kernel)) {
    throw new ArgumentError("kernel", "a Kernel (module.kernel(name, argTypes))", kernel);
  }
  kernel.launch(stream, config, args);
}
