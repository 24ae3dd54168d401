/**
 * The precompiled norm module, loaded once per device (the embedded fatbin on CUDA, the device's code object on
 * HIP), with prepared kernels, and the device limits the plan uses. The one place that tells backends apart.
 */
import { NORM_FATBIN } from "../precompiled/norm_cuda.ts";
import { decodeBase64 } from "../runtime/base64.ts";
import type { Device } from "../runtime/device.ts";
import type { DeviceInfo } from "../runtime/driver.ts";
import { ArgumentError, UnsupportedError } from "../runtime/errors.ts";
import type { ArgType, Kernel, Module } from "../runtime/module.ts";
import { hipCodeObject, hsacoTarget, loadHipCodeObjects } from "./hip_module.ts";
import type { PlanLimits } from "./plan.ts";
import type { BwdLimits } from "./plan_bwd.ts";

/** Parameter list shared by every forward norm kernel (kernels/norm_fwd.cuh, NK_FWD_PARAMS). */
export const NORM_FWD_ARGS: readonly ArgType[] = [
  "ptr", "ptr", "ptr", "ptr", "ptr", "ptr", // x, y, weight, bias, mean, rstd
  "i32", "i32", "i64", "i64", "f32", //         rows, d, x_stride, y_stride, eps
  "i32", "i32", "i32", //                       tpr, nv, prefetch (from the plan)
];

let fatbin: Uint8Array | undefined;
function fatbinBytes(): Uint8Array {
  // Decoded once per process; embedded as base64 so that importing by URL needs no file reads.
  return (fatbin ??= decodeBase64(NORM_FATBIN));
}

/** The image of the norm module for `device`'s backend and target. */
function moduleImage(device: Device): Uint8Array {
  switch (device.backend) {
    case "cuda":
      return fatbinBytes();
    case "hip":
      return hipCodeObject(hsacoTarget(device.info));
    default:
      throw new UnsupportedError(`the ${device.backend} backend has no kernel module`);
  }
}

/**
 * Makes the norm kernels of `device` ready: on HIP imports the AMD code objects (on demand, so that CUDA and CPU
 * users never load them) and loads the device's; on CUDA loads the fatbin now rather than at the first launch;
 * nothing on the CPU. Needed once per HIP device before layerNorm/rmsNorm; harmless anywhere.
 */
export async function loadKernels(device: Device): Promise<void> {
  if (device.backend === "cpu") return;
  // Refuse an unsupported AMD target before importing 5.3 MB for nothing.
  if (device.backend === "hip") {
    hsacoTarget(device.info);
    await loadHipCodeObjects();
  }
  normModule(device);
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

/** The norm module of `device`, loaded on first use and closed with the device. */
export function normModule(device: Device): Module {
  let mod = device.cache.get(MODULE_KEY) as Module | undefined;
  if (!mod || mod.closed) {
    mod = device.loadModule(moduleImage(device));
    device.cache.set(MODULE_KEY, mod);
  }
  return mod;
}

const KERNEL_KEY = "normkit.norm.kernel.";
const DEPENDENT_KEY = "normkit.norm.dependentLaunch";

/** A prepared kernel of the norm module (one argument block per kernel name and device). */
export function normKernel(device: Device, name: string, args: readonly ArgType[]): Kernel {
  const key = KERNEL_KEY + name;
  let k = device.cache.get(key) as Kernel | undefined;
  if (!k || k.module.closed) {
    k = normModule(device).kernel(name, args);
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
  return /^nk_(ln|rms)_(?!bwd_)/.test(name); // every nk_{ln|rms}_* kernel but the backward nk_{ln|rms}_bwd_*
}

/**
 * Whether the code the fatbin gives `device` has the griddepcontrol instructions: only the sm_90 SASS does
 * (the sm_80 SASS that runs on 8.x, and the compute_80 PTX that newer GPUs JIT-compile, do not).
 */
export function dependentLaunchSupported(device: { readonly backend: string; readonly info: DeviceInfo }): boolean {
  const [major, minor] = device.info.computeCapability;
  return device.backend === "cuda" && major === 9 && minor === 0;
}

/** Whether normkit launches kernel `name` on `device` with programmatic dependent launch now. */
function launchesDependent(device: Device, name: string): boolean {
  return dependentLaunchSupported(device) && device.cache.get(DEPENDENT_KEY) !== false && dependentLaunchByDefault(name);
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
