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

/** Seeded uniform random numbers in [lo, hi) (mulberry32): reproducible, never all zeros. */
export function randoms(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  let a = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = lo + (((t ^ (t >>> 14)) >>> 0) / 4294967296) * (hi - lo);
  }
  return out;
}
