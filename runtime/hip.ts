/**
 * The HIP (AMD) implementation of the Driver interface, over ffi/hip.ts (the HIP runtime API, libamdhip64.so).
 *
 * Verified without an AMD GPU only: the library loads, hipInit/hipGetDeviceCount report "no device" and
 * openHipDriver() says so; the hipDeviceProp_t offsets read for the gfx name equal the header's (CI compiles it).
 * Everything past hipInit (device info, memory, streams, modules, launches) is written against HIP 5.2's headers
 * and has not run on a device.
 *
 * Contexts: the HIP runtime API has one implicit context per device, selected per host thread with hipSetDevice
 * (the hipDevicePrimaryCtx* calls exist but are deprecated). So a "context handle" here is ordinal + 1 (never 0n,
 * which Device uses for "none current"): retainContext/setCurrent call hipSetDevice, releaseContext does nothing
 * (the device's context lives as long as the process), and resetContext is hipDeviceReset on that device, which
 * frees every allocation made on it, like cuDevicePrimaryCtxReset.
 */
import {
  HIP_DEVICE_ATTRIBUTE as A,
  HIP_DEVICE_PROP as PROP,
  HIP_ERROR_NO_DEVICE,
  HIP_ERROR_NOT_READY,
  HIP_EVENT_DEFAULT,
  HIP_EVENT_DISABLE_TIMING,
  HIP_FUNC_ATTRIBUTE as F,
  HIP_HOST_MALLOC_PORTABLE,
  HIP_POINTER_ATTRIBUTE,
  HIP_STREAM_NON_BLOCKING,
  HIP_SYMBOLS,
} from "../ffi/hip.ts";
import { openLibrary } from "../ffi/library.ts";
import { ffi } from "../ffi/runtime.ts";
import type { DeviceInfo, Driver, KernelAttribute } from "./driver.ts";
import { GpuError, UnsupportedError } from "./errors.ts";

const FUNC_ATTR: Record<KernelAttribute, number> = {
  maxThreadsPerBlock: F.MAX_THREADS_PER_BLOCK,
  staticSharedBytes: F.SHARED_SIZE_BYTES,
  registers: F.NUM_REGS,
  maxDynamicSharedBytes: F.MAX_DYNAMIC_SHARED_SIZE_BYTES,
};

// Out-parameter scratch, reused by every call: JS is single-threaded and each value is read right away.
const u64Out = new BigUint64Array(2);
const i32Out = new Int32Array(1);
const f32Out = new Float32Array(1);
const utf8 = new TextEncoder();
const cString = (b: Uint8Array): string => {
  const end = b.indexOf(0);
  return new TextDecoder().decode(b.subarray(0, end < 0 ? b.length : end));
};

/**
 * The base processor of a HIP gcnArchName: "gfx90a:sramecc+:xnack-" → "gfx90a". Code objects are built without
 * target features (sramecc/xnack "any"), so they load whatever the device's feature settings; the processor must
 * match exactly. undefined when `s` is not a gfx target name (e.g. a struct read with the wrong layout).
 */
export function gfxArch(s: string): string | undefined {
  const m = /^(gfx[0-9a-f]{3,5})(?::[a-z]+[+-])*$/.exec(s.trim());
  return m ? m[1] : undefined;
}

/** What DeviceInfo.arch says when the gfx name cannot be read (the ops then refuse the device, naming it). */
export const UNKNOWN_GFX = "gfx?";

/** The words every "there is no usable AMD GPU" error carries, so callers and fallbacks can say it plainly. */
export const NO_HIP_DEVICE = "no HIP device";

/** What the HIP driver says to any cluster request (clusters and their opt-in are CUDA sm_90+ only). */
const NO_CLUSTERS = "thread-block clusters are a CUDA (sm_90+) feature; the HIP backend has none";
const noClusters = (): never => {
  throw new UnsupportedError(NO_CLUSTERS);
};

