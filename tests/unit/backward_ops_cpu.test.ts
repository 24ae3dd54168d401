/**
 * The backward ops and the training modules on the CPU device (CI): plumbing (dtypes, strides, outputs,
 * accumulation) against the float64 reference with the tolerances stated in backward_cases.ts, argument
 * checks, the modules' int8 loading, zero-centred weight and gradient accumulation, and the backward plan.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Device,
  type DType,
  LayerNorm,
  layerNorm,
  layerNormBackward,
  RMSNorm,
  rmsNorm,
  rmsNormBackward,
  Tensor,
} from "../../mod.ts";
import { ArgumentError, DisposedError } from "../../runtime/errors.ts";
import { cpuNormBackward, cpuNormForward } from "../../mod.ts";
import { readFileSync } from "node:fs";
import {
  BWD_REG_BUDGET,
  bwdFull,
  bwdStages,
  cachedShared,
  LN_F32_STAGED_BLOCK,
  LN_F32_STAGED_NV,
  lnF32Staged,
  MAXV_BWD,
  maxvBwd,
  planNormBackward,
  prefetchNextRow,
  SMALL_STAGED_BLOCK,
  smallStagedCtas,
  smemDbias,
  stagedShared,
} from "../../ops/plan_bwd.ts";
import { CLUSTER_SUM_BYTES } from "../../ops/plan.ts";
import { bwdPlanLimits } from "../../ops/kernels.ts";
import { NORM_BWD_KERNELS } from "../../precompiled/norm_cuda.ts";
import { runBwdCase } from "../fixtures/backward_cases.ts";
import { randoms } from "../fixtures/random.ts";

const cpu = () => Device.open({ backend: "cpu" });

for (const kind of ["layer", "rms"] as const) {
  for (
    const [tx, tdy, tw] of [["f32", "f32", "f32"], ["bf16", "f32", "bf16"], ["f16", "bf16", "f32"]] as [
      DType,
      DType,
      DType,
    ][]
  ) {
    test(`${kind} backward on the CPU device: x ${tx}, dy ${tdy}, weight ${tw}, strided, accumulate or not`, () => {
      using dev = cpu();
      for (const accumulate of [false, true]) {
        const r = runBwdCase(dev, { kind, rows: 5, d: 37, tx, tdy, tw, pad: 3, accumulate });
        assert.ok(
          r.dx <= 1 && r.dweight <= 1 && r.dbias <= 1,
          JSON.stringify({ dx: r.dx, dw: r.dweight, db: r.dbias }),
        );
      }
      const plain = runBwdCase(dev, { kind, rows: 3, d: 8, tx, tdy, tw, affine: false });
      assert.ok(plain.dx <= 1 && plain.bits.dweight === undefined);
    });
  }
}

test("backward results: shapes, dtypes, which gradients are returned", () => {
  using dev = cpu();
  using x = dev.tensor(randoms(12, 1), [2, 2, 3], { dtype: "bf16" });
  using dy = dev.tensor(randoms(12, 2), [2, 2, 3]);
  using w = dev.tensor([1, 2, 3], [3], { dtype: "bf16" });
  using b = dev.tensor([0, 1, 0], [3], { dtype: "bf16" });
  const f = layerNorm(x, { weight: w, bias: b, stats: true });
  const r = layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd, weight: w, bias: b });
  assert.deepEqual(r.dx.shape, [2, 2, 3]);
  assert.equal(r.dx.dtype, "bf16");
  assert.equal(r.dweight?.dtype, "bf16");
  assert.equal(r.dbias?.dtype, "bf16");
  const rr = rmsNormBackward(dy, x, { rstd: f.rstd });
  assert.equal(rr.dweight, undefined);
  assert.equal("dbias" in rr, false);
  for (const t of [f.y, f.mean, f.rstd, r.dx, r.dweight!, r.dbias!, rr.dx]) t.close();
});

test("dx may be dy itself (in place); the result equals the out-of-place one", () => {
  using dev = cpu();
  using x = dev.tensor(randoms(40, 3), [4, 10]);
  using dy = dev.tensor(randoms(40, 4), [4, 10]);
  const f = rmsNorm(x, { stats: true });
  const a = rmsNormBackward(dy, x, { rstd: f.rstd });
  const want = a.dx.readSync();
  rmsNormBackward(dy, x, { rstd: f.rstd, dx: dy });
  assert.deepEqual(dy.readSync(), want);
  for (const t of [f.y, f.mean, f.rstd, a.dx]) t.close();
});

test("backward argument errors name the argument; nothing is written", () => {
  using dev = cpu();
  using x = dev.tensor(randoms(12, 5), [3, 4]);
  using dy = dev.tensor(randoms(12, 6), [3, 4]);
  const f = layerNorm(x, { stats: true });
  using dx = dev.empty([3, 4]);
  dx.buffer.fill(0xff);
  const bad = (fn: () => unknown, name: RegExp) =>
    assert.throws(fn, (e: unknown) => e instanceof ArgumentError && name.test((e as Error).message));
  using dyWrong = dev.tensor(randoms(8, 7), [2, 4]);
  bad(() => layerNormBackward(dyWrong, x, { mean: f.mean, rstd: f.rstd, dx }), /dy/);
  using short = dev.tensor([1, 2], [2]);
  bad(() => layerNormBackward(dy, x, { mean: short, rstd: f.rstd, dx }), /mean/);
  using rstd16 = dev.tensor([1, 2, 3], [3], { dtype: "f16" });
  bad(() => layerNormBackward(dy, x, { mean: f.mean, rstd: rstd16, dx }), /rstd\.dtype/);
  bad(() => layerNormBackward(dy, x, { mean: undefined as never, rstd: f.rstd, dx }), /mean/);
  using w5 = dev.tensor([1, 2, 3, 4, 5], [5]);
  bad(() => layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd, weight: w5, dx }), /weight/);
  using dx16 = dev.empty([3, 4], { dtype: "f16" });
  bad(() => layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd, dx: dx16 }), /dx\.dtype/);
  using big = dev.tensor(randoms(24, 8), [2, 12]);
  const xView = new Tensor(big.buffer, [3, 4]), dxOverX = new Tensor(big.buffer, [3, 4], { offset: 2 });
  bad(() => layerNormBackward(dy, xView, { mean: f.mean, rstd: f.rstd, dx: dxOverX }), /dx/);
  using w = dev.tensor([1, 1, 1, 1], [4]);
  bad(() => layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd, weight: w, accumulate: true, dx }), /accumulate/);
  using dw16 = dev.empty([4], { dtype: "f16" });
  bad(() => layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd, weight: w, dweight: dw16, dx }), /dweight\.dtype/);
  assert.ok(dx.readSync().every(Number.isNaN), "dx untouched by failed calls");
  f.mean.close();
  assert.throws(() => layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd }), DisposedError);
  f.y.close();
  f.rstd.close();
});

test("zero rows: empty dx, zero parameter gradients", () => {
  using dev = cpu();
  using x = dev.empty([0, 4]);
  using dy = dev.empty([0, 4]);
  using w = dev.tensor([1, 2, 3, 4], [4]);
  using stat = dev.empty([0]);
  const r = rmsNormBackward(dy, x, { rstd: stat, weight: w });
  assert.deepEqual(r.dx.shape, [0, 4]);
  assert.deepEqual([...r.dweight!.readSync()], [0, 0, 0, 0]);
  r.dx.close();
  r.dweight!.close();
});

test("LayerNorm module: forward/backward/accumulate/zeroGrad against the float64 reference", () => {
  using dev = cpu();
  const d = 6, rows = 3;
  using m = new LayerNorm(dev, d);
  const wv = randoms(d, 11, 0.5, 1.5), bv = randoms(d, 12, -1, 1);
  m.load({ weight: wv, bias: bv });
  const xv = randoms(rows * d, 13, -2, 2), dyv = randoms(rows * d, 14, -1, 1);
  using x = dev.tensor(xv, [rows, d]);
  using dy = dev.tensor(dyv, [rows, d]);
  using y = m.forward(x);
  const ref = cpuNormForward({ kind: "layer", rows, d, x: xv, xStride: d, weight: wv, bias: bv, eps: 1e-5 });
  y.readSync().forEach((v, i) => assert.ok(Math.abs(v - ref.y[i]) <= 1e-5 * (1 + Math.abs(ref.y[i]))));
  using dx = m.backward(dy);
  const g = cpuNormBackward({ kind: "layer", rows, d, x: xv, xStride: d, dy: dyv, dyStride: d, weight: wv, eps: 1e-5 });
  dx.readSync().forEach((v, i) => assert.ok(Math.abs(v - g.dx[i]) <= 1e-5 * (1 + Math.abs(g.dx[i])), `dx[${i}]`));
  assert.throws(() => m.backward(dy), /forward/); // one backward per forward
  m.forward(x).close();
  m.backward(dy).close(); // accumulates: twice the gradient
  const s = m.state();
  s.weightGrad!.forEach((v, j) =>
    assert.ok(Math.abs(v - 2 * g.dweight[j]) <= 1e-5 * (1 + Math.abs(2 * g.dweight[j])), `dweight[${j}]`)
  );
  s.biasGrad!.forEach((v, j) =>
    assert.ok(Math.abs(v - 2 * g.dbias[j]) <= 1e-5 * (1 + Math.abs(2 * g.dbias[j])), `dbias[${j}]`)
  );
  m.zeroGrad();
  assert.ok(m.state().weightGrad!.every((v) => v === 0));
  m.close();
  assert.throws(() => m.forward(x), DisposedError);
});

test("RMSNorm module: int8 weights (per-tensor and per-channel scale) and a zero-centred weight", () => {
  using dev = cpu();
  const d = 4;
  using m = new RMSNorm(dev, d);
  m.load({ weight: { int8: Int8Array.from([10, -20, 30, 127]), scale: 0.01 } });
  assert.deepEqual([...m.state().weight!], [0.1, -0.2, 0.3, 1.27].map(Math.fround));
  m.load({ weight: { int8: Int8Array.from([1, 2, 3, 4]), scale: [1, 0.5, 0.25, 2] } });
  assert.deepEqual([...m.state().weight!], [1, 1, 0.75, 8]);
  assert.throws(() => m.load({ weight: { int8: Int8Array.from([1, 2]), scale: 1 } }), /weight\.int8/);
  assert.throws(() => m.load({ weight: { int8: Int8Array.from([1, 2, 3, 4]), scale: [1] } }), /weight\.scale/);
  assert.throws(() => m.load({ bias: [1, 2, 3, 4] }), /bias/);

  // Zero-centred: stored w, used as 1 + w; gradient with respect to w equals that of the scale.
  using z = new RMSNorm(dev, d, { zeroCentered: true });
  const w = [0.5, -0.25, 0, 1];
  z.load({ weight: w });
  const xv = randoms(2 * d, 21, -2, 2), dyv = randoms(2 * d, 22, -1, 1);
  using x = dev.tensor(xv, [2, d]);
  using dy = dev.tensor(dyv, [2, d]);
  using y = z.forward(x);
  const scale = w.map((v) => 1 + v);
  const ref = cpuNormForward({ kind: "rms", rows: 2, d, x: xv, xStride: d, weight: scale, eps: 1e-6 });
  y.readSync().forEach((v, i) => assert.ok(Math.abs(v - ref.y[i]) <= 1e-5 * (1 + Math.abs(ref.y[i]))));
  z.backward(dy).close();
  const g = cpuNormBackward({
    kind: "rms",
    rows: 2,
    d,
    x: xv,
    xStride: d,
    dy: dyv,
    dyStride: d,
    weight: scale,
    eps: 1e-6,
  });
  z.state().weightGrad!.forEach((v, j) => assert.ok(Math.abs(v - g.dweight[j]) <= 1e-5 * (1 + Math.abs(g.dweight[j]))));
  assert.deepEqual([...z.state().weight!], w);
});

test("backward plan: mappings, geometry and kernel contracts over D", () => {
  for (const ccMajor of [8, 9]) {
    const limits = {
      maxThreadsPerBlock: 1024,
      warpSize: 32,
      maxSharedPerBlockOptin: 232448,
      ccMajor,
      maxCluster: ccMajor === 9 ? 16 : 8,
    };
    for (const kind of ["layer", "rms"] as const) {
      for (const [tx, tdy] of [["f32", "f32"], ["bf16", "bf16"], ["bf16", "f32"]] as [DType, DType][]) {
        for (let d = 1; d <= 262144; d = d < 64 ? d + 1 : Math.ceil(d * 1.37)) {
          for (const paramGrads of [true, false]) {
            const r = planNormBackward({ kind, d, xDtype: tx, dyDtype: tdy, paramGrads }, limits);
            assert.ok("plan" in r);
            const p = r.plan;
            const vec = tx === "f32" || tdy === "f32" ? 4 : 8;
            const nacc = paramGrads ? (kind === "layer" ? 2 : 1) : 0;
            assert.equal(p.nacc, nacc);
            assert.ok(p.block % 32 === 0 && p.block <= 512, `block ${p.block}`);
            assert.ok(p.sharedBytes <= limits.maxSharedPerBlockOptin);
            const k = kind === "layer" ? "ln" : "rms";
            assert.match(
              p.kernel,
              new RegExp(`^nk_${k}_bwd_${p.mapping === "split" ? "tile" : p.mapping}_${tx}_${tdy}_f32$`),
            );
            const maxv = maxvBwd(kind, tx, tdy), chunks = Math.ceil(d / vec);
            // LN's dbias sums live in shared memory with 16-bit x and dy (kernels/norm_bwd.cuh, nk_bwd_smem_dbias).
            const dbiasInShared = kind === "layer" && paramGrads && tx !== "f32" && tdy !== "f32";
            assert.equal(p.cluster, p.mapping === "cluster" ? p.cluster : 1);
            // The L2 prefetch of the next row: only with one row per block or a cluster, as the rule says.
            const oneRow = p.mapping === "cluster" || (p.mapping === "cached" && p.rowsPerBlock === 1 && p.tpr > 32);
            // The bulk-staged variant: sm_90, x and dy of one dtype, one-row blocks or clusters where bwdStages asks for
            // rows in flight; its kernel, 2 rows, and the shared memory of that layout, within the limit.
            // Clusters of 512-thread CTAs of RMS 16-bit stage in CTAs of 128 threads where ≤ 16 of them hold the row.
            const small = p.mapping === "cluster" && p.block === 512 && smallStagedCtas(kind, tx) && tx === tdy &&
              ccMajor >= 9;
            const own = { cluster: p.cluster, block: p.block, nv: p.nv };
            const g = { ...own };
            if (small) {
              const c = [2, 4, 8, 16].find((c) => Math.ceil(chunks / c) <= SMALL_STAGED_BLOCK * maxv);
              if (c !== undefined) {
                const per = Math.ceil(chunks / c), block = Math.ceil(Math.ceil(per / maxv) / 32) * 32;
                Object.assign(g, { cluster: c, block, nv: Math.ceil(per / block) });
              }
            }
            // LN f32 rows in clusters of 512-thread CTAs stage in their own geometry (lnF32Staged): 5 chunks per thread in
            // CTAs of ≤ 416 threads, the smallest cluster; the plan's own where that does not fit.
            const lnOwn = lnF32Staged(kind, tx) && tx === tdy && ccMajor >= 9 && p.mapping === "cluster" &&
              p.block === 512;
            if (lnOwn) {
              const c = [2, 4, 8, 16].find((c) =>
                Math.ceil(Math.ceil(chunks / c) / LN_F32_STAGED_NV / 32) * 32 <= LN_F32_STAGED_BLOCK
              );
              if (c !== undefined) {
                const per = Math.ceil(chunks / c), block = Math.ceil(per / LN_F32_STAGED_NV / 32) * 32;
                Object.assign(g, { cluster: c, block, nv: Math.ceil(per / block) });
              }
            }
            // The staged kernels keep LayerNorm's dbias sums in shared memory whatever the dtype.
            const layout = (g: { cluster: number; block: number }) => {
              const columns = Math.ceil(chunks / g.cluster) * vec;
              const base = 16 * (g.block / 32) + (g.cluster > 1 ? CLUSTER_SUM_BYTES : 0) +
                (kind === "layer" && paramGrads ? 4 * columns : 0);
              return stagedShared(base, 2, columns, tx, tdy, "f32");
            };
            if (layout(g) > limits.maxSharedPerBlockOptin) Object.assign(g, own);
            const stages = oneRow ? bwdStages(kind, p.mapping as "cached" | "cluster", g.block, g.cluster) : 0;
            const stagedBytes = layout(g);
            if (ccMajor >= 9 && tx === tdy && stages > 0 && stagedBytes <= limits.maxSharedPerBlockOptin) {
              assert.deepEqual(p.staged, {
                kernel: `nk_${kind === "layer" ? "ln" : "rms"}_bwd_${p.mapping}staged_${tx}_${tdy}_f32`,
                stages: 2,
                sharedBytes: stagedBytes,
                ...g,
              }, `staged d ${d}`);
              assert.ok(
                g.nv <= maxvBwd(kind, tx, tdy, true) && g.nv * g.block >= Math.ceil(chunks / g.cluster) &&
                  g.block <= 512 && g.block % 32 === 0,
              );
            } else {
              assert.equal(p.staged, undefined, `not staged d ${d}`);
            }
            assert.equal(
              p.prefetch,
              oneRow && prefetchNextRow(kind, tx, p.mapping as "cached" | "cluster", p.block, chunks, p.cluster),
              `prefetch d ${d}`,
            );
            if (p.mapping === "cluster") {
              // Hopper only, and only past one 512-thread block's registers; each CTA caches its slice.
              assert.ok(ccMajor >= 9 && chunks > 512 * maxv, `cluster at d ${d}`);
              assert.ok([2, 4, 8, 16].includes(p.cluster), `cluster size ${p.cluster}`);
              assert.equal(p.tpr, p.block);
              assert.ok(
                p.nv >= 1 && p.nv <= maxv && p.nv * p.block >= Math.ceil(chunks / p.cluster),
                `d ${d}: c ${p.cluster} nv ${p.nv} block ${p.block}`,
              );
              // Block reductions, the cluster exchange (kernels/norm_fwd.cuh: 2 mbarriers, 2 × 16 ranks × 2 floats), and
              // LN's dbias sums of the CTA's columns.
              const ownCols = Math.ceil(chunks / p.cluster) * vec;
              assert.equal(CLUSTER_SUM_BYTES, 16 + 2 * 16 * 2 * 4);
              assert.equal(p.sharedBytes, 16 * (p.block / 32) + CLUSTER_SUM_BYTES + (dbiasInShared ? 4 * ownCols : 0));
              // The smallest cluster that holds the row.
              if (p.cluster > 2) assert.ok(Math.ceil(chunks / (p.cluster / 2)) > 512 * maxv);
              continue;
            }
            // Past the cluster's reach (16 CTAs of 512 threads) or off Hopper: wide or split.
            if (ccMajor >= 9 && (p.mapping === "wide" || p.mapping === "split")) {
              assert.ok(chunks > 16 * 512 * maxv, `d ${d}: ${p.mapping}`);
            }
            if (p.mapping === "split") {
              // Only where the sums fit neither in registers nor in shared memory.
              assert.ok(nacc > 0 && 64 + nacc * d * 4 > limits.maxSharedPerBlockOptin, `split at d ${d}`);
              assert.equal(p.rowsumKernel, `nk_${k}_bwd_rowsum_${tx}_${tdy}_f32`);
              assert.ok(p.block === 256 && p.tileColumns === 256 * 16 && p.sharedBytes === 0);
              assert.ok(p.rowsumBlock === 512 && p.rowsumShared === 4 * ((2 * 16 + 3) & ~3));
              continue;
            }
            if (p.mapping === "cached") {
              assert.ok(
                p.nv >= 1 && p.nv <= maxvBwd(kind, tx, tdy) && p.nv * p.tpr * vec >= d,
                `d ${d}: nv ${p.nv} tpr ${p.tpr}`,
              );
              assert.ok(p.tpr <= 32 ? (p.tpr & (p.tpr - 1)) === 0 : p.tpr === p.block);
              assert.equal(p.rowsPerBlock, p.block / p.tpr);
              const reduce = 16 * (p.block / 32); // both row sums at once: 4 floats per warp
              // Slots where several row groups add up their sums at the end; else LN's dbias sums (d floats).
              const slots = p.rowsPerBlock > 1 ? p.rowsPerBlock * nacc * d * 4 : dbiasInShared ? 4 * d : 0;
              assert.equal(p.sharedBytes, reduce + slots);
            } else {
              assert.equal(p.tpr, p.block);
              const reduce = 4 * ((2 * (p.block / 32) + 3) & ~3);
              // Parameter sums in shared memory (nv = 1) exactly when they fit.
              assert.equal(p.nv, nacc > 0 && reduce + nacc * d * 4 <= limits.maxSharedPerBlockOptin ? 1 : 0);
              assert.equal(p.sharedBytes, reduce + p.nv * nacc * d * 4);
              assert.ok(d > 512 * maxvBwd(kind, tx, tdy) * vec, `wide only past the register cache (d ${d})`);
            }
          }
        }
      }
    }
  }
  const limits = { maxThreadsPerBlock: 1024, warpSize: 32, maxSharedPerBlockOptin: 232448 };
  assert.ok(
    "unsupported" in
      planNormBackward(
        { kind: "rms", d: 8, xDtype: "f16", dyDtype: "f16", weightDtype: "bf16", paramGrads: true },
        limits,
      ),
  );
});

test("backward plan: clusters of 16 CTAs (sm_90's non-portable size) only past 8 CTAs' registers, only where allowed", () => {
  const h200 = { maxThreadsPerBlock: 1024, warpSize: 32, maxSharedPerBlockOptin: 232448, ccMajor: 9 };
  const plan = (kind: "layer" | "rms", d: number, x: DType, maxCluster?: number, paramGrads = true) => {
    const r = planNormBackward({ kind, d, xDtype: x, dyDtype: x, paramGrads }, { ...h200, maxCluster });
    assert.ok("plan" in r);
    return r.plan;
  };
  // f32 D = 131072: 32768 chunks, 2048 per CTA of 16: LN 512 threads × 4, RMS (6 chunks per thread) 352 × 6.
  for (const kind of ["layer", "rms"] as const) {
    const p = plan(kind, 131072, "f32", 16);
    const geometry = kind === "layer" ? [512, 4] : [352, 6];
    assert.deepEqual([p.mapping, p.cluster, p.block, p.nv, p.prefetch], ["cluster", 16, ...geometry, false], kind);
    assert.equal(p.kernel, `nk_${kind === "layer" ? "ln" : "rms"}_bwd_cluster_f32_f32_f32`);
    // Portable limit (the default): `split`, as before.
    assert.equal(plan(kind, 131072, "f32").mapping, "split");
    assert.equal(plan(kind, 131072, "f32", 8).mapping, "split");
    // Rows 8 CTAs hold keep 8 (the smallest cluster that holds the row).
    assert.equal(plan(kind, 65536, "f32", 16).cluster, 8);
  }
  // 16-bit D = 262144 (32768 chunks of 8) fits 16 CTAs; f32 D = 262144 does not: split with weights, else wide.
  assert.equal(plan("layer", 262144, "bf16", 16).cluster, 16);
  assert.equal(plan("layer", 262144, "f32", 16).mapping, "split");
  assert.equal(plan("layer", 262144, "f32", 16, false).mapping, "wide");
  // bwdPlanLimits: 16 on CUDA compute capability 9 only.
  const info = (cc: [number, number]) => ({
    maxThreadsPerBlock: 1024,
    warpSize: 32,
    maxSharedPerBlockOptin: 232448,
    computeCapability: cc,
  });
  assert.equal(bwdPlanLimits({ backend: "cuda", info: info([9, 0]) } as never).maxCluster, 16);
  assert.equal(bwdPlanLimits({ backend: "cuda", info: info([10, 0]) } as never).maxCluster, 8);
  assert.equal(bwdPlanLimits({ backend: "cuda", info: info([8, 0]) } as never).maxCluster, 8);
  assert.equal(bwdPlanLimits({ backend: "hip", info: info([9, 0]) } as never).maxCluster, 8);
});

test("backward plan: the chunks per thread mirror the kernel's register budget (kernels/norm_bwd.cuh)", () => {
  const src = ["bwd_common.cuh", "bwd_cached.cuh"].map((f) =>
    readFileSync(new URL(`../../kernels/${f}`, import.meta.url), "utf8")
  ).join("");
  const define = (name: string) => Number(src.match(new RegExp(`#define ${name} (\\d+)`))?.[1]);
  assert.equal(define("NK_MAXV_BWD"), MAXV_BWD);
  assert.equal(define("NK_BWD_REG_BUDGET"), BWD_REG_BUDGET);
  // Per chunk: x words + dy words + VEC sums (2·VEC for LN, except with 16-bit x and dy, whose dbias sums are in
  // shared memory); 72 registers / that, at most 6.
  assert.equal(maxvBwd("layer", "f32", "f32"), 4); // 4 + 4 + 8 = 16
  assert.equal(maxvBwd("layer", "bf16", "bf16"), 4); // 4 + 4 + 8 (dbias in shared memory) = 16
  assert.equal(maxvBwd("layer", "f16", "f32"), 5); // VEC 4: 2 + 4 + 8 = 14
  assert.ok(
    smemDbias("layer", "f16", "bf16") && !smemDbias("layer", "bf16", "f32") && !smemDbias("rms", "bf16", "bf16"),
  );
  // ... and the kernel's rule is the same: 8-element chunks (16-bit x and dy), or the staged kernels (ST), LayerNorm only.
  assert.match(src, /struct nk_bwd_smem_dbias \{\s*enum \{ V = LN && \(nk_bwd_geom<TX, TD>::VEC == 8 \|\| ST\) \};/);
  // The staged kernels (nk_bwd_cached's TM) ask for that rule with ST, for both the layout and the chunks per thread.
  assert.match(src, /MAXV = nk_bwd_maxv<TX, TD, LN, TMA>::V/);
  assert.match(src, /constexpr bool SB = nk_bwd_smem_dbias<TX, TD, LN, TMA>::V/);
  assert.ok(smemDbias("layer", "f32", "f32", true) && !smemDbias("rms", "f32", "f32", true));
  assert.equal(maxvBwd("layer", "f32", "f32", true), 6); // 4 + 4 + 4 = 12 → 6
  assert.equal(maxvBwd("layer", "bf16", "bf16", true), 4); // unchanged: already in shared memory
  assert.equal(maxvBwd("rms", "f32", "f32", true), 6);
  assert.equal(maxvBwd("rms", "f32", "f32"), 6); // 12 → 6
  assert.equal(maxvBwd("rms", "bf16", "bf16"), 4); // 16
  assert.equal(maxvBwd("rms", "bf16", "f32"), 6); // 10 → 7, capped at 6
});

test("backward plan: the next-row L2 prefetch rule (measured per shape class on the H200)", () => {
  assert.equal(prefetchNextRow("layer", "f32", "cluster", 512, 8192, 2), true);
  assert.equal(prefetchNextRow("rms", "f32", "cluster", 352, 8192, 4), true);
  assert.equal(prefetchNextRow("layer", "f32", "cluster", 512, 16384, 8), false);
  assert.equal(prefetchNextRow("rms", "bf16", "cached", 64, 256), true);
  // RMSNorm, 16-bit x, one row per block (H200, a8f365f): off for blocks ≤ 256 threads on rows ≥ 512 chunks.
  assert.equal(prefetchNextRow("rms", "bf16", "cached", 96, 256), true); // D = 2048
  assert.equal(prefetchNextRow("rms", "bf16", "cached", 128, 512), false); // D = 4096
  assert.equal(prefetchNextRow("rms", "f16", "cached", 256, 1024), false); // D = 8192
  assert.equal(prefetchNextRow("rms", "bf16", "cached", 384, 1536), true); // D = 12288
  assert.equal(prefetchNextRow("layer", "bf16", "cached", 192, 512), true); // LN D = 4096 keeps it
  assert.equal(prefetchNextRow("layer", "f32", "cached", 96, 256), true); // D = 1024
  assert.equal(prefetchNextRow("layer", "f32", "cached", 128, 512), false); // D = 2048
  assert.equal(prefetchNextRow("layer", "f32", "cached", 320, 1280), true); // D = 5120
  assert.equal(prefetchNextRow("rms", "f32", "cached", 512, 3072), false); // D = 12288
});

test("backward plan: bulk-staged rows (the measured rule, the layout's bytes, the kernels that exist)", () => {
  const h200 = { maxThreadsPerBlock: 1024, warpSize: 32, maxSharedPerBlockOptin: 232448, ccMajor: 9, maxCluster: 16 };
  const plan = (kind: "layer" | "rms", d: number, x: DType, dy = x, paramGrads = true, limits: object = h200) => {
    const r = planNormBackward({ kind, d, xDtype: x, dyDtype: dy, paramGrads }, { ...h200, ...limits });
    assert.ok("plan" in r);
    return r.plan;
  };
  // LN f32 D = 65536: a cluster of 8 × 512 threads, 8192 columns per CTA; staged in 8 CTAs of 416 threads × 5 chunks
  // (lnF32Staged). The staged shared memory: block reductions (13 warps × 16 bytes), the cluster exchange (272), the
  // dbias sums (8192 floats: the staged kernels keep them there), 3 mbarriers (24 → 32 bytes), the f32 weight slice
  // (32768) and two stages of x and dy slices (2 × 8192 × 8).
  const ln = plan("layer", 65536, "f32");
  assert.deepEqual([ln.mapping, ln.cluster, ln.block, ln.sharedBytes], ["cluster", 8, 512, 256 + 272]);
  assert.deepEqual(ln.staged, {
    kernel: "nk_ln_bwd_clusterstaged_f32_f32_f32",
    stages: 2,
    sharedBytes: 208 + 272 + 32768 + 32 + 32768 + 131072,
    block: 416,
    nv: 5,
    cluster: 8,
  });
  // Where the GPU holds none of a geometry's clusters (BwdLimits.smallStagedCtas false), the plan's own: 8 × 512 × 4.
  assert.deepEqual(plan("layer", 65536, "f32", "f32", true, { smallStagedCtas: false }).staged, {
    kernel: "nk_ln_bwd_clusterstaged_f32_f32_f32",
    stages: 2,
    sharedBytes: 256 + 272 + 32768 + 32 + 32768 + 131072,
    block: 512,
    nv: 4,
    cluster: 8,
  });
  // LN f32 elsewhere: D = 16384 2 × 416, 131072 16 × 416; the plan's own geometry where its CTAs are smaller than 512
  // threads or it is one block: D = 12288 2 × 384 × 4, 8192 one block of 512 × 4.
  const geometry = (d: number) => {
    const st = plan("layer", d, "f32").staged;
    return [st?.kernel.includes("cachedstaged"), st?.cluster, st?.block, st?.nv];
  };
  assert.deepEqual(geometry(8192), [true, 1, 512, 4]);
  assert.deepEqual(geometry(12288), [false, 2, 384, 4]);
  assert.deepEqual(geometry(16384), [false, 2, 416, 5]);
  assert.deepEqual(geometry(131072), [false, 16, 416, 5]);
  assert.equal(plan("layer", 5120, "f32").staged, undefined); // a 320-thread block: LayerNorm's one-row blocks under 384 do not stage
  // LN bf16 D = 12288: one block of 384 threads per row; its dbias sums (12288 floats) precede the staged area.
  const lb = plan("layer", 12288, "bf16");
  assert.deepEqual([lb.mapping, lb.block, lb.sharedBytes], ["cached", 384, 16 * 12 + 4 * 12288]);
  assert.deepEqual(lb.staged, {
    kernel: "nk_ln_bwd_cachedstaged_bf16_bf16_f32",
    stages: 2,
    sharedBytes: lb.sharedBytes + 32 + 4 * 12288 + 2 * 12288 * 4,
    block: 384,
    nv: 4,
    cluster: 1,
  });
  // LN bf16 in staged CTAs of 128 threads × 4 chunks (4096 columns; bench/RESULTS.md, stops 32-33): 57,712 bytes with
  // the weight slice (8192 of them), 3 per H200 SM (233,472 bytes, 1 KB reserved per CTA).
  const base128 = cachedShared(smemDbias("layer", "bf16", "bf16", true), 128, 32, 1, 2, 32768, 4096, 8);
  const b128 = stagedShared(base128, 2, 4096, "bf16", "bf16", "bf16");
  assert.deepEqual([b128, Math.floor(233472 / (b128 + 1024))], [57712, 3]);
  assert.equal(b128 - stagedShared(base128, 2, 4096, "bf16", "bf16", "f32"), -8192); // f32 weights: a slice twice as large
  // LN f32 D = 32768: 4 × 512 register clusters, staged in 4 × 416 × 5.
  const lf = plan("layer", 32768, "f32");
  assert.deepEqual([lf.cluster, lf.block, lf.nv], [4, 512, 4]);
  assert.deepEqual(lf.staged, {
    kernel: "nk_ln_bwd_clusterstaged_f32_f32_f32",
    stages: 2,
    sharedBytes: 208 + 272 + 4 * 8192 + 32 + 4 * 8192 + 2 * 8192 * 8,
    block: 416,
    nv: 5,
    cluster: 4,
  });
  // RMS 16-bit rows that take clusters of 512-thread CTAs stage in CTAs of 128 threads × 4 chunks: RMS bf16 D = 32768 on 8
  // of them (4096 chunks of 8); their shared memory is that geometry's (reductions of 4 warps, the exchange, 3 mbarriers,
  // the weight slice, 2 stages).
  const rb = plan("rms", 32768, "bf16");
  assert.deepEqual([rb.cluster, rb.block, rb.staged?.cluster, rb.staged?.block, rb.staged?.nv], [2, 512, 8, 128, 4]);
  assert.equal(rb.staged?.sharedBytes, 64 + 272 + 32 + 4 * 512 * 8 + 2 * 512 * 8 * 4);
  // ... but not past 16 of them (RMS bf16 D = 131072 keeps 8 × 512), nor LayerNorm 16-bit (8 × 512 at D = 131072,
  // bf16 weights; with f32 weights its dbias slots, weights and 2 stages need 256 KB: not staged).
  assert.deepEqual([plan("rms", 131072, "bf16").staged?.cluster, plan("rms", 131072, "bf16").staged?.block], [8, 512]);
  const lb16 = planNormBackward({
    kind: "layer",
    d: 131072,
    xDtype: "bf16",
    dyDtype: "bf16",
    weightDtype: "bf16",
    paramGrads: true,
  }, h200);
  assert.ok("plan" in lb16);
  assert.deepEqual([lb16.plan.staged?.cluster, lb16.plan.staged?.block, lb16.plan.staged?.sharedBytes], [
    8,
    512,
    528 + 4 * 16384 + 32 + 2 * 16384 + 2 * 16384 * 4,
  ]);
  assert.equal(plan("layer", 131072, "bf16").staged, undefined);
  assert.equal(plan("rms", 65536, "bf16", "bf16", true, { maxCluster: 8 }).staged?.block, 512); // 16 × 128 not allowed
  assert.equal(plan("layer", 65536, "f32", "f32", true, { maxCluster: 8 }).staged?.block, 416);
  // Not staged: RMSNorm's one-row blocks, LayerNorm's blocks under 384 threads, clusters of 2 × 512 threads (RMS f32
  // none at these D; LN bf16 D = 32768), x and dy of different dtypes, off sm_90, and rows of several per block.
  assert.equal(plan("rms", 12288, "bf16").staged, undefined);
  assert.equal(plan("layer", 4096, "bf16").block, 128);
  assert.equal(plan("layer", 4096, "bf16").staged, undefined);
  assert.deepEqual([
    plan("layer", 32768, "bf16").cluster,
    plan("layer", 32768, "bf16").block,
    plan("layer", 32768, "bf16").staged,
  ], [2, 512, undefined]);
  assert.deepEqual([
    plan("rms", 16384, "f32").cluster,
    plan("rms", 16384, "f32").block,
    plan("rms", 16384, "f32").staged?.stages,
  ], [2, 352, 2]);
  assert.equal(plan("layer", 65536, "bf16", "f16").staged, undefined);
  assert.equal(plan("layer", 65536, "f32", "f32", true, { ccMajor: 8, maxCluster: 8 }).staged, undefined);
  assert.equal(plan("layer", 65536, "f32", "f32", true, { ccMajor: 10, maxCluster: 8 }).staged, undefined); // not measured there
  assert.equal(plan("layer", 512, "f32").staged, undefined);
  // Without parameter gradients there are no dbias slots: the staged area starts right after the reductions.
  const ng = plan("layer", 12288, "bf16", "bf16", false);
  assert.deepEqual([ng.sharedBytes, ng.staged?.sharedBytes], [16 * 12, 16 * 12 + 32 + 4 * 12288 + 2 * 12288 * 4]);
  // Every staged kernel the plan can name is one norm.cu builds (NK_BWD_STAGED_DTYPES: LN cached/cluster, RMS cluster).
  for (const kind of ["layer", "rms"] as const) {
    for (const x of ["f32", "f16", "bf16"] as DType[]) {
      for (const w of ["f32", x] as DType[]) {
        for (let d = 1024; d <= 262144; d *= 2) {
          const r = planNormBackward({ kind, d, xDtype: x, dyDtype: x, weightDtype: w, paramGrads: true }, h200);
          if ("plan" in r && r.plan.staged) {
            assert.ok(NORM_BWD_KERNELS.includes(r.plan.staged.kernel), r.plan.staged.kernel);
          }
        }
      }
    }
  }
  // The kernel's flags field: stages in bits 4..7 (NK_BWD_STAGES_SHIFT), at most NK_BWD_MAX_STAGES.
  const src = readFileSync(new URL("../../kernels/bwd_common.cuh", import.meta.url), "utf8");
  assert.match(src, /#define NK_BWD_STAGES_SHIFT 4\n#define NK_BWD_MAX_STAGES 4\n/);
});

test("bwdFull: D a multiple of the chunk, every pointer and row stride aligned to its chunk (nk_bwd_full)", () => {
  // f32 x and dy: 4-element chunks of 16 bytes everywhere.
  assert.equal(bwdFull(4096, "f32", "f32", "f32", 256n, 4096, 512n, 4096, 1024n, 4096, 2048n), true);
  assert.equal(bwdFull(4094, "f32", "f32", "f32", 256n, 4094, 512n, 4094, 1024n, 4094, 2048n), false); // D % 4
  assert.equal(bwdFull(4096, "f32", "f32", "f32", 260n, 4096, 512n, 4096, 1024n, 4096, 2048n), false); // x + 4 bytes
  assert.equal(bwdFull(4096, "f32", "f32", "f32", 256n, 4098, 512n, 4096, 1024n, 4096, 2048n), false); // x stride
  assert.equal(bwdFull(4096, "f32", "f32", "f32", 256n, 4096, 512n, 4096, 1024n, 4096, 2056n), false); // weight + 8
  // bf16 x and dy: 8-element chunks (16 bytes); an f32 weight chunk is 32 bytes, aligned to 16.
  assert.equal(bwdFull(4096, "bf16", "bf16", "f32", 256n, 4096, 512n, 4104, 1024n, 4096, 16n), true);
  assert.equal(bwdFull(4096, "bf16", "bf16", "bf16", 256n, 4096, 512n, 4100, 1024n, 4096, 16n), false); // dx stride: 8 bytes
  // bf16 x with f32 dy: 4-element chunks, 8 bytes of x, 16 of dy.
  assert.equal(bwdFull(4100, "bf16", "f32", "f32", 8n, 4100, 24n, 4100, 16n, 4100, 32n), true);
  assert.equal(bwdFull(4100, "bf16", "f32", "f32", 8n, 4100, 24n, 4100, 8n, 4100, 32n), false); // dy 8 bytes off
  // No weight: address 0 is aligned.
  assert.equal(bwdFull(64, "f16", "f16", "f16", 0n, 64, 0n, 64, 0n, 64, 0n), true);
});
