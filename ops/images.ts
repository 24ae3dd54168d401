/**
 * The kernel images: which one a device needs (a pure choice, by a table), where it lies, and reading it.
 *
 * normkit ships the SASS for sm_80 and sm_90 (precompiled/norm_sm80.fatbin, norm_sm90.fatbin; the backward kernels in
 * norm_bwd_sm80.fatbin and norm_bwd_sm90.fatbin, the fused ones in fused_* and fused_quant_*). The compute_90 PTX
 * (JIT-compiled by the driver on GPUs newer than sm_90) and the AMD code objects are packages of their own,
 * @normkit/ptx and @normkit/hip, that the user hands to loadKernels(): most users never download them. An image is
 * a binary file read when a device needs it, never at import: a file: URL through the runtime's readFile (Deno:
 * --allow-read), an http(s): URL through fetch (Deno: --allow-net). docs/loading.md gives the measurements behind
 * this choice and the permissions of each way of importing.
 */
import { NORM_BWD_CUDA_IMAGES, NORM_CUDA_IMAGES, NORM_SOURCE_SHA256 } from "../precompiled/norm_cuda.ts";
import { FUSED_CUDA_IMAGES, FUSED_QUANT_CUDA_IMAGES, FUSED_SOURCE_SHA256 } from "../precompiled/fused_cuda.ts";
import { ffi } from "../ffi/runtime.ts";
import type { DeviceInfo } from "../runtime/driver.ts";
import { ArgumentError, UnsupportedError } from "../runtime/errors.ts";
import { hsacoTarget } from "./hip_module.ts";

/**
 * A set of kernel images by target, such as the module namespace of `@normkit/ptx` or `@normkit/hip`
 * (`await import("@normkit/hip")` is one), or images the user placed elsewhere (a bundle's folder).
 *
 * @example
 * ```ts
 * import { Device, loadKernels } from "@normkit/normkit";
 * import { NORM_SOURCE_SHA256 } from "@normkit/normkit/gpu";
 * using dev = Device.open();
 * await loadKernels(dev, { images: await import("@normkit/hip") });
 * // Images copied beside a bundle (bun build rewrites import.meta.url to the bundle's):
 * await loadKernels(dev, {
 *   images: { sourceSha256: NORM_SOURCE_SHA256, images: { sm_90: new URL("./norm_sm90.fatbin", import.meta.url) } },
 * });
 * ```
 */
export interface KernelImageSet extends ImageFiles {
  /** sha256 of the kernel sources the images were compiled from: must equal this normkit's NORM_SOURCE_SHA256. */
  readonly sourceSha256: string;
  /**
   * The backward kernels' images (`loadKernels(dev, { backward: true, images })`), compiled from the same sources as the
   * forward ones (`sourceSha256` equal to NORM_SOURCE_SHA256). `@normkit/ptx` and `@normkit/hip` have them.
   */
  readonly backward?: ImageFiles;
  /**
   * The fused kernels' images (`loadKernels(dev, { fused: true, images })`), with the hash of their own sources,
   * which must equal FUSED_SOURCE_SHA256. `@normkit/ptx` and `@normkit/hip` have them.
   */
  readonly fused?: ImageFiles;
  /** The images of the fused kernels of a quantized y (`loadKernels(dev, { quant: true, images })`), as `fused`. */
  readonly fusedQuant?: ImageFiles;
}

/** Images by target and the hash of the sources they were compiled from (one set of kernels: norm or fused). */
export interface ImageFiles {
  /** sha256 (hex) of the kernel sources the images were compiled from. */
  readonly sourceSha256: string;
  /**
   * Image by target ("sm_80", "sm_90", "compute_90", "gfx90a", "gfx942", "gfx1100"): a URL (file:, http:, https:;
   * a URL object or its href) or the bytes (a fatbin or a code object, optionally gzip-compressed).
   */
  readonly images: Readonly<Record<string, ImageSource>>;
}

/**
 * Which kernels an image holds: the norm kernels (forward and diagnostics), their backward, the fused ones of a float y
 * (and the residual gradient's add), or the fused ones of a quantized y.
 */
export type ImageKind = "norm" | "backward" | "fused" | "fusedQuant";

/** Where an image is: a URL (anything with an `href`, such as a URL object, or the href itself), or its bytes. */
export type ImageSource = { readonly href: string } | string | Uint8Array;

/** What a device runs: the target of its image, and the package that has it. */
export interface ImageChoice {
  /** "sm_80", "sm_90" or "compute_90" (CUDA), or the gfx target (HIP). */
  readonly target: string;
  /** Where that image is published: normkit itself, or the PTX or AMD package the user hands to loadKernels. */
  readonly package: "@normkit/normkit" | "@normkit/ptx" | "@normkit/hip";
  /** Whether the driver JIT-compiles it at load (PTX: a one-time cost at the first loadKernels of a process). */
  readonly jit: boolean;
}

