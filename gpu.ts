/**
 * normkit/gpu: the low-level layer: devices, streams, events, memory, modules, kernels and launches over the
 * CUDA driver API, usable for your own kernels. Names follow NVIDIA's cuda.core.
 *
 * ```ts
 * import { Device, kernelImage, LaunchConfig, launch } from "@normkit/normkit/gpu";
 * using dev = Device.open({ backend: "cuda" });
 * using mod = dev.loadModule(await kernelImage(dev)); // normkit's own kernels, or your PTX/cubin/fatbin
 * const k = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
 * const n = 1 << 16;
 * using x = dev.alloc(4 * n);
 * using y = dev.alloc(4 * n);
 * launch(dev.stream, new LaunchConfig({ grid: [64], block: [256] }), k, x, y, 2, n);
 * ```
 * @module
 */
export { type Backend, Device, type OpenOptions, type WrapOptions } from "./runtime/device.ts";
export type { DeviceInfo, PointerInfo } from "./runtime/driver.ts";
export { Event, Stream } from "./runtime/stream.ts";
export {
  type CaptureMode,
  type CaptureStatus,
  Graph,
  GraphExec,
  GraphUpdateError,
  type GraphUpdateRefusal,
} from "./runtime/graph.ts";
export { type AsyncCopyOptions, type CopyOptions, DeviceBuffer, PinnedBuffer } from "./runtime/memory.ts";
export type { Resource } from "./runtime/resource.ts";
export {
  type ArgType,
  type DevicePointer,
  Kernel,
  type KernelArg,
  launch,
  LaunchConfig,
  Module,
} from "./runtime/module.ts";
export { ArgumentError, BackendUnavailableError, DisposedError, GpuError, UnsupportedError } from "./runtime/errors.ts";
export { LibraryLoadError } from "./ffi/library.ts";
export { NORM_BWD_KERNELS, NORM_KERNELS, NORM_SOURCE_SHA256 } from "./precompiled/norm_cuda.ts";
export { FUSED_SOURCE_SHA256 } from "./precompiled/fused_cuda.ts";
export {
  type ImageChoice,
  imageChoice,
  type ImageFiles,
  type ImageKind,
  type ImageSource,
  kernelImage,
  type KernelImageSet,
} from "./ops/images.ts";
