/** The precompiled norm module, loaded once per device from the embedded fatbin, with prepared kernels. */
import { NORM_FATBIN } from "../precompiled/norm_cuda.ts";
import type { Device } from "../runtime/device.ts";
import type { ArgType, Kernel, Module } from "../runtime/module.ts";

/** Parameter list shared by every forward norm kernel (kernels/norm_fwd.cuh, NK_FWD_PARAMS). */
export const NORM_FWD_ARGS: readonly ArgType[] = [
  "ptr", "ptr", "ptr", "ptr", "ptr", "ptr", // x, y, weight, bias, mean, rstd
  "i32", "i32", "i64", "i64", "f32", //         rows, d, x_stride, y_stride, eps
  "i32", "i32", //                              tpr, nv (from the plan)
];

let fatbin: Uint8Array | undefined;
function fatbinBytes(): Uint8Array {
  // Decoded once per process; embedded as base64 so that importing by URL needs no file reads.
  return (fatbin ??= Uint8Array.from(atob(NORM_FATBIN), (c) => c.charCodeAt(0)));
}

/** The norm module of `device`, loaded on first use and closed with the device. */
export function normModule(device: Device): Module {
  let mod = device.cache.get("normkit.norm.module") as Module | undefined;
  if (!mod || mod.closed) {
    mod = device.loadModule(fatbinBytes());
    device.cache.set("normkit.norm.module", mod);
  }
  return mod;
}

/** A prepared kernel of the norm module (one argument block per kernel name and device). */
export function normKernel(device: Device, name: string, args: readonly ArgType[]): Kernel {
  const key = `normkit.norm.kernel.${name}`;
  let k = device.cache.get(key) as Kernel | undefined;
  if (!k || k.module.closed) {
    k = normModule(device).kernel(name, args);
    device.cache.set(key, k);
  }
  return k;
}