/**
 * CUDA images by compute capability (a SASS image runs on GPUs of its major version with an equal or higher
 * minor one; PTX on any later GPU, compiled by the driver at load). Below 8.0: unsupported.
 *
 * | compute capability | image               | package          |
 * |--------------------|---------------------|------------------|
 * | 8.x                | SASS sm_80          | @normkit/normkit |
 * | 9.x                | SASS sm_90          | @normkit/normkit |
 * | 10.0 and newer     | PTX compute_90, JIT | @normkit/ptx     |
 */
export const CUDA_IMAGE_TABLE: readonly { readonly major: number; readonly choice: ImageChoice }[] = Object.freeze([
  { major: 8, choice: { target: "sm_80", package: "@normkit/normkit", jit: false } },
  { major: 9, choice: { target: "sm_90", package: "@normkit/normkit", jit: false } },
]);
const PTX_CHOICE: ImageChoice = { target: "compute_90", package: "@normkit/ptx", jit: true };

/** The image a device runs, by CUDA_IMAGE_TABLE (CUDA) or hsacoTarget (HIP); UnsupportedError for other devices. */
export function imageChoice(device: { readonly backend: string; readonly info: DeviceInfo }): ImageChoice {
  const info = device.info;
  if (device.backend === "hip") return { target: hsacoTarget(info), package: "@normkit/hip", jit: false };
  if (device.backend !== "cuda") throw new UnsupportedError(`the ${device.backend} backend has no kernel images`);
  const [major, minor] = info.computeCapability;
  const row = CUDA_IMAGE_TABLE.find((r) => r.major === major);
  if (row) return row.choice;
  if (major > CUDA_IMAGE_TABLE[CUDA_IMAGE_TABLE.length - 1].major) return PTX_CHOICE;
  throw new UnsupportedError(
    `${info.name} has compute capability ${major}.${minor}; normkit's kernels need 8.0 or newer (Ampere and later)`,
  );
}

/** The images normkit itself ships (SASS sm_80 and sm_90), of the norm kernels, their backward and the fused ones. */
export const BUILTIN_IMAGES: KernelImageSet = Object.freeze({
  sourceSha256: NORM_SOURCE_SHA256,
  images: NORM_CUDA_IMAGES,
  backward: Object.freeze({ sourceSha256: NORM_SOURCE_SHA256, images: NORM_BWD_CUDA_IMAGES }),
  fused: Object.freeze({ sourceSha256: FUSED_SOURCE_SHA256, images: FUSED_CUDA_IMAGES }),
  fusedQuant: Object.freeze({ sourceSha256: FUSED_SOURCE_SHA256, images: FUSED_QUANT_CUDA_IMAGES }),
});

const SOURCE_SHA256: Readonly<Record<ImageKind, string>> = {
  norm: NORM_SOURCE_SHA256,
  backward: NORM_SOURCE_SHA256,
  fused: FUSED_SOURCE_SHA256,
  fusedQuant: FUSED_SOURCE_SHA256,
};
const filesOf = (set: KernelImageSet, kind: ImageKind): ImageFiles | undefined => kind === "norm" ? set : set[kind];
/** Each kind in messages: the image's name and the loadKernels option that loads it. */
const KIND_TEXT: Readonly<Record<ImageKind, { image: string; what: string; call: string }>> = {
  norm: { image: "", what: "normkit's kernels", call: "{ images: " },
  backward: { image: "backward ", what: "the backward kernels", call: "{ backward: true, images: " },
  fused: { image: "fused ", what: "the fused kernels", call: "{ fused: true, images: " },
  fusedQuant: { image: "fused quant ", what: "the quantized fused kernels", call: "{ quant: true, images: " },
};

/**
 * Where the `kind` image for `choice` is: the first of `sets` that has its target, then normkit's own; UnsupportedError
 * naming the package to hand over when none has it, or when the set that has it was built from other sources.
 */
export function findImage(
  choice: ImageChoice,
  sets: readonly KernelImageSet[],
  device: string,
  kind: ImageKind = "norm",
): ImageSource {
  const expected = SOURCE_SHA256[kind];
  for (const set of [...sets, BUILTIN_IMAGES]) {
    const files = filesOf(set, kind);
    if (!files || !Object.hasOwn(files.images, choice.target)) continue;
    if (files.sourceSha256 !== expected) {
      throw new UnsupportedError(
        `the ${KIND_TEXT[kind].image}${choice.target} image given to loadKernels was built from other ` +
          `kernel sources (sha256 ${String(files.sourceSha256).slice(0, 12)}…) than this normkit ` +
          `(${expected.slice(0, 12)}…): use ${choice.package} of the same version as @normkit/normkit`,
      );
    }
    return files.images[choice.target];
  }
  const { what, call } = KIND_TEXT[kind];
  throw new UnsupportedError(
    `${device} runs ${what} from the ${choice.target} image, which is in the package ${choice.package}: ` +
      `\`await loadKernels(dev, ${call}await import("${choice.package}") })\` (docs/loading.md)`,
  );
}

