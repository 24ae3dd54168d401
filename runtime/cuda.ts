/** The CUDA implementation of the Driver interface, over ffi/cuda.ts. */
import {
  CU_DEVICE_ATTRIBUTE as A,
  CU_EVENT_DEFAULT,
  CU_EVENT_DISABLE_TIMING,
  CU_FUNC_ATTRIBUTE as F,
  CU_GRAPH_EXEC_UPDATE_RESULT_INFO,
  CU_LAUNCH_ATTRIBUTE,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
  CU_LAUNCH_CONFIG,
  CU_MEMHOSTALLOC_PORTABLE,
  CU_POINTER_ATTRIBUTE as P,
  CU_STREAM_CAPTURE_MODE,
  CU_STREAM_CAPTURE_STATUS,
  CU_STREAM_NON_BLOCKING,
  CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
  CUDA_ERROR_NOT_READY,
  CUDA_SYMBOLS,
} from "../ffi/cuda.ts";
import { openLibrary } from "../ffi/library.ts";
import { ffi } from "../ffi/runtime.ts";
import type {
  CaptureMode,
  CaptureStatus,
  DeviceInfo,
  Driver,
  GraphDriver,
  GraphUpdateRefusal,
  KernelAttribute,
} from "./driver.ts";
import { GpuError } from "./errors.ts";

const FUNC_ATTR: Record<KernelAttribute, number> = {
  maxThreadsPerBlock: F.MAX_THREADS_PER_BLOCK,
  staticSharedBytes: F.SHARED_SIZE_BYTES,
  registers: F.NUM_REGS,
  maxDynamicSharedBytes: F.MAX_DYNAMIC_SHARED_SIZE_BYTES,
};

const CAPTURE_MODE: Record<CaptureMode, number> = {
  global: CU_STREAM_CAPTURE_MODE.GLOBAL,
  threadLocal: CU_STREAM_CAPTURE_MODE.THREAD_LOCAL,
  relaxed: CU_STREAM_CAPTURE_MODE.RELAXED,
};
// CUgraphExecUpdateResult 1..8, in order.
const REFUSALS: readonly GraphUpdateRefusal[] = [
  "error",
  "topology-changed",
  "node-type-changed",
  "function-changed",
  "parameters-changed",
  "not-supported",
  "unsupported-function-change",
  "attributes-changed",
];

// Out-parameter scratch, reused by every call: JS is single-threaded and each value is read right away.
const u64Out = new BigUint64Array(2);
const i32Out = new Int32Array(1);
const f32Out = new Float32Array(1);
const utf8 = new TextEncoder();

