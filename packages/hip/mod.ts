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
import { fusedSourceSha256, TARGETS } from "./build.ts";
export { sourceSha256, TARGETS } from "./build.ts";

/** The code object (gzip) by target, beside this module. */
export const images: Readonly<Record<string, { readonly href: string }>> = Object.freeze(
  Object.fromEntries(TARGETS.map((t) => [t, new URL(`./norm_${t}.hsaco.gz`, import.meta.url)])),
);

/** A set of fused code objects as loadKernels' `images` option takes it: the fused sources' hash and a file per target. */
export interface FusedImageSet {
  /** sha256 of the fused kernel sources the images were compiled from (FUSED_SOURCE_SHA256 of the same normkit). */
  readonly sourceSha256: string;
  /** The image by target, a file beside this module. */
  readonly images: Readonly<Record<string, { readonly href: string }>>;
}
/** The set of `<prefix>_<target>.hsaco.gz` beside this module, one per target of {@link TARGETS}. */
const fusedSet = (prefix: string): FusedImageSet =>
  Object.freeze({
    sourceSha256: fusedSourceSha256,
    images: Object.freeze(
      Object.fromEntries(TARGETS.map((t) => [t, new URL(`./${prefix}_${t}.hsaco.gz`, import.meta.url)])),
    ),
  });

/**
 * The fused kernels of a float y (residual add, head views: kernels/fused.cu) as a set of their own, shaped as
 * loadKernels' `images` option: `sourceSha256` is the sha256 of the fused sources they were compiled from
 * (FUSED_SOURCE_SHA256 of the same normkit), `images` the code object (gzip) by target, beside this module, one per
 * target of {@link TARGETS}. Read only when fused kernels are loaded.
 */
export const fused: FusedImageSet = fusedSet("fused");

/** The fused kernels of a quantized y (fp8 and int8 outputs), as `fused`: read only by `loadKernels(dev, { quant })`. */
export const fusedQuant: FusedImageSet = fusedSet("fused_quant");
