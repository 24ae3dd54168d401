/**
 * The AMD targets as the HIP tests see them without a GPU: the code objects in packages/hip/, the device info HIP
 * reports for a target, and the checks every kernel of a code object must pass (for both *hsaco_abi.test.ts).
 */
import { gunzipSync } from "node:zlib";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { HSACO_WAVE } from "../../ops/hip_module.ts";
import type { DeviceInfo } from "../../runtime/driver.ts";
import type { ArgType } from "../../runtime/module.ts";
import { cLayout, type KernelMeta, metadata } from "./amdgpu_metadata.ts";

/** LDS per workgroup on gfx9 and gfx11. */
export const LDS_BYTES = 65536;

/** A file of this repository, by its path from the root. */
export const readRepo = (p: string): Uint8Array => new Uint8Array(readFileSync(new URL(`../../${p}`, import.meta.url)));

/** packages/hip/<image>_<target>.hsaco.gz unpacked (each code object is gzip -9n, scripts/build-hsaco.sh). */
export const codeObject = (image: "norm" | "norm_bwd" | "fused" | "fused_quant", target: string): Uint8Array =>
  new Uint8Array(gunzipSync(readRepo(`packages/hip/${image}_${target}.hsaco.gz`)));

/** Each target's `image` code object is an ELF file for AMDGPU. */
export function assertAmdgpuElfs(
  image: "norm" | "norm_bwd" | "fused" | "fused_quant",
  targets: readonly string[],
): void {
  for (const arch of targets) {
    const elf = codeObject(image, arch);
    assert.deepEqual([...elf.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46], `${arch}: ELF`);
    assert.equal(elf[18] | (elf[19] << 8), 224, `${arch}: e_machine EM_AMDGPU`);
  }
}

/** The kernels of `target`'s `image` code object by name, from its metadata, which must name that target. */
export function kernelsOf(
  image: "norm" | "norm_bwd" | "fused" | "fused_quant",
  target: string,
): Map<string, KernelMeta> {
  const md = metadata(codeObject(image, target));
  assert.match(md["amdhsa.target"], new RegExp(`amdgcn-amd-amdhsa--${target}`));
  return new Map(md["amdhsa.kernels"].map((k) => [k[".name"], k]));
}

/**
 * What every kernel of `target` must satisfy: its explicit arguments where the launcher packs `args`, the wave size
 * ops/hip_module.ts pairs the target with, and no scratch memory (a stack frame or spills: slow per-lane global
 * memory). Returns the explicit arguments, for further checks.
 */
export function assertKernelAbi(
  target: string,
  name: string,
  k: KernelMeta,
  args: readonly ArgType[],
): KernelMeta[".args"] {
  const explicit = k[".args"].filter((a) => !a[".value_kind"].startsWith("hidden_"));
  assert.deepEqual(
    explicit.map((a) => ({ offset: a[".offset"], size: a[".size"] })),
    cLayout(args),
    `${target} ${name} arguments`,
  );
  assert.equal(k[".wavefront_size"], HSACO_WAVE[target], `${target} ${name} wave size`);
  assert.equal(k[".private_segment_fixed_size"], 0, `${target} ${name}: scratch bytes per work-item`);
  return explicit;
}

/** The DeviceInfo of a test device of `arch` with waves of `warpSize`: the limits HIP reports, as fake_hip/fake_hip.c. */
export function deviceInfo(arch: string, warpSize: number, computeCapability: [number, number] = [9, 4]): DeviceInfo {
  return {
    ordinal: 0,
    name: "test device",
    arch,
    computeCapability,
    multiprocessors: 104,
    totalMemory: 1 << 30,
    warpSize,
    maxThreadsPerBlock: 1024,
    maxBlockDim: [1024, 1024, 1024],
    maxGridDim: [2147483647, 65536, 65536],
    maxSharedPerBlock: LDS_BYTES,
    maxSharedPerBlockOptin: LDS_BYTES,
    l2CacheBytes: 8 << 20,
  };
}
