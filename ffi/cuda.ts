/**
 * The CUDA driver API (libcuda.so.1) as normkit uses it: one symbol table, each entry with its C prototype.
 *
 * Types (see types.ts): handles, CUdeviceptr and size_t are "u64"; host pointers are "buffer"; CUresult,
 * CUdevice and enums are "i32"/"u32". The `_v2` entry points are the ones the 64-bit API has exported since
 * CUDA 3.2 (cuda.h #defines the plain names to them); calling the plain names would get 32-bit variants.
 */
import type { SymbolTable } from "./types.ts";

export const CUDA_SYMBOLS = {
  // CUresult cuInit(unsigned int Flags);
  cuInit: { parameters: ["u32"], result: "i32" },
  // CUresult cuDriverGetVersion(int *driverVersion);
  cuDriverGetVersion: { parameters: ["buffer"], result: "i32" },
  // CUresult cuGetErrorName(CUresult error, const char **pStr);
  cuGetErrorName: { parameters: ["i32", "buffer"], result: "i32" },
  // CUresult cuGetErrorString(CUresult error, const char **pStr);
  cuGetErrorString: { parameters: ["i32", "buffer"], result: "i32" },

  // CUresult cuDeviceGetCount(int *count);
  cuDeviceGetCount: { parameters: ["buffer"], result: "i32" },
  // CUresult cuDeviceGet(CUdevice *device, int ordinal);
  cuDeviceGet: { parameters: ["buffer", "i32"], result: "i32" },
  // CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
  cuDeviceGetName: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  // CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
  cuDeviceGetAttribute: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  // CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
  cuDeviceTotalMem_v2: { parameters: ["buffer", "i32"], result: "i32" },

  // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
  cuDevicePrimaryCtxRetain: { parameters: ["buffer", "i32"], result: "i32" },
  // CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
  cuDevicePrimaryCtxRelease_v2: { parameters: ["i32"], result: "i32" },
  // CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
  cuDevicePrimaryCtxReset_v2: { parameters: ["i32"], result: "i32" },
  // CUresult cuCtxSetCurrent(CUcontext ctx);
  cuCtxSetCurrent: { parameters: ["u64"], result: "i32" },
  // CUresult cuCtxGetCurrent(CUcontext *pctx);
  cuCtxGetCurrent: { parameters: ["buffer"], result: "i32" },
  // CUresult cuCtxSynchronize(void);
  cuCtxSynchronize: { parameters: [], result: "i32" },

  // CUresult cuModuleLoadData(CUmodule *module, const void *image);
  cuModuleLoadData: { parameters: ["buffer", "buffer"], result: "i32" },
  // CUresult cuModuleUnload(CUmodule hmod);
  cuModuleUnload: { parameters: ["u64"], result: "i32" },
  // CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
  cuModuleGetFunction: { parameters: ["buffer", "u64", "buffer"], result: "i32" },
  // CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
  cuFuncSetAttribute: { parameters: ["u64", "i32", "i32"], result: "i32" },
  // CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc);
  cuFuncGetAttribute: { parameters: ["buffer", "i32", "u64"], result: "i32" },
  // CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
  //                                                      size_t dynamicSMemSize);
  cuOccupancyMaxActiveBlocksPerMultiprocessor: { parameters: ["buffer", "u64", "i32", "u64"], result: "i32" },
  // CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config);
  // (CUDA 11.8+; `config` is the prepared struct of cuLaunchKernelEx below, with a cluster attribute.)
  cuOccupancyMaxActiveClusters: { parameters: ["buffer", "u64", "u64"], result: "i32" },

  // CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
  cuMemAlloc_v2: { parameters: ["buffer", "u64"], result: "i32" },
  // CUresult cuMemFree_v2(CUdeviceptr dptr);
  cuMemFree_v2: { parameters: ["u64"], result: "i32" },
  // CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
  cuMemGetInfo_v2: { parameters: ["buffer", "buffer"], result: "i32" },
  // CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N);
  cuMemsetD8_v2: { parameters: ["u64", "u32", "u64"], result: "i32" },
  // CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N);
  cuMemsetD32_v2: { parameters: ["u64", "u32", "u64"], result: "i32" },
  // CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
  cuMemsetD8Async: { parameters: ["u64", "u32", "u64", "u64"], result: "i32" },
  // CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
  cuMemsetD32Async: { parameters: ["u64", "u32", "u64", "u64"], result: "i32" },
  // CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
  cuMemcpyHtoD_v2: { parameters: ["u64", "buffer", "u64"], result: "i32" },
  // CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
  cuMemcpyDtoH_v2: { parameters: ["buffer", "u64", "u64"], result: "i32" },
  // CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
  cuMemcpyDtoD_v2: { parameters: ["u64", "u64", "u64"], result: "i32" },
  // Async copies take host addresses as u64: they must point at pinned memory, whose address we own.
  // CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
  cuMemcpyHtoDAsync_v2: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  // CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
  cuMemcpyDtoHAsync_v2: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  // CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
  cuMemcpyDtoDAsync_v2: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  // Interop: which context a pointer made by other code belongs to, and the allocation it lies in.
  // CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);
  cuPointerGetAttribute: { parameters: ["buffer", "i32", "u64"], result: "i32" },
  // CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
  cuMemHostAlloc: { parameters: ["buffer", "u64", "u32"], result: "i32" },
  // CUresult cuMemFreeHost(void *p);
  cuMemFreeHost: { parameters: ["u64"], result: "i32" },

  // CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
  cuStreamCreate: { parameters: ["buffer", "u32"], result: "i32" },
  // CUresult cuStreamDestroy_v2(CUstream hStream);
  cuStreamDestroy_v2: { parameters: ["u64"], result: "i32" },
  // CUresult cuStreamSynchronize(CUstream hStream);
  cuStreamSynchronize: { parameters: ["u64"], result: "i32" },
  // CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
  cuStreamWaitEvent: { parameters: ["u64", "u64", "u32"], result: "i32" },
  // CUresult cuStreamQuery(CUstream hStream);
  cuStreamQuery: { parameters: ["u64"], result: "i32" },

  // CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
  cuEventCreate: { parameters: ["buffer", "u32"], result: "i32" },
  // CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
  cuEventRecord: { parameters: ["u64", "u64"], result: "i32" },
  // CUresult cuEventSynchronize(CUevent hEvent);
  cuEventSynchronize: { parameters: ["u64"], result: "i32" },
  // CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
  // (cuda.h 12.8+ maps the name to _v2; the original stays exported, so older drivers work too)
  cuEventElapsedTime: { parameters: ["buffer", "u64", "u64"], result: "i32" },
  // CUresult cuEventQuery(CUevent hEvent);
  cuEventQuery: { parameters: ["u64"], result: "i32" },
  // CUresult cuEventDestroy_v2(CUevent hEvent);
  cuEventDestroy_v2: { parameters: ["u64"], result: "i32" },

  // CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
  //                         unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
  //                         unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
  cuLaunchKernel: {
    parameters: ["u64", "u32", "u32", "u32", "u32", "u32", "u32", "u32", "u64", "u64", "u64"],
    result: "i32",
  },
  // CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
  // (CUDA 12.0+; used for thread-block clusters and programmatic dependent launches. `config` is a prepared
  // struct, see CU_LAUNCH_CONFIG.)
  cuLaunchKernelEx: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },

  // CUDA graphs from stream capture (all present since CUDA 12.0, like cuLaunchKernelEx above).
  // CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
  cuStreamBeginCapture_v2: { parameters: ["u64", "i32"], result: "i32" },
  // CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
  cuStreamEndCapture: { parameters: ["u64", "buffer"], result: "i32" },
  // CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
  cuStreamIsCapturing: { parameters: ["u64", "buffer"], result: "i32" },
  // (cuda.h #defines cuGraphInstantiate to this entry point)
  // CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
  cuGraphInstantiateWithFlags: { parameters: ["buffer", "u64", "u64"], result: "i32" },
  // CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
  cuGraphLaunch: { parameters: ["u64", "u64"], result: "i32" },
  // `resultInfo` is a CUgraphExecUpdateResultInfo (see CU_GRAPH_EXEC_UPDATE_RESULT_INFO).
  // CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);
  cuGraphExecUpdate_v2: { parameters: ["u64", "u64", "buffer"], result: "i32" },
  // CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
  cuGraphExecDestroy: { parameters: ["u64"], result: "i32" },
  // CUresult cuGraphDestroy(CUgraph hGraph);
  cuGraphDestroy: { parameters: ["u64"], result: "i32" },
} as const satisfies SymbolTable;

