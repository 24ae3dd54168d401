/**
 * ABI check of the fused kernels' AMD code objects (packages/hip/fused_<target>.hsaco.gz of a float y and
 * fused_quant_<target>.hsaco.gz of a quantized y, kernels/fused.cu), no GPU
 * needed: the AMDGPU metadata note of each must hold exactly the kernels the ops launch, with their arguments at the
 * offsets and sizes the launcher packs, the target's wave size, the threads and LDS the plan may use and no scratch;
 * and every geometry the fused plan gives a wave-64 or wave-32 device must pass the kernel's own launch check.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { fused, fusedQuant, TARGETS } from "../../packages/hip/mod.ts";
import { fusedSourceSha256 } from "../../packages/hip/build.ts";
import {
  FUSED_KERNELS as BUILT_FLOAT_Y,
  FUSED_QUANT_KERNELS as BUILT_QUANT_Y,
  FUSED_SOURCE_FILES,
  FUSED_SOURCE_SHA256,
} from "../../precompiled/fused_cuda.ts";
import { FUSED_ADD_ARGS, FUSED_ADD_THREADS, FUSED_ARGS } from "../../ops/fused_abi.ts";
import {
  FUSED_KERNELS,
  FUSED_LANES_MAX,
  FUSED_MAX_THREADS,
  FUSED_MAXV,
  FUSED_ROWS_BLOCK,
  FUSED_TRIPLE_KERNELS,
  fusedGeometry,
  fusedKernelFor,
} from "../../ops/plan_fused.ts";
import { planLimits } from "../../ops/kernels.ts";
import { HSACO_WAVE, hsacoTarget } from "../../ops/hip_module.ts";
import { assertAmdgpuElfs, assertKernelAbi, deviceInfo, kernelsOf, LDS_BYTES, readRepo } from "./targets.ts";

const ADD_KERNELS = ["nk_fused_add_f32", "nk_fused_add_f16", "nk_fused_add_bf16"];

test("packages/hip exports the fused code objects for every target, built from the current fused sources", () => {
  for (const [set, prefix] of [[fused, "fused"], [fusedQuant, "fused_quant"]] as const) {
    assert.deepEqual(Object.keys(set.images).sort(), [...TARGETS].sort());
    for (const arch of TARGETS) {
      assert.ok(set.images[arch].href.endsWith(`/packages/hip/${prefix}_${arch}.hsaco.gz`), set.images[arch].href);
    }
    assertAmdgpuElfs(prefix, TARGETS);
    assert.equal(set.sourceSha256, fusedSourceSha256);
  }
  // The same sources, in the same order, as the CUDA images: one hash for both.
  assert.equal(fusedSourceSha256, FUSED_SOURCE_SHA256, "run bash scripts/build-hsaco.sh (and build-fused.sh)");
  const h = createHash("sha256");
  for (const f of FUSED_SOURCE_FILES) h.update(readRepo(f));
  assert.equal(h.digest("hex"), fusedSourceSha256, "kernels/ changed: run bash scripts/build-hsaco.sh");
});

/** The fused norm kernels of the AMD code objects: one per dtype triple (no few-chunk kernels: kernels/fused.cu). */
const HIP_KERNELS = FUSED_TRIPLE_KERNELS;

test("the plan's fused kernels and the fused adds are the CUDA build's kernels; HIP's are those without _nv2/_nv4", () => {
  assert.equal(FUSED_KERNELS.length, 120);
  assert.deepEqual([...FUSED_KERNELS, ...ADD_KERNELS].sort(), [...BUILT_FLOAT_Y, ...BUILT_QUANT_Y].sort());
  assert.equal(HIP_KERNELS.length, 40);
});

for (const arch of ["gfx90a", "gfx942", "gfx1100"]) {
  const wave = HSACO_WAVE[arch]; // assertKernelAbi checks .wavefront_size
  test(`${arch}: the fused kernels, and nothing else; arguments = the launcher's packing; wave ${wave}; limits fit`, () => {
    // Each image holds the triples of its y (as the CUDA images split them), the adds with a float y.
    const floatY = kernelsOf("fused", arch), quantY = kernelsOf("fused_quant", arch);
    assert.deepEqual(
      [...floatY.keys()].sort(),
      [...HIP_KERNELS.filter((k) => BUILT_FLOAT_Y.includes(k)), ...ADD_KERNELS].sort(),
    );
    assert.deepEqual([...quantY.keys()].sort(), HIP_KERNELS.filter((k) => BUILT_QUANT_Y.includes(k)).sort());
    const byName = new Map([...floatY, ...quantY]);
    for (const [name, k] of byName) {
      const add = ADD_KERNELS.includes(name);
      const explicit = assertKernelAbi(arch, name, k, add ? FUSED_ADD_ARGS : FUSED_ARGS);
      const last = explicit[explicit.length - 1];
      assert.ok(k[".kernarg_segment_size"] >= last[".offset"] + last[".size"], `${arch} ${name}: kernarg segment`);
      // No VGPR spills either (scratch memory, checked above); SGPR spills go to VGPR lanes.
      assert.equal(k[".vgpr_spill_count"], 0, `${arch} ${name}: VGPR spills`);
      // The most threads ops/fused.ts (a block of up to FUSED_MAX_THREADS per row) and ops/fused_module.ts
      // (FUSED_ADD_THREADS) launch.
      const threads = add ? FUSED_ADD_THREADS : FUSED_MAX_THREADS;
      assert.ok(k[".max_flat_workgroup_size"] >= threads, `${arch} ${name}: ${threads} threads`);
      // Static LDS only (no dynamic LDS is launched): one reduction buffer for either path, 2 × 1024 floats
      // (kernels/fused.cuh, red_buf).
      const lds = k[".group_segment_fixed_size"];
      assert.ok(
        lds <= (add ? 0 : 2 * FUSED_MAX_THREADS * 4) && lds <= LDS_BYTES,
        `${arch} ${name}: ${lds} bytes of LDS`,
      );
    }
  });
}

