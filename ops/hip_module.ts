/**
 * The AMD code objects of the norm kernels: which one a device gets, and importing them on demand.
 *
 * precompiled/norm_hip.ts (with norm_hsaco.json: 9 MB of gzip + base64, three targets) is imported dynamically, never by the module
 * graph of mod.ts, so CUDA and CPU users never fetch or parse it. Dynamic import is asynchronous while the ops
 * are not, hence loadHipCodeObjects(): awaited once (through loadKernels() in kernels.ts) before the first
 * launch on a HIP device.
 *
 * The specifier is computed on purpose: Deno's module graph follows a literal `import("...")` eagerly (measured:
 * a CPU-only script by URL downloaded norm_hip.ts, and +30 MB RSS on a cold local run). The price, under Deno
 * only: a local copy needs --allow-read to import it (by URL, --allow-import; jsr.io is allowed by default).
 */
import { UnsupportedError } from "../runtime/errors.ts";
import { decodeBase64 } from "../runtime/base64.ts";

/**
 * The targets scripts/build-hsaco.sh builds, with the wave size each was compiled for (64 on CDNA/gfx9, 32 on
 * RDNA/gfx11). tests/hip/hsaco_abi.test.ts checks both against the code objects' metadata.
 */
export const HSACO_WAVE: Readonly<Record<string, number>> = Object.freeze({ gfx90a: 64, gfx942: 64, gfx1100: 32 });

/**
 * The code object for a device (its DeviceInfo.arch, already stripped of feature suffixes, and its wave size),
 * or UnsupportedError naming the device's arch and the built ones. A gfx target's code object only runs on that
 * exact processor (gfx1101 cannot run gfx1100's), so there is no nearest match.
 */
export function hsacoTarget(info: { readonly arch: string; readonly warpSize: number; readonly name?: string }): string {
  const built = Object.keys(HSACO_WAVE);
  const wave = Object.hasOwn(HSACO_WAVE, info.arch) ? HSACO_WAVE[info.arch] : undefined;
  const device = info.name ? `${info.name} (${info.arch})` : info.arch;
  if (wave === undefined) {
    throw new UnsupportedError(
      `no AMD code object for ${device}: normkit's kernels are built for ${built.join(", ")} (scripts/build-hsaco.sh)`,
    );
  }
  // The plan sizes reductions by the device's wave size; the kernels by the one they were compiled for.
  if (info.warpSize !== wave) {
    throw new UnsupportedError(`${device} reports wave size ${info.warpSize}; the ${info.arch} code object is wave${wave}`);
  }
  return info.arch;
}

let imported: Promise<Readonly<Record<string, string>>> | undefined;
let hsaco: Readonly<Record<string, string>> | undefined;
const bytes = new Map<string, Uint8Array>();

/** Imports precompiled/norm_hip.ts once per process; later calls return at once. */
export function loadHipCodeObjects(): Promise<void> {
  const url = new URL("../precompiled/norm_hip.ts", import.meta.url).href;
  imported ??= import(url).then(async (m: { NORM_HSACO: Readonly<Record<string, string>> }) => {
    // Stored gzip-compressed (scripts/build-hsaco.sh): inflate every target once, here, asynchronously.
    for (const [target, data] of Object.entries(m.NORM_HSACO)) bytes.set(target, await gunzip(decodeBase64(data)));
    return (hsaco = m.NORM_HSACO);
  });
  // A failed import is not cached: the next call tries again.
  return imported.then(() => {}, (e) => {
    imported = undefined;
    throw e;
  });
}

/** The code object bytes for `target` (from hsacoTarget); decoded once per process. */
export function hipCodeObject(target: string): Uint8Array {
  if (!hsaco) {
    throw new UnsupportedError(
      "the AMD kernels are imported on demand: `await loadKernels(device)` once before layerNorm/rmsNorm on a HIP device",
    );
  }
  const b = bytes.get(target);
  if (!b) throw new UnsupportedError(`no AMD code object for target ${target}`);
  return b;
}

/** Inflates gzip data with the web-standard DecompressionStream (Deno and Bun both have it). */
async function gunzip(data: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([data as Uint8Array<ArrayBuffer>]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
