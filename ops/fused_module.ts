/**
 * The fused kernels' module (kernels/fused.cu: residual add, quantized output, head views, batch-invariant rows,
 * and the add of the residual gradient): an image of its own, loaded by `loadKernels(dev, { fused: true })`, so
 * that a program that never calls a fused option never reads it.
 */
import type { Device } from "../runtime/device.ts";
import { UnsupportedError } from "../runtime/errors.ts";
import { type ArgType, type Kernel, LaunchConfig } from "../runtime/module.ts";
import type { Stream } from "../runtime/stream.ts";
import type { Tensor } from "../runtime/tensor.ts";
import { FUSED_ADD_ARGS, FUSED_ADD_THREADS, FUSED_ARGS } from "./fused_abi.ts";
import { findImage, imageChoice, type KernelImageSet, readImage } from "./images.ts";
import { ModuleSlot } from "./module_slot.ts";
import { KERNEL_KEY, launchesDependent } from "./kernels.ts";

const FUSED_MODULE = new ModuleSlot("normkit.fused.module", (device) => {
  throw new UnsupportedError(
    `the fused kernels (residual, quant, head views, batchInvariant, dResidual) of ${device.info.name} are not ` +
      "loaded: `await loadKernels(dev, { fused: true })` once after Device.open() (docs/loading.md)",
  );
});

/**
 * Reads the fused image of the device's target and loads it (once per device): normkit's own SASS on CUDA sm_80 and
 * sm_90, else the `fused` images of the first of `sets` that has the target (`@normkit/ptx` for newer NVIDIA GPUs,
 * `@normkit/hip` for AMD GPUs).
 */
export async function loadFusedModule(device: Device, sets: readonly KernelImageSet[] = []): Promise<void> {
  if (device.backend === "cpu" || fusedModuleLoaded(device)) return;
  const choice = imageChoice(device);
  const src = findImage(choice, sets, `${device.info.name} (${choice.target})`, "fused");
  loadFusedImage(device, await readImage(src)); // nothing if a concurrent call loaded it meanwhile
}

/** Loads the fused module from `image` (loadFusedModule's synchronous last step). */
export function loadFusedImage(device: Device, image: Uint8Array): void {
  FUSED_MODULE.load(device, image);
}

/** Whether the fused module is loaded on `device` (always true on the CPU). */
export function fusedModuleLoaded(device: Device): boolean {
  return FUSED_MODULE.loaded(device);
}

/** The fused kernel `name` with parameters `args` (cached per device); the module comes back after a recovery. */
export function fusedKernel(device: Device, name: string, args: readonly ArgType[] = FUSED_ARGS): Kernel {
  const key = KERNEL_KEY + name;
  let k = device.cache.get(key) as Kernel | undefined;
  if (!k || k.module.closed) {
    k = FUSED_MODULE.module(device).kernel(name, args);
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
