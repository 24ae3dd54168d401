/**
 * The precompiled norm modules of a device, the forward kernels' and the backward ones': loaded by loadKernels() from
 * the images of the device's own architecture (ops/images.ts), with prepared kernels, and the device limits the plan
 * uses. The one place that tells backends apart.
 */
import { Device } from "../runtime/device.ts";
import type { DeviceInfo } from "../runtime/driver.ts";
import { ArgumentError, DisposedError, UnsupportedError } from "../runtime/errors.ts";
import { optionKeys, refuseUnknownKeys } from "../runtime/options.ts";
import type { ArgType, Kernel, Module } from "../runtime/module.ts";
import { imageChoice, imageSets, type KernelImageSet } from "./images.ts";
import { loadFusedModule } from "./fused_module.ts";
import { ModuleSlot } from "./module_slot.ts";
import type { PlanLimits } from "./plan.ts";
import type { BwdLimits } from "./plan_bwd.ts";

/** Parameter list shared by every forward norm kernel (kernels/norm_fwd.cuh, NK_FWD_PARAMS). */
export const NORM_FWD_ARGS: readonly ArgType[] = [
  "ptr",
  "ptr",
  "ptr",
  "ptr",
  "ptr",
  "ptr", // x, y, weight, bias, mean, rstd
  "i32",
  "i32",
  "i64",
  "i64",
  "f32", //         rows, d, x_stride, y_stride, eps
  "i32",
  "i32",
  "i32", //                       tpr, nv, prefetch (from the plan)
];

/** Options of loadKernels. */
export interface LoadKernelsOptions {
  /**
   * Images beyond the SASS normkit ships (sm_80, sm_90), searched first: `await import("@normkit/ptx")` for GPUs
   * newer than sm_90, `await import("@normkit/hip")` for AMD GPUs, or a KernelImageSet of your own (a bundle's).
   */
  images?: KernelImageSet | readonly KernelImageSet[];
  /**
   * Also load the backward kernels (layerNormBackward, rmsNormBackward, the modules' backward): an image of their own,
   * found as the forward kernels' is (`images` as above: their `backward` images). Default false: a program that
   * computes no gradient never reads it.
   */
  backward?: boolean;
  /**
   * Also load the fused kernels of a float y (residual add, head views, batchInvariant, the backward's dResidual): an
   * image of their own, found as the norm kernels' is (`images` as above: their `fused` images). Default false: a
   * program that never calls them never reads it.
   */
  fused?: boolean;
  /**
   * Also load the fused kernels of a quantized y (`quant`: fp8 and int8 outputs), with those of `fused`: a second image
   * (the `fusedQuant` images of `images`), about three quarters of the fused kernels' bytes. Default false.
   */
  quant?: boolean;
}

const LOAD_KEYS = optionKeys(...(["images", "backward", "fused", "quant"] satisfies (keyof LoadKernelsOptions)[]));

// A sanity check Device.open() could not run before the kernels were loaded (ops/diag_sanity.ts puts it here).
const PENDING_SANITY_KEY = "normkit.norm.pendingSanityCheck";

/**
 * Makes the norm kernels of `device` ready: reads the image of the device's own architecture (SASS sm_80 for
 * compute capability 8.x, SASS sm_90 for 9.x, the PTX of `@normkit/ptx` for newer GPUs, the code object of
 * `@normkit/hip` for an AMD GPU) and loads it; then runs the sanity check Device.open() deferred. Needed once per
 * GPU device before the first norm (a norm before it throws UnsupportedError); a no-op on the CPU and when
 * already loaded. Reading needs --allow-read under Deno for a local copy, --allow-net for one imported by URL or
 * from JSR (docs/loading.md).
 *
 * @example
 * ```ts
 * import { Device, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);                                              // CUDA sm_80/sm_90, or CPU
 * await loadKernels(dev, { images: await import("@normkit/hip") });    // AMD GPUs
 * await loadKernels(dev, { backward: true }); // the backward kernels too (layerNormBackward, rmsNormBackward)
 * await loadKernels(dev, { fused: true });   // the fused kernels (residual add, head views, batchInvariant)
 * await loadKernels(dev, { quant: true });   // those and the fused kernels of fp8 and int8 outputs
 * ```
 */
