/**
 * The small interface every GPU backend implements (CUDA in cuda.ts; HIP has its own file). Everything above
 * runtime/ talks to this, never to an FFI symbol. Handles and device pointers are bigints; host memory is a
 * view; every method throws GpuError on failure.
 */
import type { GpuError } from "./errors.ts";

/** What a device can do, read once at open (`device.info`). The CPU backend reports one host "device". */
export interface DeviceInfo {
  /** The device's index among the backend's devices (0 on the CPU backend). */
  readonly ordinal: number;
  /** The name the driver reports, e.g. "NVIDIA H200". */
  readonly name: string;
  /** e.g. "sm_90" (CUDA) or "gfx942" (HIP). */
  readonly arch: string;
  /** Major and minor compute capability, e.g. [9, 0]; HIP reports its own numbering; [0, 0] on the CPU backend. */
  readonly computeCapability: readonly [number, number];
  /** Streaming multiprocessors (compute units on HIP). */
  readonly multiprocessors: number;
  /** Device memory in bytes. */
  readonly totalMemory: number;
  /** Threads per warp (32 on NVIDIA, 64 on most AMD GPUs). */
  readonly warpSize: number;
  /** The most threads a block may have. */
  readonly maxThreadsPerBlock: number;
  /** The largest block along x, y and z. */
  readonly maxBlockDim: readonly [number, number, number];
  /** The largest grid along x, y and z. */
  readonly maxGridDim: readonly [number, number, number];
  /** Shared memory a block gets without opting in (48 KiB on NVIDIA). */
  readonly maxSharedPerBlock: number;
  /** Shared memory a block may get after raising the kernel's limit. */
  readonly maxSharedPerBlockOptin: number;
  /** The L2 cache's size in bytes. */
  readonly l2CacheBytes: number;
}

export type KernelAttribute = "maxThreadsPerBlock" | "staticSharedBytes" | "registers" | "maxDynamicSharedBytes";

/** How strictly the driver refuses unsafe calls (allocation, synchronization) while a stream captures. */
export type CaptureMode = "global" | "threadLocal" | "relaxed";
/** "invalidated": an illegal call broke the capture; endCapture will fail. */
export type CaptureStatus = "none" | "active" | "invalidated";

/** Why the driver refused to update an executable graph in place (CUgraphExecUpdateResult). */
export type GraphUpdateRefusal =
  | "error"
  | "topology-changed"
  | "node-type-changed"
  | "function-changed"
  | "parameters-changed"
  | "not-supported"
  | "unsupported-function-change"
  | "attributes-changed";

/**
 * Graphs from stream capture. Optional: a backend without it (HIP, for now) leaves Driver.graphs undefined
 * and runtime/graph.ts says so with an UnsupportedError.
 */
export interface GraphDriver {
  beginCapture(stream: bigint, mode: CaptureMode): void;
  /** Ends the capture and returns the graph (CUgraph). */
  endCapture(stream: bigint): bigint;
  captureStatus(stream: bigint): CaptureStatus;
  /** Returns the executable graph (CUgraphExec). */
  instantiate(graph: bigint): bigint;
  launch(exec: bigint, stream: bigint): void;
  /** Updates `exec` in place from `graph`: null when done, else why it was refused (exec then unchanged). */
  update(exec: bigint, graph: bigint): GraphUpdateRefusal | null;
  destroy(graph: bigint): void;
  destroyExec(exec: bigint): void;
}

/** What the driver knows about a device pointer (Driver.pointerInfo). */
export interface PointerInfo {
  /** The context (CUcontext) the memory was allocated in; on HIP the device's ordinal + 1 (its retainContext handle). */
  readonly context: bigint;
  /** First address of the allocation holding the pointer. */
  readonly base: bigint;
  /** Bytes of that allocation. */
  readonly bytes: number;
}

export interface Driver {
  readonly backend: "cuda" | "hip";
  /** Stream capture and graphs; undefined where the backend has no binding for them. */
  readonly graphs?: GraphDriver;
  /** e.g. 13000 for CUDA 13.0. */
  readonly version: number;
  /**
   * Called with every GpuError the driver is about to throw (set by runtime/device.ts, which marks the current
   * context unusable after a sticky error, so that later uses fail at once with a clear error).
   */
  onError?: (error: GpuError) => void;
  deviceCount(): number;
  deviceInfo(ordinal: number): DeviceInfo;

