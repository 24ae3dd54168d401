/** Test helpers: GPU detection with a visible skip reason, seeded random data. */
import { test } from "node:test";
import { Device } from "../mod.ts";

/** Why GPU tests cannot run here, or undefined when a CUDA device is present. */
export const noGpuReason: string | undefined = (() => {
  try {
    return Device.cudaDeviceCount() > 0 ? undefined : "no CUDA device";
  } catch (e) {
    return `no CUDA driver (${e instanceof Error ? e.message : e})`;
  }
})();

if (noGpuReason) console.log(`# GPU tests SKIPPED: ${noGpuReason}`);

/** A test that needs a CUDA device; without one it is reported as skipped, with the reason in its name. */
export function gpuTest(name: string, fn: () => void | Promise<void>): void {
  if (noGpuReason) test(`${name} [skipped: ${noGpuReason}]`, { skip: noGpuReason }, () => {});
  else test(name, fn);
}

export { randoms, roundedTo } from "./random.ts";