/** Opens libcuda.so.1 (or $NORMKIT_CUDA_LIB) and initializes the driver; throws LibraryLoadError or GpuError. */
export function openCudaDriver(): Driver {
  const lib = openLibrary("libcuda.so.1", "NORMKIT_CUDA_LIB", CUDA_SYMBOLS);
  const s = lib.symbols;

  const errorText = (code: number, fn: "cuGetErrorName" | "cuGetErrorString"): string | undefined => {
    if (s[fn](code, u64Out) !== 0 || u64Out[0] === 0n) return undefined;
    return ffi!.readCString(u64Out[0]);
  };
  // Set once the driver object exists (errors of cuInit, before it, reach no listener).
  // deno-lint-ignore prefer-const -- assigned below, once the driver object exists; read by `fail` above it
  let driver: Driver | undefined;
  const fail = (call: string, code: number): never => {
    const e = new GpuError(
      "cuda",
      call,
      code,
      errorText(code, "cuGetErrorName") ?? `CUDA_ERROR_${code}`,
      errorText(code, "cuGetErrorString") ?? "unknown error",
    );
    driver?.onError?.(e);
    throw e;
  };
  const check = (call: string, code: number): void => {
    if (code !== 0) fail(call, code);
  };
  const i32 = (call: string, code: number): number => (check(call, code), i32Out[0]);
  const u64 = (call: string, code: number): bigint => (check(call, code), u64Out[0]);
  const readySync = (call: string, code: number): boolean => {
    if (code === CUDA_ERROR_NOT_READY) return false;
    check(call, code);
    return true;
  };

  check("cuInit", s.cuInit(0));
  const version = i32("cuDriverGetVersion", s.cuDriverGetVersion(i32Out));

  // One prepared CUlaunchConfig with room for two attributes (cluster dimension, programmatic stream
  // serialization), rewritten per launchEx: no allocation per launch.
  const exBytes = new ArrayBuffer(CU_LAUNCH_CONFIG.size + 2 * CU_LAUNCH_ATTRIBUTE.size);
  const exU32 = new Uint32Array(exBytes), exU64 = new BigUint64Array(exBytes);
  const exAddress = ffi!.addressOf(exU32);
  const attrAt = CU_LAUNCH_CONFIG.size;
  exU64[CU_LAUNCH_CONFIG.attrs / 8] = exAddress + BigInt(attrAt);

  // CUgraphExecUpdateResultInfo out-parameter (its node handles are not used).
  const updateInfo = new Uint32Array(CU_GRAPH_EXEC_UPDATE_RESULT_INFO.size / 4);
  const graphs: GraphDriver = {
    beginCapture: (st, mode) => check("cuStreamBeginCapture_v2", s.cuStreamBeginCapture_v2(st, CAPTURE_MODE[mode])),
    endCapture: (st) => u64("cuStreamEndCapture", s.cuStreamEndCapture(st, u64Out)),
    captureStatus(st): CaptureStatus {
      const v = i32("cuStreamIsCapturing", s.cuStreamIsCapturing(st, i32Out));
      return v === CU_STREAM_CAPTURE_STATUS.ACTIVE
        ? "active"
        : v === CU_STREAM_CAPTURE_STATUS.INVALIDATED
        ? "invalidated"
        : "none";
    },
    instantiate: (graph) => u64("cuGraphInstantiateWithFlags", s.cuGraphInstantiateWithFlags(u64Out, graph, 0n)),
    launch(exec, st) {
      const code = s.cuGraphLaunch(exec, st);
      if (code !== 0) fail("cuGraphLaunch", code);
    },
    update(exec, graph) {
      updateInfo.fill(0);
      const code = s.cuGraphExecUpdate_v2(exec, graph, updateInfo);
      if (code === 0) return null;
      if (code !== CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) fail("cuGraphExecUpdate_v2", code);
      return REFUSALS[updateInfo[CU_GRAPH_EXEC_UPDATE_RESULT_INFO.result / 4] - 1] ?? "error";
    },
    destroy: (graph) => check("cuGraphDestroy", s.cuGraphDestroy(graph)),
    destroyExec: (exec) => check("cuGraphExecDestroy", s.cuGraphExecDestroy(exec)),
  };

  const handleOf = (ordinal: number): number => i32("cuDeviceGet", s.cuDeviceGet(i32Out, ordinal));
  const attr = (dev: number, a: number): number => i32("cuDeviceGetAttribute", s.cuDeviceGetAttribute(i32Out, a, dev));

  const d: Driver = {
    backend: "cuda",
    version,
    graphs,
    deviceCount: () => i32("cuDeviceGetCount", s.cuDeviceGetCount(i32Out)),
    deviceInfo(ordinal: number): DeviceInfo {
      const dev = handleOf(ordinal);
      const nameBuf = new Uint8Array(256);
      check("cuDeviceGetName", s.cuDeviceGetName(nameBuf, nameBuf.length, dev));
      const name = new TextDecoder().decode(nameBuf.subarray(0, nameBuf.indexOf(0)));
      const major = attr(dev, A.COMPUTE_CAPABILITY_MAJOR), minor = attr(dev, A.COMPUTE_CAPABILITY_MINOR);
      return {
        ordinal,
        name,
        arch: `sm_${major}${minor}`,
        computeCapability: [major, minor],
        multiprocessors: attr(dev, A.MULTIPROCESSOR_COUNT),
        totalMemory: Number(u64("cuDeviceTotalMem_v2", s.cuDeviceTotalMem_v2(u64Out, dev))),
        warpSize: attr(dev, A.WARP_SIZE),
        maxThreadsPerBlock: attr(dev, A.MAX_THREADS_PER_BLOCK),
        maxBlockDim: [attr(dev, A.MAX_BLOCK_DIM_X), attr(dev, A.MAX_BLOCK_DIM_Y), attr(dev, A.MAX_BLOCK_DIM_Z)],
        maxGridDim: [attr(dev, A.MAX_GRID_DIM_X), attr(dev, A.MAX_GRID_DIM_Y), attr(dev, A.MAX_GRID_DIM_Z)],
        maxSharedPerBlock: attr(dev, A.MAX_SHARED_MEMORY_PER_BLOCK),
        maxSharedPerBlockOptin: attr(dev, A.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        l2CacheBytes: attr(dev, A.L2_CACHE_SIZE),
      };
    },

    retainContext: (ordinal) => u64("cuDevicePrimaryCtxRetain", s.cuDevicePrimaryCtxRetain(u64Out, handleOf(ordinal))),
    releaseContext: (ordinal) =>
      check("cuDevicePrimaryCtxRelease_v2", s.cuDevicePrimaryCtxRelease_v2(handleOf(ordinal))),
    resetContext: (ordinal) => check("cuDevicePrimaryCtxReset_v2", s.cuDevicePrimaryCtxReset_v2(handleOf(ordinal))),
    setCurrent: (ctx) => check("cuCtxSetCurrent", s.cuCtxSetCurrent(ctx)),
    synchronize: () => check("cuCtxSynchronize", s.cuCtxSynchronize()),

    memAlloc: (bytes) => u64("cuMemAlloc_v2", s.cuMemAlloc_v2(u64Out, BigInt(bytes))),
    memFree: (ptr) => check("cuMemFree_v2", s.cuMemFree_v2(ptr)),
    memInfo() {
      const free = new BigUint64Array(1), total = new BigUint64Array(1);
      check("cuMemGetInfo_v2", s.cuMemGetInfo_v2(free, total));
      return { free: Number(free[0]), total: Number(total[0]) };
    },
    memset8: (ptr, value, bytes, stream) =>
      check("cuMemsetD8Async", s.cuMemsetD8Async(ptr, value, BigInt(bytes), stream)),
    memset32: (ptr, value, count, stream) =>
      check("cuMemsetD32Async", s.cuMemsetD32Async(ptr, value >>> 0, BigInt(count), stream)),
    copyHtoD: (dst, src, bytes) => check("cuMemcpyHtoD_v2", s.cuMemcpyHtoD_v2(dst, src, BigInt(bytes))),
    copyDtoH: (dst, src, bytes) => check("cuMemcpyDtoH_v2", s.cuMemcpyDtoH_v2(dst, src, BigInt(bytes))),
    copyDtoD: (dst, src, bytes, stream) =>
      check("cuMemcpyDtoDAsync_v2", s.cuMemcpyDtoDAsync_v2(dst, src, BigInt(bytes), stream)),
    copyHtoDAsync: (dst, src, bytes, stream) =>
      check("cuMemcpyHtoDAsync_v2", s.cuMemcpyHtoDAsync_v2(dst, src, BigInt(bytes), stream)),
    copyDtoHAsync: (dst, src, bytes, stream) =>
      check("cuMemcpyDtoHAsync_v2", s.cuMemcpyDtoHAsync_v2(dst, src, BigInt(bytes), stream)),
    pointerInfo(ptr) {
      const context = u64("cuPointerGetAttribute", s.cuPointerGetAttribute(u64Out, P.CONTEXT, ptr));
      const base = u64("cuPointerGetAttribute", s.cuPointerGetAttribute(u64Out, P.RANGE_START_ADDR, ptr));
      const bytes = Number(u64("cuPointerGetAttribute", s.cuPointerGetAttribute(u64Out, P.RANGE_SIZE, ptr)));
      return { context, base, bytes };
    },
    hostAlloc: (bytes) => u64("cuMemHostAlloc", s.cuMemHostAlloc(u64Out, BigInt(bytes), CU_MEMHOSTALLOC_PORTABLE)),
    hostFree: (addr) => check("cuMemFreeHost", s.cuMemFreeHost(addr)),

    streamCreate: () => u64("cuStreamCreate", s.cuStreamCreate(u64Out, CU_STREAM_NON_BLOCKING)),
    streamDestroy: (st) => check("cuStreamDestroy_v2", s.cuStreamDestroy_v2(st)),
    streamSynchronize: (st) => check("cuStreamSynchronize", s.cuStreamSynchronize(st)),
    streamWaitEvent: (st, ev) => check("cuStreamWaitEvent", s.cuStreamWaitEvent(st, ev, 0)),
    streamQuery: (st) => readySync("cuStreamQuery", s.cuStreamQuery(st)),

    eventCreate: (timing) =>
      u64("cuEventCreate", s.cuEventCreate(u64Out, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING)),
    eventRecord: (ev, st) => check("cuEventRecord", s.cuEventRecord(ev, st)),
    eventSynchronize: (ev) => check("cuEventSynchronize", s.cuEventSynchronize(ev)),
    eventQuery: (ev) => readySync("cuEventQuery", s.cuEventQuery(ev)),
    eventElapsed(start, end) {
      check("cuEventElapsedTime", s.cuEventElapsedTime(f32Out, start, end));
      return f32Out[0];
    },
    eventDestroy: (ev) => check("cuEventDestroy_v2", s.cuEventDestroy_v2(ev)),

    moduleLoad: (image) => u64("cuModuleLoadData", s.cuModuleLoadData(u64Out, image)),
    moduleUnload: (mod) => check("cuModuleUnload", s.cuModuleUnload(mod)),
    moduleFunction: (mod, name) =>
      u64("cuModuleGetFunction", s.cuModuleGetFunction(u64Out, mod, utf8.encode(name + "\0"))),
    kernelAttribute: (fn, a) => i32("cuFuncGetAttribute", s.cuFuncGetAttribute(i32Out, FUNC_ATTR[a], fn)),
    setKernelMaxDynamicShared: (fn, bytes) =>
      check("cuFuncSetAttribute", s.cuFuncSetAttribute(fn, F.MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)),
    allowNonPortableClusters: (fn) =>
      check("cuFuncSetAttribute", s.cuFuncSetAttribute(fn, F.NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)),
    occupancy: (fn, threads, shared) =>
      i32(
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        s.cuOccupancyMaxActiveBlocksPerMultiprocessor(i32Out, fn, threads, BigInt(shared)),
      ),
    activeClusters(fn, threads, shared, cluster) {
      // The prepared launch config (rewritten by every launchEx anyway): one cluster's grid, the block,
      // the shared memory and the cluster-dimension attribute.
      exU32[0] = cluster, exU32[1] = 1, exU32[2] = 1, exU32[3] = threads, exU32[4] = 1, exU32[5] = 1, exU32[6] = shared;
      exU64[CU_LAUNCH_CONFIG.stream / 8] = 0n;
      const a = attrAt / 4, v = a + CU_LAUNCH_ATTRIBUTE.value / 4;
      exU32[a] = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      exU32[v] = cluster, exU32[v + 1] = 1, exU32[v + 2] = 1;
      exU32[CU_LAUNCH_CONFIG.numAttrs / 4] = 1;
      return i32("cuOccupancyMaxActiveClusters", s.cuOccupancyMaxActiveClusters(i32Out, fn, exAddress));
    },
    launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params) {
      const code = s.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0n);
      if (code !== 0) fail("cuLaunchKernel", code);
    },
    launchEx(fn, gx, gy, gz, bx, by, bz, shared, stream, params, cluster, dependent) {
      exU32[0] = gx, exU32[1] = gy, exU32[2] = gz, exU32[3] = bx, exU32[4] = by, exU32[5] = bz, exU32[6] = shared;
      exU64[CU_LAUNCH_CONFIG.stream / 8] = stream;
      let n = 0;
      if (cluster > 1) {
        const a = (attrAt + n++ * CU_LAUNCH_ATTRIBUTE.size) / 4, v = a + CU_LAUNCH_ATTRIBUTE.value / 4;
        exU32[a] = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        exU32[v] = cluster, exU32[v + 1] = 1, exU32[v + 2] = 1;
      }
      if (dependent) {
        const a = (attrAt + n++ * CU_LAUNCH_ATTRIBUTE.size) / 4, v = a + CU_LAUNCH_ATTRIBUTE.value / 4;
        exU32[a] = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        exU32[v] = 1;
      }
      exU32[CU_LAUNCH_CONFIG.numAttrs / 4] = n;
      const code = s.cuLaunchKernelEx(exAddress, fn, params, 0n);
      if (code !== 0) fail("cuLaunchKernelEx", code);
    },
  };
  driver = d;
  return d;
}
