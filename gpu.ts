/**
 * normkit/gpu: the low-level layer: devices, streams, events, memory, modules, kernels and launches over the
 * CUDA driver API, usable for your own kernels. Names follow NVIDIA's cuda.core.
 *
 * ```ts
 * import { Device, LaunchConfig, launch } from "@normkit/normkit/gpu";
 * using dev = Device.open({ backend: "cuda" });
 * using mod = dev.loadModule(await kernelImage(dev)); // normkit's own kernels, or your PTX/cubin/fatbin
 * const k = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
 * launch(dev.stream, new LaunchConfig({ grid: [64], block: [256] }), k, x, y, 2, n);
 * ```
 * @module
 */
export { Device, type Backend, type OpenOptions, type WrapOptions } from "./runtime/device.ts";
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
export { DeviceBuffer, PinnedBuffer } from "./runtime/memory.ts";
export { type ArgType, type DevicePointer, Kernel, type KernelArg, launch, LaunchConfig, Module } from "./runtime/module.ts";
export { ArgumentError, BackendUnavailableError, DisposedError, GpuError, UnsupportedError } from "./runtime/errors.ts";
export { LibraryLoadError } from "./ffi/library.ts";
export { NORM_KERNELS, NORM_SOURCE_SHA256 } from "./precompiled/norm_cuda.ts";
export { type ImageChoice, imageChoice, kernelImage, type KernelImageSet } from "./ops/images.ts";