export async function loadKernels(device: Device, options?: LoadKernelsOptions): Promise<void> {
  if (!Device.isDevice(device)) throw new ArgumentError("device", "a Device (Device.open())", device);
  if (device.closed) throw new DisposedError("device");
  if (options !== undefined && (typeof options !== "object" || options === null)) {
    throw new ArgumentError("options", "an object { images?, backward?, fused?, quant? }", options);
  }
  if (options !== undefined) refuseUnknownKeys(options, LOAD_KEYS);
  const images = imageSets(options?.images); // refuses a bad option on the CPU too
  const backward = options?.backward, fused = options?.fused, quant = options?.quant;
  for (const [name, v] of [["backward", backward], ["fused", fused], ["quant", quant]] as const) {
    if (v !== undefined && typeof v !== "boolean") throw new ArgumentError(name, "a boolean", v);
  }
  // The quantized image first: where it is missing, the error names { quant: true } (the call that needs it).
  if (quant) await loadFusedModule(device, images, "fusedQuant");
  if (fused || quant) await loadFusedModule(device, images, "fused");
  if (backward) await BACKWARD_MODULE.loadFrom(device, images, "backward");
  if (normModuleLoaded(device)) return; // true on the CPU: there is nothing to load
  await NORM_MODULE.loadFrom(device, images, "norm");
  const pending = device.cache.get(PENDING_SANITY_KEY) as ((d: Device) => void) | undefined;
  if (pending) {
    device.cache.delete(PENDING_SANITY_KEY);
    try {
      pending(device);
    } catch (e) {
      // A module that fails the check is not kept: the norms refuse to run rather than give wrong results.
      NORM_MODULE.drop(device);
      throw e;
    }
  }
}

/**
 * @internal Loads `image` (what kernelImage(device) reads) as `device`'s norm module, synchronously, unless one is
 * loaded: loadKernels' last step, and for tests whose workflows are synchronous (the fault-injection sweep).
 */
export function loadNormModule(device: Device, image: Uint8Array): void {
  NORM_MODULE.load(device, image);
}

/**
 * @internal Loads `image` (what kernelImage(device, { kind: "backward" }) reads) as `device`'s backward module,
 * synchronously, unless one is loaded: for tests whose workflows are synchronous (the fault-injection sweep).
 */
export function loadBackwardImage(device: Device, image: Uint8Array): void {
  BACKWARD_MODULE.load(device, image);
}

/** Whether `device`'s norm module is loaded (on the CPU: there is none to load). */
export function normModuleLoaded(device: Device): boolean {
  return NORM_MODULE.loaded(device);
}

/** @internal ops/diag_sanity.ts: run `check` at the end of the loadKernels() that loads `device`'s module. */
export function deferSanityCheck(device: Device, check: (d: Device) => void): void {
  device.cache.set(PENDING_SANITY_KEY, check);
}

/** The device limits the launch plan depends on. Clusters are an NVIDIA (sm_90+) feature: ccMajor 0 elsewhere. */
export function planLimits(device: { readonly backend: string; readonly info: DeviceInfo }): PlanLimits {
  const i = device.info;
  return {
    maxGridX: i.maxGridDim[0],
    maxThreadsPerBlock: i.maxThreadsPerBlock,
    warpSize: i.warpSize, // 32 on NVIDIA and RDNA (gfx11), 64 on CDNA (gfx9)
    ccMajor: device.backend === "cuda" ? i.computeCapability[0] : 0,
    multiprocessors: i.multiprocessors,
  };
}

/** The device limits the backward plan depends on (clusters, as above, only on CUDA sm_90+). */
export function bwdPlanLimits(device: { readonly backend: string; readonly info: DeviceInfo }): BwdLimits {
  const i = device.info;
  return {
    maxThreadsPerBlock: i.maxThreadsPerBlock,
    warpSize: i.warpSize,
    maxSharedPerBlockOptin: i.maxSharedPerBlockOptin,
    ccMajor: device.backend === "cuda" ? i.computeCapability[0] : 0,
    // Non-portable clusters of 16 CTAs: Hopper has them (and they were measured there); portable 8 elsewhere.
    maxCluster: device.backend === "cuda" && i.computeCapability[0] === 9 ? 16 : 8,
  };
}

/** The device-cache key of the norm module (normModule). */
export const MODULE_KEY = "normkit.norm.module";

/**
 * The norm module of `device`: the one loadKernels() loaded (again from the same image after device.recover());
 * UnsupportedError saying to call it when it has not run for this device.
 */
export function normModule(device: Device): Module {
  return NORM_MODULE.module(device);
}

const NORM_MODULE = new ModuleSlot(MODULE_KEY, (device) => {
  imageChoice(device); // a device normkit has no image for: say so rather than "not loaded"
  throw new UnsupportedError(
    `the norm kernels of ${device.info.name} are not loaded: \`await loadKernels(dev)\` once after Device.open() ` +
      `(docs/loading.md)`,
  );
});

