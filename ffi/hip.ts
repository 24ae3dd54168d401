/**
 * The HIP runtime API (libamdhip64.so) as normkit uses it: one symbol table, each entry with its C prototype.
 *
 * Types (see types.ts): handles (hipStream_t, hipEvent_t, hipModule_t, hipFunction_t), hipDeviceptr_t, device
 * pointers and size_t are "u64"; host pointers JS owns are "buffer"; hipError_t, hipDevice_t (an int) and enums
 * are "i32"/"u32". Every name listed here is exported by Debian's libamdhip64.so.5 (HIP 5.2.3, checked with
 * `nm -D`): Bun's dlopen fails as a whole when one symbol is missing.
 * Prototypes are copied from HIP 5.2's include/hip/hip_runtime_api.h (Debian libamdhip64-dev 5.2.3-8).
 */
import type { SymbolTable } from "./types.ts";

export const HIP_SYMBOLS = {
  // hipError_t hipInit(unsigned int flags);
  hipInit: { parameters: ["u32"], result: "i32" },
  // hipError_t hipDriverGetVersion(int* driverVersion);
  hipDriverGetVersion: { parameters: ["buffer"], result: "i32" },
  // Both return a static string directly (not through an out-parameter as in CUDA): read with ffi.readCString.
  // const char* hipGetErrorName(hipError_t hip_error);
  hipGetErrorName: { parameters: ["i32"], result: "u64" },
  // const char* hipGetErrorString(hipError_t hipError);
  hipGetErrorString: { parameters: ["i32"], result: "u64" },

  // hipError_t hipGetDeviceCount(int* count);
  hipGetDeviceCount: { parameters: ["buffer"], result: "i32" },
  // hipError_t hipSetDevice(int deviceId);
  hipSetDevice: { parameters: ["i32"], result: "i32" },
  // hipError_t hipDeviceGetAttribute(int* pi, hipDeviceAttribute_t attr, int deviceId);
  hipDeviceGetAttribute: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  // hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device);
  hipDeviceGetName: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  // The gfx name is only in the properties struct (see HIP_DEVICE_PROP below for the layout read).
  // hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int deviceId);
  hipGetDeviceProperties: { parameters: ["buffer", "i32"], result: "i32" },
  // hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t device);
  hipDeviceTotalMem: { parameters: ["buffer", "i32"], result: "i32" },
  // hipError_t hipDeviceSynchronize(void);
  hipDeviceSynchronize: { parameters: [], result: "i32" },
  // hipError_t hipDeviceReset(void);
  hipDeviceReset: { parameters: [], result: "i32" },

  // hipError_t hipMalloc(void** ptr, size_t size);
  hipMalloc: { parameters: ["buffer", "u64"], result: "i32" },
  // hipError_t hipFree(void* ptr);
  hipFree: { parameters: ["u64"], result: "i32" },
  // Interop: the device a pointer made by other code lives on (see HIP_POINTER_ATTRIBUTE), and its allocation.
  // hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* ptr);
  hipPointerGetAttributes: { parameters: ["buffer", "u64"], result: "i32" },
  // hipError_t hipMemGetAddressRange(hipDeviceptr_t* pbase, size_t* psize, hipDeviceptr_t dptr);
  hipMemGetAddressRange: { parameters: ["buffer", "buffer", "u64"], result: "i32" },
  // hipError_t hipMemGetInfo(size_t* free, size_t* total);
  hipMemGetInfo: { parameters: ["buffer", "buffer"], result: "i32" },
  // hipError_t hipMemsetD8Async(hipDeviceptr_t dest, unsigned char value, size_t count, hipStream_t stream);
  hipMemsetD8Async: { parameters: ["u64", "u32", "u64", "u64"], result: "i32" },
  // hipError_t hipMemsetD32Async(hipDeviceptr_t dst, int value, size_t count, hipStream_t stream);
  hipMemsetD32Async: { parameters: ["u64", "i32", "u64", "u64"], result: "i32" },
  // hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, void* src, size_t sizeBytes);
  hipMemcpyHtoD: { parameters: ["u64", "buffer", "u64"], result: "i32" },
  // hipError_t hipMemcpyDtoH(void* dst, hipDeviceptr_t src, size_t sizeBytes);
  hipMemcpyDtoH: { parameters: ["buffer", "u64", "u64"], result: "i32" },
  // Async copies take host addresses as u64: they point at pinned memory (hipHostMalloc), whose address we own.
  // hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t sizeBytes, hipStream_t stream);
  hipMemcpyHtoDAsync: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  // hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream);
  hipMemcpyDtoHAsync: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  // hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream);
  hipMemcpyDtoDAsync: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  // hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags);
  hipHostMalloc: { parameters: ["buffer", "u64", "u32"], result: "i32" },
  // hipError_t hipHostFree(void* ptr);
  hipHostFree: { parameters: ["u64"], result: "i32" },

  // hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags);
  hipStreamCreateWithFlags: { parameters: ["buffer", "u32"], result: "i32" },
  // hipError_t hipStreamDestroy(hipStream_t stream);
  hipStreamDestroy: { parameters: ["u64"], result: "i32" },
  // hipError_t hipStreamSynchronize(hipStream_t stream);
  hipStreamSynchronize: { parameters: ["u64"], result: "i32" },
  // hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);
  hipStreamWaitEvent: { parameters: ["u64", "u64", "u32"], result: "i32" },
  // hipError_t hipStreamQuery(hipStream_t stream);
  hipStreamQuery: { parameters: ["u64"], result: "i32" },

  // hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags);
  hipEventCreateWithFlags: { parameters: ["buffer", "u32"], result: "i32" },
  // hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
  hipEventRecord: { parameters: ["u64", "u64"], result: "i32" },
  // hipError_t hipEventSynchronize(hipEvent_t event);
  hipEventSynchronize: { parameters: ["u64"], result: "i32" },
  // hipError_t hipEventQuery(hipEvent_t event);
  hipEventQuery: { parameters: ["u64"], result: "i32" },
  // hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop);
  hipEventElapsedTime: { parameters: ["buffer", "u64", "u64"], result: "i32" },
  // hipError_t hipEventDestroy(hipEvent_t event);
  hipEventDestroy: { parameters: ["u64"], result: "i32" },

  // hipError_t hipModuleLoadData(hipModule_t* module, const void* image);
  hipModuleLoadData: { parameters: ["buffer", "buffer"], result: "i32" },
  // hipError_t hipModuleUnload(hipModule_t module);
  hipModuleUnload: { parameters: ["u64"], result: "i32" },
  // hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname);
  hipModuleGetFunction: { parameters: ["buffer", "u64", "buffer"], result: "i32" },
  // hipError_t hipFuncGetAttribute(int* value, hipFunction_attribute attrib, hipFunction_t hfunc);
  hipFuncGetAttribute: { parameters: ["buffer", "i32", "u64"], result: "i32" },
  // NOTE: in HIP 5.2 `func` is the host-side stub of a kernel compiled into the program (runtime API), not a
  // hipFunction_t from hipModuleGetFunction; runtime/hip.ts therefore does not call it (see there).
  // hipError_t hipFuncSetAttribute(const void* func, hipFuncAttribute attr, int value);
  hipFuncSetAttribute: { parameters: ["u64", "i32", "i32"], result: "i32" },
  // hipError_t hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, hipFunction_t f, int blockSize,
  //                                                                size_t dynSharedMemPerBlk);
  hipModuleOccupancyMaxActiveBlocksPerMultiprocessor: { parameters: ["buffer", "u64", "i32", "u64"], result: "i32" },
  // hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
  //                                  unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
  //                                  unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
  //                                  void** kernelParams, void** extra);
  hipModuleLaunchKernel: {
    parameters: ["u64", "u32", "u32", "u32", "u32", "u32", "u32", "u32", "u64", "u64", "u64"],
    result: "i32",
  },
} as const satisfies SymbolTable;

