/**
 * Which AMD code object a device runs. The code objects themselves are the package @normkit/hip (packages/hip/,
 * built by scripts/build-hsaco.sh), read by loadKernels() (ops/images.ts) for the device's target only.
 */
import { UnsupportedError } from "../runtime/errors.ts";

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
