/**
 * @normkit/hip: normkit's kernels for AMD GPUs, code objects per target (gfx90a: MI200, gfx942: MI300, gfx1100:
 * RDNA3), each gzip-compressed. A device reads only its own target's, and only the kernels it is asked to load.
 *
 * ```ts
 * import { Device, loadKernels } from "@normkit/normkit";
 * using dev = Device.open({ backend: "hip" });
 * await loadKernels(dev, { images: await import("@normkit/hip") });
 * await loadKernels(dev, { backward: true, images: await import("@normkit/hip") }); // with the backward kernels
 * ```
 * Each image is read when loadKernels needs it (Deno: --allow-read for a local copy, --allow-net=jsr.io from JSR).
 * Use the version of @normkit/normkit it was published with: loadKernels refuses images built from other sources.
 * @module
 */
import { fusedSourceSha256, sourceSha256, TARGETS } from "./build.ts";
export { sourceSha256, TARGETS };

/** An image set as loadKernels' `images` option takes it: the hash of its kernel sources and a file per target. */
export interface ImageSet {
  /** sha256 of the kernel sources the images were compiled from (as the same normkit's NORM_ or FUSED_SOURCE_SHA256). */
  readonly sourceSha256: string;
  /** The image by target, a file beside this module. */
  readonly images: Readonly<Record<string, { readonly href: string }>>;
}
/** `<prefix>_<target>.hsaco.gz` beside this module, one per target of {@link TARGETS}. */
const filesOf = (prefix: string): Readonly<Record<string, { readonly href: string }>> =>
  Object.freeze(Object.fromEntries(TARGETS.map((t) => [t, new URL(`./${prefix}_${t}.hsaco.gz`, import.meta.url)])));

/** The code object (gzip) of the forward kernels by target, beside this module. */
export const images: Readonly<Record<string, { readonly href: string }>> = filesOf("norm");

/**
 * The backward kernels (`loadKernels(dev, { backward: true, images })`), compiled from the same sources as `images`:
 * read only when they are loaded.
 */
export const backward: ImageSet = Object.freeze({ sourceSha256, images: filesOf("norm_bwd") });

/**
 * The fused kernels of a float y (residual add, head views: kernels/fused.cu) as a set of their own, shaped as
 * loadKernels' `images` option: `sourceSha256` is the sha256 of the fused sources they were compiled from
 * (FUSED_SOURCE_SHA256 of the same normkit), `images` the code object (gzip) by target, beside this module, one per
 * target of {@link TARGETS}. Read only when fused kernels are loaded.
 */
export const fused: ImageSet = Object.freeze({ sourceSha256: fusedSourceSha256, images: filesOf("fused") });

/** The fused kernels of a quantized y (fp8 and int8 outputs), as `fused`: read only by `loadKernels(dev, { quant })`. */
export const fusedQuant: ImageSet = Object.freeze({ sourceSha256: fusedSourceSha256, images: filesOf("fused_quant") });