export type HipSymbols = typeof HIP_SYMBOLS;

/** hipError_t values the runtime reacts to by name (all others are reported through hipGetErrorName). */
export const HIP_SUCCESS = 0; // hipSuccess
export const HIP_ERROR_NO_DEVICE = 100; // hipErrorNoDevice
export const HIP_ERROR_INVALID_DEVICE = 101; // hipErrorInvalidDevice (what hipInit returns with no GPU)
export const HIP_ERROR_NOT_READY = 600; // hipErrorNotReady

/**
 * hipDeviceAttribute_t values used by Device, for the HIP 5.x ABI (hip_runtime_api.h of HIP 5.2.3). They are NOT
 * CUDA's numbers: HIP's enum is its own sequence (hipDeviceAttributeCudaCompatibleBegin = 0, in alphabetical-ish
 * order), then AMD-specific values from 10000. Values printed by compiling the header (g++ -D__HIP_PLATFORM_AMD__)
 * and checked against the header again by tests/hip/binding.test.ts when it is installed.
 */
export const HIP_DEVICE_ATTRIBUTE = {
  L2CacheSize: 19,
  ComputeCapabilityMajor: 23,
  MaxBlockDimX: 26,
  MaxBlockDimY: 27,
  MaxBlockDimZ: 28,
  MaxGridDimX: 29,
  MaxGridDimY: 30,
  MaxGridDimZ: 31,
  MaxThreadsPerBlock: 56,
  ComputeCapabilityMinor: 61,
  MultiprocessorCount: 63,
  MaxSharedMemoryPerBlock: 74,
  SharedMemPerBlockOptin: 75,
  WarpSize: 87,
  MaxSharedMemoryPerMultiprocessor: 10002,
} as const;

/**
 * The parts of HIP 5.x's hipDeviceProp_t that runtime/hip.ts reads (offsets in bytes, x86-64). HIP 6 renamed this
 * layout hipDeviceProp_tR0000 and exports the old hipGetDeviceProperties for it, while its headers map the name to
 * hipGetDevicePropertiesR0600 (a different layout); only the 5.x symbol and layout are used here. Checked against
 * the installed header's offsetof/sizeof by tests/hip/binding.test.ts (g++ -D__HIP_PLATFORM_AMD__).
 */
export const HIP_DEVICE_PROP = {
  size: 792,
  gcnArchNameOffset: 396,
  gcnArchNameSize: 256,
} as const;

/** hipFunction_attribute values (driver_types.h; same order as CUDA's CUfunction_attribute). */
export const HIP_FUNC_ATTRIBUTE = {
  MAX_THREADS_PER_BLOCK: 0,
  SHARED_SIZE_BYTES: 1,
  NUM_REGS: 4,
  MAX_DYNAMIC_SHARED_SIZE_BYTES: 8,
} as const;

export const HIP_STREAM_NON_BLOCKING = 1; // hipStreamNonBlocking
export const HIP_EVENT_DEFAULT = 0; // hipEventDefault
export const HIP_EVENT_DISABLE_TIMING = 2; // hipEventDisableTiming
export const HIP_HOST_MALLOC_PORTABLE = 1; // hipHostMallocPortable

/**
 * hipPointerAttribute_t (hip_runtime_api.h, LP64): { hipMemoryType memoryType; int device @4; void* devicePointer;
 * void* hostPointer; int isManaged; unsigned allocationFlags } size 32; checked against the installed header's
 * offsetof/sizeof by tests/hip/binding.test.ts.
 */
export const HIP_POINTER_ATTRIBUTE = { size: 32, device: 4 } as const;