/**
 * Opens libamdhip64.so (or $NORMKIT_HIP_LIB) and initializes HIP; throws LibraryLoadError when the library cannot
 * be loaded, and GpuError (backend "hip", message containing "no HIP device") when hipInit fails or no device
 * is present.
 */
export function openHipDriver(): Driver {
  const lib = openLibrary("libamdhip64.so", "NORMKIT_HIP_LIB", HIP_SYMBOLS);
  const s = lib.symbols;

  const errorText = (code: number, fn: "hipGetErrorName" | "hipGetErrorString"): string | undefined => {
    const p = s[fn](code) as bigint;
    return p === 0n ? undefined : ffi!.readCString(p);
  };
  const gpuError = (call: string, code: number, note?: string): GpuError => {
    const description = errorText(code, "hipGetErrorString") ?? "unknown error";
    return new GpuError(
      "hip",
      call,
      code,
      errorText(code, "hipGetErrorName") ?? `hipError_${code}`,
      note ? `${description}; ${note}` : description,
    );
  };
  const fail = (call: string, code: number): never => {
    throw gpuError(call, code);
  };
  const check = (call: string, code: number): void => {
    if (code !== 0) fail(call, code);
  };
  const i32 = (call: string, code: number): number => (check(call, code), i32Out[0]);
  const u64 = (call: string, code: number): bigint => (check(call, code), u64Out[0]);
  const readySync = (call: string, code: number): boolean => {
    if (code === HIP_ERROR_NOT_READY) return false;
    check(call, code);
    return true;
  };
  const deviceCount = (): number => {
    i32Out[0] = 0;
    const code = s.hipGetDeviceCount(i32Out);
    // With no GPU, HIP 5.2 answers hipErrorNoDevice (and count 0): that is a count of 0, not a failure.
    if (code === HIP_ERROR_NO_DEVICE) return 0;
    return i32("hipGetDeviceCount", code);
  };

  try {
    // With no AMD GPU (or no /dev/kfd access) HIP 5.2's hipInit returns hipErrorInvalidDevice (101).
    const init = s.hipInit(0);
    if (init !== 0) {
      throw gpuError("hipInit", init, `${NO_HIP_DEVICE} usable (is there an AMD GPU and access to /dev/kfd?)`);
    }
    if (deviceCount() === 0) {
      throw gpuError("hipGetDeviceCount", HIP_ERROR_NO_DEVICE, `${NO_HIP_DEVICE} found`);
    }
  } catch (e) {
    lib.close();
    throw e;
  }
  const version = i32("hipDriverGetVersion", s.hipDriverGetVersion(i32Out));

  const attr = (dev: number, a: number): number =>
    i32("hipDeviceGetAttribute", s.hipDeviceGetAttribute(i32Out, a, dev));
  // The device whose context is current (hipSetDevice), for the per-device checks below.
  let current = 0;
  const select = (ordinal: number): void => {
    check("hipSetDevice", s.hipSetDevice(ordinal));
    current = ordinal;
  };

  return {
    backend: "hip",
    version,
    deviceCount,
    deviceInfo(ordinal: number): DeviceInfo {
      const nameBuf = new Uint8Array(256);
      check("hipDeviceGetName", s.hipDeviceGetName(nameBuf, nameBuf.length, ordinal));
      const name = cString(nameBuf);
      // The gfx name is only in hipDeviceProp_t.gcnArchName (hipDeviceGetAttribute returns ints). The buffer is
      // 4x the 5.x struct so that a library filling a larger layout cannot write past it, and the field is used
      // only when it parses as a gfx name (bytes of another layout at that offset would not).
      const props = new Uint8Array(4 * PROP.size);
      check("hipGetDeviceProperties", s.hipGetDeviceProperties(props, ordinal));
      const gcn = cString(props.subarray(PROP.gcnArchNameOffset, PROP.gcnArchNameOffset + PROP.gcnArchNameSize));
      const arch = gfxArch(gcn) ?? UNKNOWN_GFX;
      const major = attr(ordinal, A.ComputeCapabilityMajor), minor = attr(ordinal, A.ComputeCapabilityMinor);
      return {
        ordinal,
        name,
        arch,
        computeCapability: [major, minor],
        multiprocessors: attr(ordinal, A.MultiprocessorCount),
        totalMemory: Number(u64("hipDeviceTotalMem", s.hipDeviceTotalMem(u64Out, ordinal))),
        warpSize: attr(ordinal, A.WarpSize),
        maxThreadsPerBlock: attr(ordinal, A.MaxThreadsPerBlock),
        maxBlockDim: [attr(ordinal, A.MaxBlockDimX), attr(ordinal, A.MaxBlockDimY), attr(ordinal, A.MaxBlockDimZ)],
        maxGridDim: [attr(ordinal, A.MaxGridDimX), attr(ordinal, A.MaxGridDimY), attr(ordinal, A.MaxGridDimZ)],
        maxSharedPerBlock: attr(ordinal, A.MaxSharedMemoryPerBlock),
        maxSharedPerBlockOptin: attr(ordinal, A.SharedMemPerBlockOptin),
        l2CacheBytes: attr(ordinal, A.L2CacheSize),
      };
    },

    retainContext(ordinal) {
      select(ordinal);
      return BigInt(ordinal) + 1n;
    },
    releaseContext: () => {},
    resetContext(ordinal) {
      select(ordinal);
      check("hipDeviceReset", s.hipDeviceReset());
    },
    setCurrent: (ctx) => select(Number(ctx - 1n)),
    synchronize: () => check("hipDeviceSynchronize", s.hipDeviceSynchronize()),

    memAlloc: (bytes) => u64("hipMalloc", s.hipMalloc(u64Out, BigInt(bytes))),
    memFree: (ptr) => check("hipFree", s.hipFree(ptr)),
    memInfo() {
      check("hipMemGetInfo", s.hipMemGetInfo(u64Out.subarray(0, 1), u64Out.subarray(1, 2)));
      return { free: Number(u64Out[0]), total: Number(u64Out[1]) };
    },
    memset8: (ptr, value, bytes, stream) =>
      check("hipMemsetD8Async", s.hipMemsetD8Async(ptr, value & 0xff, BigInt(bytes), stream)),
    memset32: (ptr, value, count, stream) =>
      check("hipMemsetD32Async", s.hipMemsetD32Async(ptr, value | 0, BigInt(count), stream)),
    copyHtoD: (dst, src, bytes) => check("hipMemcpyHtoD", s.hipMemcpyHtoD(dst, src, BigInt(bytes))),
    copyDtoH: (dst, src, bytes) => check("hipMemcpyDtoH", s.hipMemcpyDtoH(dst, src, BigInt(bytes))),
    copyDtoD: (dst, src, bytes, stream) =>
      check("hipMemcpyDtoDAsync", s.hipMemcpyDtoDAsync(dst, src, BigInt(bytes), stream)),
    copyHtoDAsync: (dst, src, bytes, stream) =>
      check("hipMemcpyHtoDAsync", s.hipMemcpyHtoDAsync(dst, src, BigInt(bytes), stream)),
    copyDtoHAsync: (dst, src, bytes, stream) =>
      check("hipMemcpyDtoHAsync", s.hipMemcpyDtoHAsync(dst, src, BigInt(bytes), stream)),
    pointerInfo(ptr) {
      // HIP's "context" of a device is its ordinal + 1 (retainContext): the device the memory lives on.
      const attrs = new Int32Array(HIP_POINTER_ATTRIBUTE.size / 4);
      check("hipPointerGetAttributes", s.hipPointerGetAttributes(attrs, ptr));
      const device = attrs[HIP_POINTER_ATTRIBUTE.device / 4];
      check("hipMemGetAddressRange", s.hipMemGetAddressRange(u64Out.subarray(0, 1), u64Out.subarray(1, 2), ptr));
      return { context: BigInt(device) + 1n, base: u64Out[0], bytes: Number(u64Out[1]) };
    },
    hostAlloc: (bytes) => u64("hipHostMalloc", s.hipHostMalloc(u64Out, BigInt(bytes), HIP_HOST_MALLOC_PORTABLE)),
    hostFree: (addr) => check("hipHostFree", s.hipHostFree(addr)),

    streamCreate: () => u64("hipStreamCreateWithFlags", s.hipStreamCreateWithFlags(u64Out, HIP_STREAM_NON_BLOCKING)),
    streamDestroy: (st) => check("hipStreamDestroy", s.hipStreamDestroy(st)),
    streamSynchronize: (st) => check("hipStreamSynchronize", s.hipStreamSynchronize(st)),
    streamWaitEvent: (st, ev) => check("hipStreamWaitEvent", s.hipStreamWaitEvent(st, ev, 0)),
    streamQuery: (st) => readySync("hipStreamQuery", s.hipStreamQuery(st)),

    eventCreate: (timing) =>
      u64(
        "hipEventCreateWithFlags",
        s.hipEventCreateWithFlags(u64Out, timing ? HIP_EVENT_DEFAULT : HIP_EVENT_DISABLE_TIMING),
      ),
    eventRecord: (ev, st) => check("hipEventRecord", s.hipEventRecord(ev, st)),
    eventSynchronize: (ev) => check("hipEventSynchronize", s.hipEventSynchronize(ev)),
    eventQuery: (ev) => readySync("hipEventQuery", s.hipEventQuery(ev)),
    eventElapsed(start, end) {
      check("hipEventElapsedTime", s.hipEventElapsedTime(f32Out, start, end));
      return f32Out[0];
    },
    eventDestroy: (ev) => check("hipEventDestroy", s.hipEventDestroy(ev)),

    moduleLoad: (image) => u64("hipModuleLoadData", s.hipModuleLoadData(u64Out, image)),
    moduleUnload: (mod) => check("hipModuleUnload", s.hipModuleUnload(mod)),
    moduleFunction: (mod, name) =>
      u64("hipModuleGetFunction", s.hipModuleGetFunction(u64Out, mod, utf8.encode(name + "\0"))),
    kernelAttribute: (fn, a) => i32("hipFuncGetAttribute", s.hipFuncGetAttribute(i32Out, FUNC_ATTR[a], fn)),
    // AMD GPUs have no dynamic-shared-memory opt-in: a block may use up to the device's LDS limit without asking,
    // and HIP 5.2's hipFuncSetAttribute takes a host stub, not a module's hipFunction_t. So this only checks
    // the request against the current device's limit (what the CUDA call would reject, too).
    setKernelMaxDynamicShared(_fn, bytes) {
      const limit = attr(current, A.SharedMemPerBlockOptin);
      if (bytes > limit) {
        throw new GpuError(
          "hip",
          "setKernelMaxDynamicShared",
          1,
          "hipErrorInvalidValue",
          `${bytes} bytes of dynamic shared memory requested, device ${current} allows ${limit} per block`,
        );
      }
    },
    occupancy: (fn, threads, shared) =>
      i32(
        "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor",
        s.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(i32Out, fn, threads, BigInt(shared)),
      ),
    activeClusters: noClusters,
    allowNonPortableClusters: noClusters,
    launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params) {
      const code = s.hipModuleLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0n);
      if (code !== 0) fail("hipModuleLaunchKernel", code);
    },
    launchEx(_fn, _gx, _gy, _gz, _bx, _by, _bz, _shared, _stream, _params, cluster) {
      throw new UnsupportedError(
        cluster > 1
          ? NO_CLUSTERS
          : "programmatic dependent launch is a CUDA (sm_90+) feature; the HIP backend has none",
      );
    },
  };
}