  /** Retains the device's primary context and returns it. */
  retainContext(ordinal: number): bigint;
  releaseContext(ordinal: number): void;
  /**
   * Destroys all allocations of the primary context. It does not clear a sticky error on the NVIDIA driver
   * (checked on 580.159.04: the reset returns success, later calls still fail): see Device.recover().
   */
  resetContext(ordinal: number): void;
  setCurrent(ctx: bigint): void;
  synchronize(): void;

  memAlloc(bytes: number): bigint;
  memFree(ptr: bigint): void;
  memInfo(): { free: number; total: number };
  memset8(ptr: bigint, value: number, bytes: number, stream: bigint): void;
  memset32(ptr: bigint, value: number, count: number, stream: bigint): void;
  copyHtoD(dst: bigint, src: ArrayBufferView, bytes: number): void;
  copyDtoH(dst: ArrayBufferView, src: bigint, bytes: number): void;
  copyDtoD(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  /** Async copies take pinned host addresses. */
  copyHtoDAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  copyDtoHAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  /**
   * Interop: the context `ptr` (device memory made by any code) belongs to, and the allocation holding it
   * (start address and size). Throws GpuError for an address the driver does not know. Undefined where the
   * backend has no binding for it (wrapping a pointer is then refused).
   */
  pointerInfo?(ptr: bigint): PointerInfo;
  hostAlloc(bytes: number): bigint;
  hostFree(addr: bigint): void;

  streamCreate(): bigint;
  streamDestroy(stream: bigint): void;
  streamSynchronize(stream: bigint): void;
  streamWaitEvent(stream: bigint, event: bigint): void;
  /** true when all work on the stream is done. */
  streamQuery(stream: bigint): boolean;

  eventCreate(timing: boolean): bigint;
  eventRecord(event: bigint, stream: bigint): void;
  eventSynchronize(event: bigint): void;
  eventQuery(event: bigint): boolean;
  /** Milliseconds between two recorded, completed events. */
  eventElapsed(start: bigint, end: bigint): number;
  eventDestroy(event: bigint): void;

  moduleLoad(image: Uint8Array): bigint;
  moduleUnload(module: bigint): void;
  moduleFunction(module: bigint, name: string): bigint;
  kernelAttribute(fn: bigint, attr: KernelAttribute): number;
  setKernelMaxDynamicShared(fn: bigint, bytes: number): void;
  /**
   * Lets the kernel launch clusters above the portable 8 CTAs (CUDA: 16 on sm_90), for launches and for
   * activeClusters, which otherwise answer with an error (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED).
   */
  allowNonPortableClusters(fn: bigint): void;
  occupancy(fn: bigint, blockThreads: number, dynamicShared: number): number;
  /** Clusters of `cluster` blocks that can be resident on the whole device at once (CUDA sm_90+ only). */
  activeClusters(fn: bigint, blockThreads: number, dynamicShared: number, cluster: number): number;
  /** `params` is the address of a void*[] of argument addresses, prepared once per Kernel. */
  launch(
    fn: bigint,
    gx: number,
    gy: number,
    gz: number,
    bx: number,
    by: number,
    bz: number,
    sharedBytes: number,
    stream: bigint,
    params: bigint,
  ): void;
  /**
   * As launch(), with launch attributes (cuLaunchKernelEx): thread-block clusters of `cluster` blocks along x
   * (gx a multiple; 1 = none) and/or `dependent`: programmatic dependent launch (the kernel may be scheduled
   * while the previous kernel of the stream runs; it must wait with griddepcontrol.wait before touching memory).
   */
  launchEx(
    fn: bigint,
    gx: number,
    gy: number,
    gz: number,
    bx: number,
    by: number,
    bz: number,
    sharedBytes: number,
    stream: bigint,
    params: bigint,
    cluster: number,
    dependent: boolean,
  ): void;
}
