/**
 * normkit: LayerNorm and RMSNorm on GPUs (CUDA driver API) for Deno and Bun, with a CPU fallback.
 *
 * ```ts
 * import { Device, layerNorm, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();                       // CUDA when present, else CPU
 * await loadKernels(dev);                          // the kernels of this GPU's architecture (no-op on the CPU)
 * const rows = 8, d = 1024;
 * using x = dev.tensor(new Float32Array(rows * d).map(() => Math.random()), [rows, d]);
 * using y = layerNorm(x, { eps: 1e-5 });
 * const out = await y.toArray();
 * ```
 * @module
 */
export { type Backend, Device, type OpenOptions, type WrapOptions } from "./runtime/device.ts";
export { type BitsArray, type RowLevels, Tensor, type TensorOptions } from "./runtime/tensor.ts";
export { type DType, DTYPES, type FloatDType, QUANT_DTYPES, type QuantDType } from "./runtime/dtype.ts";
export { ArgumentError, BackendUnavailableError, DisposedError, GpuError, UnsupportedError } from "./runtime/errors.ts";
export { LibraryLoadError } from "./ffi/library.ts";
export { layerNorm, type LayerNormOptions, type NormResult, rmsNorm, type RMSNormOptions } from "./ops/norm.ts";
export type { DynamicQuant, FusedOptions, QuantNormResult, QuantOptions, StaticQuant } from "./ops/fused.ts";
export { loadKernels, type LoadKernelsOptions, setDependentLaunch } from "./ops/kernels.ts";
export type { ImageFiles, ImageSource, KernelImageSet } from "./ops/images.ts";
export {
  type CpuNormInput,
  type CpuNormOutput,
  type CpuQuantOptions,
  type CpuQuantOutput,
  normForward as cpuNormForward,
} from "./ops/cpu.ts";
export {
  layerNormBackward,
  type LayerNormBackwardOptions,
  type NormBackwardResult,
  rmsNormBackward,
  type RMSNormBackwardOptions,
} from "./ops/backward.ts";
export {
  type CpuNormBackwardInput,
  type CpuNormBackwardOutput,
  normBackward as cpuNormBackward,
} from "./ops/cpu_bwd.ts";
export { LayerNorm, type NormModule, type NormModuleOptions, type ParamValues, RMSNorm } from "./ops/modules.ts";
// Diagnostics. Importing diag_sanity registers the sanity check Device.open() runs.
export { type Histogram, histogram, tensorStats } from "./ops/diag.ts";
export { sanityCheck } from "./ops/diag_sanity.ts";
export type { CheckReport, TensorStats } from "./runtime/device.ts";
export { SanityCheckError } from "./runtime/errors.ts";
