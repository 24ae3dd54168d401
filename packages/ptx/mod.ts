/**
 * @normkit/ptx: the PTX (compute_90) of normkit's kernels, for NVIDIA GPUs newer than sm_90 (compute capability
 * 10.0 and later), where the driver compiles it at the first load of a process. GPUs of compute capability 8.x and
 * 9.x run the SASS that @normkit/normkit ships and do not need this package.
 *
 * ```ts
 * import { Device, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { images: await import("@normkit/ptx") });
 * await loadKernels(dev, { backward: true, images: await import("@normkit/ptx") }); // with the backward kernels
 * await loadKernels(dev, { fused: true, images: await import("@normkit/ptx") }); // with the fused kernels
 * await loadKernels(dev, { quant: true, images: await import("@normkit/ptx") }); // and the quantized ones
 * ```
 * Each image is read when loadKernels needs it (Deno: --allow-read for a local copy, --allow-net=jsr.io from JSR).
 * Use the version of @normkit/normkit it was published with: loadKernels refuses images built from other sources.
 * @module
 */
import { fusedSourceSha256 } from "./fused_build.ts";
import { sourceSha256 } from "./build.ts";
export { sourceSha256 };

/** The image by target: a fatbin holding the compute_90 PTX of the forward kernels (one compressed entry). */
export const images: Readonly<Record<string, { readonly href: string }>> = Object.freeze({
  compute_90: new URL("./norm_compute90.fatbin", import.meta.url),
});

/** An image set as loadKernels' `images` option takes it: the hash of its kernel sources and the PTX by target. */
export interface ImageSet {
  /** sha256 of the kernel sources the images were compiled from (as the same normkit's NORM_ or FUSED_SOURCE_SHA256). */
  readonly sourceSha256: string;
  /** The image by target, a file beside this module. */
  readonly images: Readonly<Record<string, { readonly href: string }>>;
}
/** The set of `<prefix>_compute90.fatbin` beside this module, compiled from the sources of `sha`. */
const imageSet = (prefix: string, sha: string): ImageSet =>
  Object.freeze({
    sourceSha256: sha,
    images: Object.freeze({ compute_90: new URL(`./${prefix}_compute90.fatbin`, import.meta.url) }),
  });

/**
 * The image of the backward kernels (`loadKernels(dev, { backward: true, images })`), compiled from the same sources as
 * `images`.
 */
export const backward: ImageSet = imageSet("norm_bwd", sourceSha256);

/**
 * The image of the fused kernels of a float y (residual add, head views: `loadKernels(dev, { fused: true, images })`),
 * the compute_90 PTX of kernels/fused.cu, with the hash of its own sources.
 */
export const fused: ImageSet = imageSet("fused", fusedSourceSha256);

/**
 * The image of the fused kernels of a quantized y (fp8 and int8 outputs: `loadKernels(dev, { quant: true, images })`),
 * as `fused`.
 */
export const fusedQuant: ImageSet = imageSet("fused_quant", fusedSourceSha256);