const BACKWARD_MODULE = new ModuleSlot("normkit.normBackward.module", (device) => {
  imageChoice(device);
  throw new UnsupportedError(
    `the backward kernels of ${device.info.name} are not loaded: \`await loadKernels(dev, { backward: true })\` ` +
      `once after Device.open(), with \`images\` where the device needs @normkit/ptx or @normkit/hip (docs/loading.md)`,
  );
});

/**
 * The backward module of `device` (loaded, or again from its image after a recovery); UnsupportedError naming
 * `loadKernels(dev, { backward: true })` where it never was: the backward checks it before it allocates or launches.
 */
export function backwardModule(device: Device): Module {
  return BACKWARD_MODULE.module(device);
}

/** Whether kernel `name` is in the backward image (nk_{ln|rms}_bwd_*, nk_bwd_finalize_*; kernels/norm.cu). */
export function isBackwardKernel(name: string): boolean {
  return /^nk_(bwd_finalize_|(ln|rms)_bwd_)/.test(name);
}

/** device.cache keys of the kernels normkit launches (the norm and the fused ones): setDependentLaunch updates them. */
export const KERNEL_KEY = "normkit.norm.kernel.";
const DEPENDENT_KEY = "normkit.norm.dependentLaunch";

/**
 * A prepared kernel of the norm modules (one argument block per kernel name and device): the backward module's for a
 * backward kernel (isBackwardKernel), else the forward one's.
 */
export function normKernel(device: Device, name: string, args: readonly ArgType[]): Kernel {
  const key = KERNEL_KEY + name;
  let k = device.cache.get(key) as Kernel | undefined;
  if (!k || k.module.closed) {
    k = (isBackwardKernel(name) ? backwardModule(device) : normModule(device)).kernel(name, args);
    k.dependentLaunch = launchesDependent(device, name);
    device.cache.set(key, k);
  }
  return k;
}

/**
 * The kernels launched with programmatic dependent launch when it is on: the forward kernels, whose small-batch
 * launches it measurably speeds up (H200: 0.21–0.37 µs less per op in graphs, 0.5–0.9 µs less per back-to-back
 * eager op in C; bandwidth runs unchanged within noise). Not the backward and finalize kernels: they can take
 * it (they wait first; tests/unit/dependent_launch.test.ts checks the source), but it gained nothing there and
 * measured 1.6% slower (median of the grid, one run), so they launch plainly.
 */
export function dependentLaunchByDefault(name: string): boolean {
  // Every nk_{ln|rms}_* kernel but the backward nk_{ln|rms}_bwd_*, and the fused forward nk_fused_{ln|rms}_* (which
  // wait as the forward kernels do; not yet measured apart).
  return /^nk_(fused_)?(ln|rms)_(?!bwd_)/.test(name);
}

/**
 * Whether normkit launches with programmatic dependent launch on `device`: where the sm_90 SASS runs (compute
 * capability 9.0; the sm_80 SASS has no griddepcontrol instructions). The compute_90 PTX that newer GPUs
 * JIT-compile has them, but dependent launch has been measured on 9.0 only, so it stays off there.
 */
export function dependentLaunchSupported(device: { readonly backend: string; readonly info: DeviceInfo }): boolean {
  const [major, minor] = device.info.computeCapability;
  return device.backend === "cuda" && major === 9 && minor === 0;
}

/** Whether normkit launches kernel `name` on `device` with programmatic dependent launch now. */
export function launchesDependent(device: Device, name: string): boolean {
  return dependentLaunchSupported(device) && device.cache.get(DEPENDENT_KEY) !== false &&
    dependentLaunchByDefault(name);
}

/**
 * Turns programmatic dependent launch of normkit's forward kernels on (the default where supported: CUDA devices
 * of compute capability 9.0) or off for `device`. On, a norm may be scheduled while the previous kernel of its
 * stream still runs, and waits on the device for it: the launch gap between small kernels is hidden (eager
 * launches and graphs alike). Results are the same either way; off is for measuring the difference.
 * Returns whether it is on afterwards (false where unsupported, whatever was asked).
 */
export function setDependentLaunch(device: Device, on: boolean): boolean {
  if (typeof on !== "boolean") throw new ArgumentError("on", "a boolean", on);
  device.cache.set(DEPENDENT_KEY, on);
  for (const [key, k] of device.cache) {
    if (key.startsWith(KERNEL_KEY) && !(k as Kernel).module.closed) {
      (k as Kernel).dependentLaunch = launchesDependent(device, (k as Kernel).name);
    }
  }
  return dependentLaunchSupported(device) && on;
}
