/**
 * ABI check of the AMD code objects, no GPU needed: for every kernel of every HSACO, the AMDGPU metadata
 * note (ELF note, msgpack) must agree with what the TypeScript launcher packs (argument offsets and
 * sizes), the wave size the plan assumes, and the launch limits the plan may use.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { backward, sourceSha256 as HSACO_SOURCE_SHA256, TARGETS } from "../../packages/hip/mod.ts";
import { NORM_BWD_KERNELS, NORM_KERNELS, NORM_SOURCE_FILES } from "../../precompiled/norm_cuda.ts";
import { NORM_FWD_ARGS, planLimits } from "../../ops/kernels.ts";
import { DIAG_FINAL_ARGS, DIAG_PARTIAL_ARGS } from "../../ops/diag.ts";
import { NORM_BWD_ARGS, NORM_FINALIZE_ARGS } from "../../ops/backward.ts";
import { HSACO_WAVE, hsacoTarget } from "../../ops/hip_module.ts";
import { DTYPES } from "../../runtime/dtype.ts";
import type { ArgType } from "../../runtime/module.ts";
import { assertAmdgpuElfs, assertKernelAbi, deviceInfo, kernelsOf, LDS_BYTES, readRepo } from "./targets.ts";
import { MAX_BLOCK_THREADS, MAXV_BLOCK, MAXV_LATENCY, MAXV_ROWS, planNorm, ROWS_BLOCK } from "../../ops/plan.ts";

const WAVE = HSACO_WAVE; // what ops/hip_module.ts pairs each target with; assertKernelAbi checks .wavefront_size

const SCALE_ARGS: ArgType[] = ["ptr", "ptr", "f32", "i64"];
// The backward kernels (kernels/norm_bwd.cuh) and what ops/backward.ts packs for them.
const bwdArgs = (name: string): readonly ArgType[] | undefined =>
  name.startsWith("nk_bwd_finalize_") ? NORM_FINALIZE_ARGS : name.includes("_bwd_") ? NORM_BWD_ARGS : undefined;
// The check-mode kernels (kernels/diag.cuh) and what ops/diag.ts packs for them.
const DIAG_ARGS: Record<string, readonly ArgType[]> = {
  nk_diag_partial_f32: DIAG_PARTIAL_ARGS,
  nk_diag_partial_f16: DIAG_PARTIAL_ARGS,
  nk_diag_partial_bf16: DIAG_PARTIAL_ARGS,
  nk_diag_final: DIAG_FINAL_ARGS,
};

test("packages/hip holds ELF code objects for gfx90a, gfx942, gfx1100, built from the current sources", () => {
  assert.deepEqual([...TARGETS].sort(), ["gfx1100", "gfx90a", "gfx942"]);
  assertAmdgpuElfs("norm", TARGETS);
  assertAmdgpuElfs("norm_bwd", TARGETS);
  const h = createHash("sha256");
  for (const f of NORM_SOURCE_FILES) h.update(readRepo(f));
  assert.equal(h.digest("hex"), HSACO_SOURCE_SHA256, "kernels/ changed: run bash scripts/build-hsaco.sh");
  assert.equal(backward.sourceSha256, HSACO_SOURCE_SHA256);
  assert.deepEqual(Object.keys(backward.images).sort(), [...TARGETS].sort());
});

for (const arch of ["gfx90a", "gfx942", "gfx1100"]) {
  test(`${arch}: every kernel present; argument offsets/sizes = the launcher's packing; wave ${WAVE[arch]}; launch limits fit`, () => {
    const fwd = kernelsOf("norm", arch), bwd = kernelsOf("norm_bwd", arch);
    assert.deepEqual([...fwd.keys()].sort(), [...NORM_KERNELS].sort(), "the same kernels as the CUDA build");
    assert.deepEqual([...bwd.keys()].sort(), [...NORM_BWD_KERNELS].sort(), "the same backward kernels");
    const byName = new Map([...fwd, ...bwd]);
    for (const name of [...NORM_KERNELS, ...NORM_BWD_KERNELS]) {
      const k = byName.get(name)!;
      const args = name === "scale_f32" ? SCALE_ARGS : DIAG_ARGS[name] ?? bwdArgs(name) ?? NORM_FWD_ARGS;
      assertKernelAbi(arch, name, k, args);
      if (name === "scale_f32") continue;
      if (bwdArgs(name)) {
        // ops/backward.ts launches at most 512 threads (the finalize exactly 512, `tile` 256); it refuses HIP
        // devices for now.
        assert.ok(
          k[".max_flat_workgroup_size"] >= (name.includes("_bwd_tile_") ? 256 : 512),
          `${arch} ${name}: threads`,
        );
        continue;
      }
      if (name in DIAG_ARGS) {
        assert.ok(k[".max_flat_workgroup_size"] >= 256, `${arch} ${name}: launched with 256 threads`);
        continue;
      }
      // (LayerNorm's blockfull/clusterfull/rowstwopass and both kinds' rowstile: the limits of block/cluster/rows.)
      const mapping = name.split("_")[2].replace(/(full|twopass|tile)$/, "");
      // The most threads and dynamic LDS the plan may launch this mapping with.
      const threads = mapping === "rows" ? ROWS_BLOCK : mapping === "wide" ? 1024 : MAX_BLOCK_THREADS;
      const dynLds = mapping === "rows"
        ? 0
        : 2 * Math.ceil(threads / WAVE[arch]) * 4 + (mapping === "cluster" ? 16 : 0);
      assert.ok(
        threads <= k[".max_flat_workgroup_size"],
        `${arch} ${name}: ${threads} threads > ${k[".max_flat_workgroup_size"]}`,
      );
      assert.ok(k[".group_segment_fixed_size"] + dynLds <= LDS_BYTES, `${arch} ${name}: LDS`);
    }
  });

  test(`${arch}: every plan for a wave-${WAVE[arch]} ${arch} device picks a kernel of this code object, within its limits`, () => {
    const byName = kernelsOf("norm", arch);
    // The limits come from the same function ops/norm.ts uses, for a device like the ones HIP reports.
    const device = { backend: "hip", info: deviceInfo(arch, WAVE[arch]) };
    assert.equal(hsacoTarget(device.info), arch);
    const limits = planLimits(device);
    assert.equal(limits.ccMajor, 0, "no clusters on AMD");
    const mappings = new Set<string>();
    // D from 1 chunk to far past the register cache: every mapping and both sides of each boundary.
    const ds = [
      1,
      3,
      8,
      127,
      128,
      1000,
      1024,
      2047,
      2048,
      2049,
      4096,
      4097,
      8192,
      12288,
      16384,
      16385,
      32768,
      65537,
      262144,
    ];
    for (const d of ds) {
      for (const tin of DTYPES) {
        for (const tout of DTYPES) {
          for (const tw of [undefined, "f32", tin] as const) {
            for (const kind of ["layer", "rms"] as const) {
              for (const rows of [1, 1000]) {
                const r = planNorm({ kind, rows, d, inputDtype: tin, outputDtype: tout, paramDtype: tw }, limits);
                assert.ok("plan" in r, JSON.stringify(r));
                const p = r.plan, at = `${arch} d=${d} ${p.kernel}`;
                mappings.add(p.mapping);
                assert.notEqual(p.mapping, "cluster", "no clusters on AMD");
                const k = byName.get(p.kernel);
                assert.ok(k, `${at}: not in the code object`);
                if (p.fullKernel !== null) {
                  // The vector-only kernel launches with the same geometry: the same limits.
                  const f = byName.get(p.fullKernel);
                  assert.ok(f, `${at}: ${p.fullKernel} not in the code object`);
                  assert.equal(
                    f[".max_flat_workgroup_size"],
                    k[".max_flat_workgroup_size"],
                    `${at}: ${p.fullKernel} threads`,
                  );
                  assert.ok(f[".group_segment_fixed_size"] + p.sharedBytes <= LDS_BYTES, `${at}: ${p.fullKernel} LDS`);
                }
                assert.ok(
                  p.block[0] <= k[".max_flat_workgroup_size"],
                  `${at}: block ${p.block[0]} > ${k[".max_flat_workgroup_size"]}`,
                );
                assert.equal(p.block[0] % WAVE[arch], 0, `${at}: block ${p.block[0]} not whole waves`);
                assert.ok(k[".group_segment_fixed_size"] + p.sharedBytes <= LDS_BYTES, `${at}: LDS`);
                if (p.mapping === "rows") {
                  assert.ok(
                    p.tpr <= 32 && p.nv <= MAXV_ROWS,
                    `${at}: rows reduce within 32-lane groups, ≤ ${MAXV_ROWS} chunks`,
                  );
                } else {
                  // The block reduction keeps one float per wave, reduced again by one wave: ≤ wave² threads.
                  assert.equal(
                    p.sharedBytes,
                    2 * (p.block[0] / WAVE[arch]) * 4,
                    `${at}: two reduction buffers, one float per wave`,
                  );
                  assert.ok(p.block[0] / WAVE[arch] <= WAVE[arch], `${at}: more waves than one wave can reduce`);
                  if (p.mapping === "block") assert.ok(p.nv <= MAXV_BLOCK, `${at}: ${p.nv} chunks per thread`);
                  if (p.mapping === "latency") assert.ok(p.nv <= MAXV_LATENCY, `${at}: ${p.nv} chunks per thread`);
                }
              }
            }
          }
        }
      }
    }
    assert.deepEqual([...mappings].sort(), ["block", "latency", "rows", "wide"], "the sweep reaches every AMD mapping");
  });
}
