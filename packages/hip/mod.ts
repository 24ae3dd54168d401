/**
 * @normkit/hip: normkit's kernels for AMD GPUs, one code object per target (gfx90a: MI200, gfx942: MI300,
 * gfx1100: RDNA3), each gzip-compressed. A device reads only its own target's.
 *
 * ```ts
 * import { Device, loadKernels } from "@normkit/normkit";
 * using dev = Device.open({ backend: "hip" });
 * await loadKernels(dev, { images: await import("@normkit/hip") });
 * ```
 * The image is read when loadKernels needs it (Deno: --allow-read for a local copy, --allow-net=jsr.io from JSR).
 * Use the version of @normkit/normkit it was published with: loadKernels refuses images built from other sources.
 * @module
 */
import { TARGETS } from "./build.ts";
export { sourceSha256, TARGETS } from "./build.ts";

/** The code object (gzip) by target, beside this module. */
export const images: Readonly<Record<string, { readonly href: string }>> = Object.freeze(
  Object.fromEntries(TARGETS.map((t) => [t, new URL(`./norm_${t}.hsaco.gz`, import.meta.url)])),
);