/**
 * CUgraphExecUpdateResultInfo (cuda.h, LP64): { CUgraphExecUpdateResult result (u32); (pad 4)
 * CUgraphNode errorNode @8; CUgraphNode errorFromNode @16 } size 24.
 */
export const CU_GRAPH_EXEC_UPDATE_RESULT_INFO = { size: 24, result: 0 } as const;

/** CUstreamCaptureMode values. */
export const CU_STREAM_CAPTURE_MODE = { GLOBAL: 0, THREAD_LOCAL: 1, RELAXED: 2 } as const;
/** CUstreamCaptureStatus values. */
export const CU_STREAM_CAPTURE_STATUS = { NONE: 0, ACTIVE: 1, INVALIDATED: 2 } as const;
/** CUgraphExecUpdateResult values (why cuGraphExecUpdate refused). */
export const CU_GRAPH_EXEC_UPDATE = {
  SUCCESS: 0,
  ERROR: 1,
  ERROR_TOPOLOGY_CHANGED: 2,
  ERROR_NODE_TYPE_CHANGED: 3,
  ERROR_FUNCTION_CHANGED: 4,
  ERROR_PARAMETERS_CHANGED: 5,
  ERROR_NOT_SUPPORTED: 6,
  ERROR_UNSUPPORTED_FUNCTION_CHANGE: 7,
  ERROR_ATTRIBUTES_CHANGED: 8,
} as const;