/**
 * The launch check of nk_fused (kernels/fused.cuh, the `bad` conditions in nk_fused) for a
 * kernel compiled with NK_WARP_SIZE = wave, on the geometry's tpr, nv, block and d; and the row mapping the kernel
 * derives from it (fused.cuh, nk_fused_rows_vec/_scalar: `rpb`, rows per block) against the plan's. A failure names
 * the condition.
 */
function kernelRejects(
  wave: number,
  g: { tpr: number; nv: number; block: number; rowsPerBlock: number },
  d: number,
  vec: number,
): string | undefined {
  const { tpr, nv, block } = g;
  if (nv < 1 || nv > FUSED_MAXV) return `nv ${nv} outside 1..${FUSED_MAXV}`;
  if (tpr < 1) return `tpr ${tpr}`;
  if (nv * tpr * vec < d) return `nv·tpr·VEC = ${nv * tpr * vec} < d`;
  if ((tpr & (tpr - 1)) !== 0 || (nv & (nv - 1)) !== 0) return `tpr ${tpr} or nv ${nv} not a power of two`;
  if (tpr <= wave) {
    if (block % wave !== 0) return `block ${block} not whole waves`;
  } else {
    if (tpr !== block) return `tpr ${tpr} > wave but block ${block} ≠ tpr`;
    if (block > FUSED_MAX_THREADS) return `block ${block} > ${FUSED_MAX_THREADS}`;
    if (block > wave * wave) return `block ${block} > wave² (one wave reduces the per-wave sums)`;
  }
  // Not checked by the kernel, assumed by it: rows per block as the plan sizes the grid (fusedLaunch), rows of
  // whole lane groups within a block.
  const rpb = tpr <= wave ? Math.floor(block / tpr) : 1;
  if (rpb !== g.rowsPerBlock) return `the kernel takes ${rpb} rows per block, the plan ${g.rowsPerBlock}`;
  if (block % tpr !== 0 && tpr <= wave) return `block ${block} not whole rows of ${tpr}`;
  return undefined;
}

for (const wave of [64, 32]) {
  test(`every fused geometry for a wave-${wave} device passes the kernel's launch check`, () => {
    const arch = wave === 64 ? "gfx942" : "gfx1100";
    const info = deviceInfo(arch, wave);
    assert.equal(hsacoTarget(info), arch);
    const limits = planLimits({ backend: "hip", info });
    assert.equal(limits.warpSize, wave);
    const rules = new Map<string, number>(), tprs = new Set<number>();
    for (const dtype of ["f32", "f16", "bf16"] as const) {
      const vec = dtype === "f32" ? 4 : 8;
      const most = FUSED_MAX_THREADS * FUSED_MAXV * vec; // 1024 threads × 8 chunks: what the plan promises
      // Every d to 4096 (every lane count and both layouts), then a stride through the block layout, its edges
      // and powers of two.
      const ds = new Set<number>();
      for (let d = 1; d <= 4096; d++) ds.add(d);
      for (let d = 4097; d <= most; d += 61) ds.add(d);
      for (let p = 1; p <= most; p *= 2) for (const e of [-1, 0, 1]) if (p + e >= 1) ds.add(p + e);
      ds.add(most - 1).add(most);
      for (const kind of ["layer", "rms"] as const) {
        for (const [d, rows] of [...ds].flatMap((d) => [[d, 1], [d, 1_000_000]])) {
          const g = fusedGeometry(kind, d, dtype, limits, rows, "hip");
          if ("unsupported" in g) {
            assert.ok(d > most, `${kind} ${dtype} d=${d}: ${g.unsupported}`);
            continue;
          }
          const at = `wave ${wave} ${kind} ${dtype} d=${d} rows=${rows} (tpr ${g.tpr}, nv ${g.nv}, block ${g.block})`;
          const k = fusedKernelFor(kind, dtype, dtype, "f32", g, "hip");
          assert.ok("kernel" in k && HIP_KERNELS.includes(k.kernel), `${at}: ${JSON.stringify(k)}`);
          const why = kernelRejects(wave, g, d, vec);
          assert.equal(why, undefined, `${at}: the kernel traps: ${why}`);
          assert.ok(g.block <= FUSED_MAX_THREADS, `${at}: more threads than the launch bound`);
          assert.notEqual(g.rule, "fused.few", `${at}: no _nv4 kernels on HIP`);
          if (g.rule === "fused.short" || (g.rule === "fused.block" && g.leaves <= FUSED_LANES_MAX * 8)) {
            assert.ok(g.tpr <= FUSED_LANES_MAX && g.block === FUSED_ROWS_BLOCK, at);
          }
          rules.set(g.rule, (rules.get(g.rule) ?? 0) + 1);
          tprs.add(g.tpr);
        }
        assert.ok(
          "unsupported" in fusedGeometry(kind, most + 1, dtype, limits, 1, "hip"),
          `${kind} ${dtype}: past ${most}`,
        );
      }
    }
    assert.deepEqual(
      [...rules.keys()].sort(),
      ["fused.block", "fused.latency", "fused.short"],
      "every split reached",
    );
    // Sub-wave rows and a row per block of one wave (tpr = wave: the butterfly, no LDS) and of several.
    for (const t of [1, 2, 4, 8, 16, 32, wave, 2 * wave, FUSED_MAX_THREADS]) assert.ok(tprs.has(t), `tpr ${t} reached`);
  });
}
