/**
 * The fused kernels' modules (kernels/fused.cu): the kernels of a float y (residual add, head views, batch-invariant
 * rows) with the add of the residual gradient, loaded by `loadKernels(dev, { fused: true })`, and those of a quantized
 * y, loaded by `loadKernels(dev, { quant: true })`: images of their own, so that a program reads only what it calls.
 */
import type { Device } from "../runtime/device.ts";
import { UnsupportedError } from "../runtime/errors.ts";
import { type ArgType, type Kernel, LaunchConfig } from "../runtime/module.ts";
import type { Stream } from "../runtime/stream.ts";
import type { Tensor } from "../runtime/tensor.ts";
import { FUSED_ADD_ARGS, FUSED_ADD_THREADS, FUSED_ARGS } from "./fused_abi.ts";
import type { KernelImageSet } from "./images.ts";
import { ModuleSlot } from "./module_slot.ts";
import { KERNEL_KEY, launchesDependent } from "./kernels.ts";

const FUSED_MODULE = new ModuleSlot("normkit.fused.module", (device) => {
  throw new UnsupportedError(
    `the fused kernels (residual, head views, batchInvariant, dResidual) of ${device.info.name} are not ` +
      "loaded: `await loadKernels(dev, { fused: true })` once after Device.open(), with `images` where the device " +
      "needs @normkit/ptx or @normkit/hip (docs/loading.md)",
  );
});
const FUSED_QUANT_MODULE = new ModuleSlot("normkit.fusedQuant.module", (device) => {
  throw new UnsupportedError(
    `the quantized fused kernels (quant) of ${device.info.name} are not loaded: ` +
      "`await loadKernels(dev, { quant: true })` once after Device.open(), with `images` where the device needs " +
      "@normkit/ptx or @normkit/hip (docs/loading.md)",
  );
});
const SLOTS = { fused: FUSED_MODULE, fusedQuant: FUSED_QUANT_MODULE } as const;

/** The image a fused kernel is in: fusedQuant for a quantized y (nk_fused_{kind}_{ti}_{fp8…|int8}_{tw}…), else fused. */
export function fusedImageOf(name: string): FusedImage {
  return /^nk_fused_(ln|rms)_[a-z0-9]+_(fp8e4m3|fp8e5m2|int8)_/.test(name) ? "fusedQuant" : "fused";
}
/** The fused images: of a float y (and the residual gradient's add), of a quantized y. */
export type FusedImage = keyof typeof SLOTS;

/**
 * Reads the `image` of the device's target and loads it (once per device): normkit's own SASS on CUDA sm_80 and
 * sm_90, else the `fused` or `fusedQuant` images of the first of `sets` that has the target (`@normkit/ptx` for newer
 * NVIDIA GPUs, `@normkit/hip` for AMD GPUs).
 */
export async function loadFusedModule(
  device: Device,
  sets: readonly KernelImageSet[] = [],
  image: FusedImage = "fused",
): Promise<void> {
  await SLOTS[image].loadFrom(device, sets, image);
}

/** Loads the fused module `image` from `bytes` (loadFusedModule's synchronous last step). */
export function loadFusedImage(device: Device, bytes: Uint8Array, image: FusedImage = "fused"): void {
  SLOTS[image].load(device, bytes);
}

/** Whether the fused module `image` is loaded on `device` (always true on the CPU). */
export function fusedModuleLoaded(device: Device, image: FusedImage = "fused"): boolean {
  return SLOTS[image].loaded(device);
}

/**
 * The fused kernel `name` with parameters `args` (cached per device), from the module of its image (fusedImageOf); the
 * module comes back after a recovery.
 */
export function fusedKernel(device: Device, name: string, args: readonly ArgType[] = FUSED_ARGS): Kernel {
  const key = KERNEL_KEY + name;
  let k = device.cache.get(key) as Kernel | undefined;
  if (!k || k.module.closed) {
    k = SLOTS[fusedImageOf(name)].module(device).kernel(name, args);
    k.dependentLaunch = launchesDependent(device, name);
    device.cache.set(key, k);
  }
  return k;
}

/** The kernel of addInto for `dtype` (UnsupportedError when the fused module is not loaded): check it before launching. */
export function addKernel(device: Device, dtype: string): Kernel {
  return fusedKernel(device, `nk_fused_add_${dtype}`, FUSED_ADD_ARGS);
}

/** dst += src on `stream`: same shape and dtype, rows one stride apart; an f32 add rounded to the dtype. */
export function addInto(dst: Tensor, src: Tensor, stream: Stream): void {
  const k = addKernel(dst.device, dst.dtype);
  const grid = Math.max(1, Math.min(dst.rows, dst.device.info.maxGridDim[0]));
  const config = new LaunchConfig({ grid: [grid], block: [FUSED_ADD_THREADS] });
  k.launch(stream, config, [dst.ptr, src.ptr, dst.rows, dst.d, dst.rowStride, src.rowStride]);
}