/** Checks loadKernels' `images` option: one KernelImageSet or an array of them (undefined: none). */
export function imageSets(images: unknown): readonly KernelImageSet[] {
  if (images === undefined) return [];
  return (Array.isArray(images) ? images : [images]).map((given) => {
    // Each field read once, into the snapshot that is checked and then used.
    const set = snapshot(given);
    const part = (v: unknown) => (set && v !== undefined ? snapshot(v) : undefined);
    const backward = part(set?.backward), fused = part(set?.fused), fusedQuant = part(set?.fusedQuant);
    if (
      !set || (set.backward !== undefined && !backward) || (set.fused !== undefined && !fused) ||
      (set.fusedQuant !== undefined && !fusedQuant)
    ) {
      throw new ArgumentError(
        "images",
        'a KernelImageSet { sourceSha256, images, backward?, fused?, fusedQuant? } (e.g. await import("@normkit/ptx")) ' +
          "or an array of them",
        given,
      );
    }
    const files = (f: ImageFiles) => Object.freeze({ sourceSha256: f.sourceSha256, images: f.images });
    return Object.freeze({
      sourceSha256: set.sourceSha256,
      images: set.images,
      ...(backward ? { backward: files(backward) } : {}),
      ...(fused ? { fused: files(fused) } : {}),
      ...(fusedQuant ? { fusedQuant: files(fusedQuant) } : {}),
    });
  });
}

/**
 * { sourceSha256, images, backward, fused, fusedQuant } read once from `v`, or undefined when the first two are not a
 * string and an object.
 */
function snapshot(
  v: unknown,
): (ImageFiles & { backward: unknown; fused: unknown; fusedQuant: unknown }) | undefined {
  if (!isObject(v)) return undefined;
  const { sourceSha256, images, backward, fused, fusedQuant } = v as {
    sourceSha256: unknown;
    images: unknown;
    backward: unknown;
    fused: unknown;
    fusedQuant: unknown;
  };
  if (typeof sourceSha256 !== "string" || !isObject(images)) return undefined;
  return { sourceSha256, images: images as ImageFiles["images"], backward, fused, fusedQuant };
}

const isObject = (v: unknown): v is object => typeof v === "object" && v !== null;

/**
 * The bytes of the norm kernels' image for `device` (the one loadKernels loads; `kind: "backward"`, the backward
 * kernels' one, and so on): for loading it yourself through `device.loadModule`, or for the C side of a benchmark.
 * `images` as in loadKernels.
 *
 * @example
 * ```ts
 * import { Device, kernelImage } from "@normkit/normkit/gpu";
 * using dev = Device.open({ backend: "cuda" });
 * using mod = dev.loadModule(await kernelImage(dev));
 * const k = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
 * ```
 */
export async function kernelImage(
  device: { readonly backend: string; readonly info: DeviceInfo },
  options?: { images?: KernelImageSet | readonly KernelImageSet[]; kind?: ImageKind },
): Promise<Uint8Array> {
  const sets = imageSets(options?.images);
  const kind = options?.kind ?? "norm";
  if (!Object.hasOwn(SOURCE_SHA256, kind)) {
    throw new ArgumentError("kind", `one of ${Object.keys(SOURCE_SHA256).map((k) => `"${k}"`).join(", ")}`, kind);
  }
  const choice = imageChoice(device);
  return await readImage(findImage(choice, sets, `${device.info.name} (${choice.target})`, kind));
}

// Read once per process per URL: several devices of one architecture share the bytes.
const reads = new Map<string, Promise<Uint8Array>>();

/** The bytes of an image (inflated when gzip-compressed, as the AMD code objects are). */
export function readImage(src: ImageSource): Promise<Uint8Array> {
  if (src instanceof Uint8Array) return inflate(src);
  const url = new URL(typeof src === "string" ? src : src.href);
  let p = reads.get(url.href);
  if (!p) {
    p = fetchBytes(url).then(inflate);
    // A failed read is not kept: the next loadKernels tries again (after the user grants a permission, say).
    p.catch(() => reads.delete(url.href));
    reads.set(url.href, p);
  }
  return p;
}

async function fetchBytes(url: URL): Promise<Uint8Array> {
  if (url.protocol === "file:") {
    if (!ffi) throw new UnsupportedError("reading kernel images needs Deno or Bun");
    return await ffi.readFile(url.href);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new UnsupportedError(`kernel image ${url.href}: only file:, http: and https: URLs can be read`);
  }
  const r = await fetch(url);
  if (!r.ok) throw new UnsupportedError(`kernel image ${url.href}: HTTP ${r.status} ${r.statusText}`);
  return new Uint8Array(await r.arrayBuffer());
}

/** gzip data inflated with the web-standard DecompressionStream (Deno and Bun have it); anything else as is. */
async function inflate(data: Uint8Array): Promise<Uint8Array> {
  if (data.length < 2 || data[0] !== 0x1f || data[1] !== 0x8b) return data;
  const stream = new Blob([data as Uint8Array<ArrayBuffer>]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