/**
 * Byte layout of CUlaunchConfig and of one CUlaunchAttribute (cuda.h, LP64):
 *   CUlaunchConfig { u32 gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
 *                    (pad 4) CUstream hStream @32; CUlaunchAttribute *attrs @40; u32 numAttrs @48; } size 56
 *   CUlaunchAttribute { u32 id; (pad 4) union value[64] @8; } size 72; clusterDim = { u32 x, y, z } @8
 */
export const CU_LAUNCH_CONFIG = { size: 56, stream: 32, attrs: 40, numAttrs: 48 } as const;
export const CU_LAUNCH_ATTRIBUTE = { size: 72, value: 8 } as const;
export const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
/** value: int programmaticStreamSerializationAllowed @8 (CUDA 12.0+, honoured on sm_90+). */
export const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

export type CudaSymbols = typeof CUDA_SYMBOLS;

/** CUresult values the runtime reacts to by name (all others are reported through cuGetErrorName). */
export const CUDA_SUCCESS = 0;
export const CUDA_ERROR_NOT_READY = 600;
/** cuGraphExecUpdate: the update was refused (resultInfo says why); the executable graph is unchanged. */
export const CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;

/** CUdevice_attribute values used by Device (cuda.h). */
export const CU_DEVICE_ATTRIBUTE = {
  MAX_THREADS_PER_BLOCK: 1,
  MAX_BLOCK_DIM_X: 2,
  MAX_BLOCK_DIM_Y: 3,
  MAX_BLOCK_DIM_Z: 4,
  MAX_GRID_DIM_X: 5,
  MAX_GRID_DIM_Y: 6,
  MAX_GRID_DIM_Z: 7,
  MAX_SHARED_MEMORY_PER_BLOCK: 8,
  WARP_SIZE: 10,
  MULTIPROCESSOR_COUNT: 16,
  L2_CACHE_SIZE: 38,
  COMPUTE_CAPABILITY_MAJOR: 75,
  COMPUTE_CAPABILITY_MINOR: 76,
  MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 81,
  MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 97,
} as const;

/** CUfunction_attribute values. */
export const CU_FUNC_ATTRIBUTE = {
  MAX_THREADS_PER_BLOCK: 0,
  SHARED_SIZE_BYTES: 1,
  NUM_REGS: 4,
  MAX_DYNAMIC_SHARED_SIZE_BYTES: 8,
  NON_PORTABLE_CLUSTER_SIZE_ALLOWED: 14,
} as const;

/** CUpointer_attribute values (cuPointerGetAttribute); each answer is 8 bytes (CUcontext, CUdeviceptr, size_t). */
export const CU_POINTER_ATTRIBUTE = {
  CONTEXT: 1,
  RANGE_START_ADDR: 11,
  RANGE_SIZE: 12,
} as const;

export const CU_STREAM_NON_BLOCKING = 1;
export const CU_EVENT_DEFAULT = 0;
export const CU_EVENT_DISABLE_TIMING = 2;
export const CU_MEMHOSTALLOC_PORTABLE = 1;
