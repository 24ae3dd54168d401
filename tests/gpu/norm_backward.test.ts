/**
 * The backward pass on CUDA against the float64 reference (tolerances stated in backward_cases.ts), for
 * every dtype combination, every mapping (`cached`, `cluster` on Hopper, `wide`, `rowsum` + `tile`; the long-rows
 * test asserts which ones its cases reached), odd D, strided rows, accumulation, the
 * modules, and bitwise determinism over 20 runs. Skipped, with the reason, when there is no CUDA device.
 */
import assert from "node:assert/strict";
import { Device, type DType, LayerNorm, layerNorm, loadKernels, RMSNorm, rmsNorm } from "../../mod.ts";
import { ulpOf } from "../../runtime/dtype.ts";
import { devicePlanBackward, launchBackward } from "../../ops/backward.ts";
import { bwdFull, cachedShared, maxvBwd, smemDbias } from "../../ops/plan_bwd.ts";
import { type BwdCase, runBwdCase } from "../fixtures/backward_cases.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

const COMBOS: [DType, DType, DType][] = [];
for (const tx of ["f32", "f16", "bf16"] as DType[]) {
  for (const tdy of ["f32", "f16", "bf16"] as DType[]) {
    for (const tw of (tx === "f32" ? ["f32"] : ["f32", tx]) as DType[]) COMBOS.push([tx, tdy, tw]);
  }
}

/** The plan the op makes for a case on this device (devicePlanBackward: what the test then exercises). */
function devicePlan(dev: Device, c: BwdCase) {
  return devicePlanBackward(dev, {
    kind: c.kind,
    d: c.d,
    xDtype: c.tx,
    dyDtype: c.tdy,
    weightDtype: c.affine === false ? undefined : c.tw,
    paramGrads: c.affine !== false,
  });
}
const mapping = (dev: Device, c: BwdCase): string => {
  const r = devicePlan(dev, c);
  return "plan" in r ? r.plan.mapping : "unsupported";
};
/** CTAs per cluster of the op's plan for a case (1: no cluster). */
const clusterSize = (dev: Device, c: BwdCase): number => {
  const r = devicePlan(dev, c);
  return "plan" in r ? r.plan.cluster : 0;
};

function check(dev: Device, c: BwdCase, seen?: Set<string>): void {
  seen?.add(mapping(dev, c));
  const r = runBwdCase(dev, c);
  const what = `${c.kind} rows ${c.rows} d ${c.d} x ${c.tx} dy ${c.tdy} w ${c.tw}${c.pad ? ` pad ${c.pad}` : ""}`;
  assert.ok(r.dx <= 1, `${what}: dx error ${r.dx} × tolerance`);
  assert.ok(r.dweight <= 1, `${what}: dweight error ${r.dweight} × tolerance`);
  assert.ok(r.dbias <= 1, `${what}: dbias error ${r.dbias} × tolerance`);
}

for (const kind of ["layer", "rms"] as const) {
  gpuTest(`${kind} backward: every dtype combination × D ∈ {1, 3, 127, 1000, 4097, 8192}`, async () => {
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev, { backward: true });
    for (const [tx, tdy, tw] of COMBOS) {
      for (const d of [1, 3, 127, 1000, 4097, 8192]) check(dev, { kind, rows: d > 4000 ? 40 : 300, d, tx, tdy, tw });
    }
  });
  gpuTest(`${kind} backward: long rows (cluster, wide, split), strided rows, accumulation, no affine`, async () => {
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev, { backward: true });
    const seen = new Set<string>();
    for (
      const [tx, tdy, tw] of [["f32", "f32", "f32"], ["bf16", "bf16", "bf16"], ["f16", "f32", "f32"]] as [
        DType,
        DType,
        DType,
      ][]
    ) {
      check(dev, { kind, rows: 6, d: 65537, tx, tdy, tw }, seen);
      check(dev, { kind, rows: 3, d: 262144, tx, tdy, tw }, seen);
      check(dev, { kind, rows: 3, d: 262144, tx, tdy, tw, affine: false }, seen);
      check(dev, { kind, rows: 500, d: 1024, tx, tdy, tw, pad: 5 }, seen);
      check(dev, { kind, rows: 7, d: 20000, tx, tdy, tw, pad: 8 }, seen);
      check(dev, { kind, rows: 2000, d: 768, tx, tdy, tw, accumulate: true }, seen);
      check(dev, { kind, rows: 100, d: 512, tx, tdy, tw, affine: false }, seen);
      // The vector path without a weight is compiled apart from the one with (nk_bwd_cached's WK): one row
      // per block and a cluster, unweighted.
      check(dev, { kind, rows: 300, d: 4096, tx, tdy, tw, affine: false }, seen);
      check(dev, { kind, rows: 40, d: 50000, tx, tdy, tw, affine: false }, seen);
    }
    // sm_90's non-portable clusters of 16 CTAs (rows past 8 CTAs' registers: here f32 rows of 100000–131072
    // elements): vector and masked, with and without a weight, and more rows than resident clusters.
    if (dev.info.computeCapability[0] === 9) {
      const c16: BwdCase[] = [
        { kind, rows: 5, d: 131072, tx: "f32", tdy: "f32", tw: "f32" },
        { kind, rows: 4, d: 120001, tx: "f32", tdy: "f32", tw: "f32", pad: 3 },
        { kind, rows: 3, d: 131072, tx: "f32", tdy: "f32", tw: "f32", affine: false },
        { kind, rows: 40, d: 100000, tx: "f32", tdy: "f32", tw: "f32" },
      ];
      for (const c of c16) {
        assert.equal(clusterSize(dev, c), 16, `cluster of 16 at d ${c.d}`);
        check(dev, c, seen);
      }
    }
    // Many rows: the persistent grid (and the persistent clusters) loop over them.
    check(dev, { kind, rows: 100_000, d: 128, tx: "bf16", tdy: "bf16", tw: "f32" }, seen);
    check(dev, { kind, rows: 1500, d: 16384, tx: "bf16", tdy: "bf16", tw: "bf16" }, seen);
    check(dev, { kind, rows: 700, d: 24576, tx: "f32", tdy: "f32", tw: "f32", pad: 4 }, seen);
    const want = dev.info.computeCapability[0] >= 9
      ? ["cached", "cluster", "split", "wide"]
      : ["cached", "split", "wide"];
    assert.deepEqual([...seen].sort(), want, "mappings exercised");
  });
  // Small and quick: every mapping on a few rows (a short run, e.g. under compute-sanitizer with a test filter).
  gpuTest(`${kind} backward: every mapping on a few rows`, async () => {
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev, { backward: true });
    const seen = new Set<string>();
    for (
      const c of [
        { rows: 64, d: 512 },
        { rows: 9, d: 4100, pad: 4 },
        { rows: 5, d: 20001 },
        { rows: 2, d: 262144, affine: false },
        { rows: 2, d: 262144 },
        { rows: 3, d: 131072 },
        { rows: 3, d: 120001, pad: 2 },
      ]
    ) check(dev, { kind, tx: "bf16", tdy: "f32", tw: "f32", ...c }, seen);
    // 16-bit x and dy: LayerNorm keeps its dbias sums in shared memory there (nk_bwd_smem_dbias) on every path
    // of `cached` / `cluster`: row groups (D = 512), one row per block, vector (4096) and masked (4100, padded
    // rows), a cluster (33000, masked; 40000, vector). Few rows, so that compute-sanitizer can run it.
    for (
      const c of [
        { rows: 64, d: 512 },
        { rows: 9, d: 4096 },
        { rows: 9, d: 4100, pad: 4 },
        { rows: 5, d: 33000 },
        { rows: 5, d: 40000 },
      ]
    ) check(dev, { kind, tx: "f16", tdy: "f16", tw: "f16", ...c }, seen);
    const want = dev.info.computeCapability[0] >= 9
      ? ["cached", "cluster", "split", "wide"]
      : ["cached", "split", "wide"];
    assert.deepEqual([...seen].sort(), want, "mappings exercised");
  });
  gpuTest(
    `${kind} backward: 20 runs are bitwise identical (cached and cluster; 16 CTAs at d 200000 and staged f32 rows on sm_90)`,
    async () => {
      using dev = Device.open({ backend: "cuda" });
      await loadKernels(dev, { backward: true });
      // (d 200000: 16 rows, about two per resident cluster of 16 CTAs, keeps the 20 runs' host checks short.)
      const cases: BwdCase[] = [256, 4096, 50000, 200000].map((d) => ({
        kind,
        rows: d > 100000 ? 16 : d > 10000 ? 64 : 3000,
        d,
        tx: "bf16",
        tdy: "bf16",
        tw: "f32",
        seed: 99,
      }));
      // f32 rows of 65536 through the staged kernels (on sm_90; LN in its own geometry, 5 chunks per thread and the dbias
      // sums in shared memory): 40 rows, more than the resident clusters take at once, so stages are refilled.
      cases.push({ kind, rows: 40, d: 65536, tx: "f32", tdy: "f32", tw: "f32", seed: 98 });
      for (const c of cases) {
        const d = c.d;
        if (d === 200000 && dev.info.computeCapability[0] === 9) {
          assert.equal(clusterSize(dev, c), 16, "16 CTAs at d 200000");
        }
        if (d === 65536 && dev.info.computeCapability[0] === 9) {
          const p = devicePlan(dev, c);
          assert.ok(
            "plan" in p && p.plan.staged && (kind === "rms" || p.plan.staged.nv === 5),
            `${kind} f32 d 65536: staged (LN: 5 chunks per thread)`,
          );
        }
        const r0 = runBwdCase(dev, c), first = r0.bits;
        assert.ok(
          r0.dx <= 1 && r0.dweight <= 1 && r0.dbias <= 1,
          `${kind} ${c.tx} d ${d}: within tolerance (${r0.dx}, ${r0.dweight}, ${r0.dbias})`,
        );
        for (let i = 1; i < 20; i++) {
          const b = runBwdCase(dev, c, { reference: false }).bits; // the bits of the checked first run, 19 times
          assert.deepEqual(new Uint32Array(b.dx.buffer), new Uint32Array(first.dx.buffer), `dx run ${i} d ${d}`);
          assert.deepEqual(
            new Uint32Array(b.dweight!.buffer),
            new Uint32Array(first.dweight!.buffer),
            `dweight run ${i} d ${d}`,
          );
          if (kind === "layer") {
            assert.deepEqual(new Uint32Array(b.dbias!.buffer), new Uint32Array(first.dbias!.buffer));
          }
        }
      }
    },
  );
}

// The bulk-staged kernels (sm_90) against the register kernels in the same geometry: dx bit for bit (the same arithmetic
// in the same order), dweight/dbias to summation order (a staged block's shared memory can shrink the persistent grid),
// with and without a weight, over enough rows that every stage is refilled. The op takes them: its results are checked
// against the float64 reference by the tests above (e.g. d 16384 and 24576, and 131072 on 16 CTAs) and, for the staged
// plans in geometries of their own (RMS 16-bit in 128-thread CTAs, smallStagedCtas; LN f32 at 5 chunks per thread in
// CTAs of <= 416 threads, lnF32Staged), here.
gpuTest("backward: the bulk-staged kernels give the register kernels' dx bit for bit (sm_90)", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev, { backward: true });
  const cases: [("layer" | "rms"), number, DType, DType, number][] = [
    ["layer", 65536, "f32", "f32", 40],
    ["layer", 12288, "bf16", "f32", 900],
    ["layer", 16384, "f16", "f16", 700],
    ["rms", 32768, "f32", "f32", 90],
    ["rms", 131072, "bf16", "bf16", 40],
    ["layer", 131072, "f32", "f32", 37],
    ["layer", 32768, "f32", "f32", 60],
    ["rms", 32768, "bf16", "bf16", 60],
    ["rms", 65536, "f16", "f32", 40],
  ];
  let staged = 0;
  for (const [kind, d, x, w, rows] of cases) {
    for (const withW of [true, false]) {
      const r = devicePlanBackward(dev, {
        kind,
        d,
        xDtype: x,
        dyDtype: x,
        weightDtype: withW ? w : undefined,
        paramGrads: withW,
      });
      assert.ok("plan" in r);
      if (dev.info.computeCapability[0] !== 9) {
        assert.equal(r.plan.staged, undefined, "staged kernels only on sm_90");
        continue;
      }
      assert.ok(r.plan.staged, `${kind} ${x} d ${d}: the plan has a staged variant`);
      // Where the staged geometry holds more chunks per thread than the register kernel can (LN f32's 5, lnF32Staged),
      // the staged kernel in the plan's own geometry (BwdLimits.smallStagedCtas false) is compared; the op's own plan
      // is checked against the float64 reference below.
      const input = { kind, d, xDtype: x, dyDtype: x, weightDtype: withW ? w : undefined, paramGrads: withW };
      const own = r.plan.staged!.nv > maxvBwd(kind, x, x)
        ? devicePlanBackward(dev, input, { smallStagedCtas: false })
        : r;
      assert.ok(
        "plan" in own && own.plan.staged && own.plan.staged.nv <= maxvBwd(kind, x, x),
        `${kind} ${x} d ${d}: a geometry both kernels take`,
      );
      // The register kernel in the staged variant's geometry (its own CTAs where smallStagedCtas gave it smaller ones).
      const st = own.plan.staged!,
        vec = x === "f32" ? 4 : 8,
        columns = Math.ceil(Math.ceil(d / vec) / st.cluster) * vec;
      const { staged: _, ...plain } = own.plan;
      const unstaged = {
        ...plain,
        block: st.block,
        tpr: st.block,
        nv: st.nv,
        cluster: st.cluster,
        sharedBytes: cachedShared(smemDbias(kind, x, x), st.block, 32, 1, plain.nacc, d, columns, st.cluster),
      };
      const xv = randoms(rows * d, d + rows, -2, 2), dyv = randoms(rows * d, d + rows + 1, -1, 1);
      using xt = dev.tensor(xv, [rows, d], { dtype: x });
      using dy = dev.tensor(dyv, [rows, d], { dtype: x });
      using wt = withW ? dev.tensor(randoms(d, d + 2, 0.5, 1.5), [d], { dtype: w }) : undefined;
      const f = kind === "layer"
        ? layerNorm(xt, { weight: wt, stats: true })
        : rmsNorm(xt, { weight: wt, stats: true });
      f.y.close();
      using mean = f.mean, rstd = f.rstd!;
      const run = (plan: typeof r.plan) => {
        using dx = dev.empty([rows, d], { dtype: x });
        using dw = withW ? dev.empty([d], { dtype: w }) : undefined;
        using db = withW && kind === "layer" ? dev.empty([d], { dtype: w }) : undefined;
        for (const t of [dx, dw, db]) t?.buffer.fill(0xff); // poisoned: NaN until written
        launchBackward(plan, {
          dy,
          x: xt,
          weight: wt,
          mean: kind === "layer" ? mean : undefined,
          rstd,
          dx,
          dweight: dw,
          dbias: db,
          accumulate: false,
          stream: dev.stream,
          pdtype: w,
        });
        const bytes = new Uint8Array(dx.buffer.byteLength);
        dx.buffer.read(bytes);
        // Whether launchBackward takes a plan's staged variant for this call (every row whole, aligned chunks).
        const full = bwdFull(d, x, x, withW ? w : "f32", xt.ptr, d, dx.ptr, d, dy.ptr, d, wt?.ptr ?? 0n);
        return { bytes, full, sums: [dw, db].filter((t) => t !== undefined).map((t) => t!.readSync()) };
      };
      const a = run(own.plan), b = run(unstaged);
      assert.ok(a.full, "the call qualifies: the staged kernel ran");
      const what = `${kind} ${x} d ${d} rows ${rows} weight ${withW}`;
      assert.ok(a.bytes.every((v, i) => v === b.bytes[i]), `${what}: staged dx differs from the register kernel's`);
      // Sums over ≤ 900 rows of terms up to ~4: a reordering moves an f32 sum by ~1e-4 where it cancels; 16-bit
      // outputs by an ulp (2^-8 relative for bf16).
      const [rel, abs] = w === "f32" ? [1e-5, 1e-3] : [2 ** -7, 1e-2];
      a.sums.forEach((g, k) =>
        g.forEach((v, j) => {
          const want = b.sums[k][j];
          assert.ok(
            Number.isFinite(v) && Math.abs(v - want) <= rel * Math.abs(want) + abs,
            `${what}: sum ${k} column ${j}: ${v} vs ${want}`,
          );
        })
      );
      staged++;
    }
  }
  if (dev.info.computeCapability[0] !== 9) return;
  assert.equal(staged, 2 * cases.length);
  // The staged plans in geometries of their own through the op, against the float64 reference: RMS 16-bit in 128-thread
  // CTAs (smallStagedCtas), LN f32 at 5 chunks per thread (lnF32Staged: clusters of 2, 4, 8 and 16; D = 8192 and 12288
  // keep their geometry, staged with the dbias sums in shared memory).
  for (
    const c of [
      { kind: "layer", rows: 20, d: 32768, tx: "f32", tdy: "f32", tw: "f32" },
      { kind: "layer", rows: 30, d: 16384, tx: "f32", tdy: "f32", tw: "f32" },
      { kind: "layer", rows: 50, d: 8192, tx: "f32", tdy: "f32", tw: "f32" },
      { kind: "layer", rows: 40, d: 12288, tx: "f32", tdy: "f32", tw: "f32" },
      { kind: "layer", rows: 17, d: 65536, tx: "f32", tdy: "f32", tw: "f32" },
      { kind: "layer", rows: 9, d: 131072, tx: "f32", tdy: "f32", tw: "f32" },
      { kind: "rms", rows: 20, d: 32768, tx: "bf16", tdy: "bf16", tw: "bf16" },
      { kind: "rms", rows: 20, d: 65536, tx: "f16", tdy: "f16", tw: "f32" },
    ] as BwdCase[]
  ) {
    const p = devicePlan(dev, c);
    const want = c.kind === "rms" ? { block: 128 } : c.d <= 12288 ? { nv: 4 } : { nv: 5 };
    const own = "plan" in p && p.plan.staged &&
      Object.entries(want).every(([k, v]) => p.plan.staged![k as "nv" | "block"] === v);
    assert.ok(own, `${c.kind} ${c.tx} d ${c.d}: staged in its own geometry`);
    check(dev, c);
  }
});

// The modules on CUDA against the same module on the CPU device (float64 inside, outputs rounded to the dtype), two
// steps so that the gradients accumulate: y and dx (bf16) within 1 bf16 ulp (at the larger of the two values) plus
// 1e-5 * (1 + |cpu|), as one rounding can land either side; weightGrad / biasGrad (f32, 2 steps × 64 rows added) within
// 1e-4 * (1 + |cpu|).
for (const kind of ["rms", "layer"] as const) {
  const what = kind === "rms"
    ? "RMSNorm module (zero-centred weight)"
    : "LayerNorm module (int8 per-channel weight, bias)";
  gpuTest(`${what} on CUDA: y, dx and the accumulated gradients match the CPU device`, async () => {
    using gpu = Device.open({ backend: "cuda" });
    await loadKernels(gpu, { backward: true });
    using cpu = Device.open({ backend: "cpu" });
    const d = 2048, rows = 64;
    const xv = randoms(rows * d, 5, -2, 2), dyv = randoms(rows * d, 6, -1, 1), wv = randoms(d, 7, 0.5, 1.5);
    const bv = randoms(d, 8, -1, 1), scales = randoms(d, 9, 0.004, 0.012);
    const codes = Int8Array.from({ length: d }, (_, j) => (j % 2 ? -1 : 1) * (1 + ((j * 37) % 127))); // no zero code
    const run = (dev: Device) => {
      using m = kind === "rms" ? new RMSNorm(dev, d, { zeroCentered: true }) : new LayerNorm(dev, d);
      m.load(kind === "rms" ? { weight: wv } : { weight: { int8: codes, scale: scales }, bias: bv });
      using x = dev.tensor(xv, [rows, d], { dtype: "bf16" });
      using dy = dev.tensor(dyv, [rows, d], { dtype: "bf16" });
      let y: Float32Array = new Float32Array(), dx: Float32Array = new Float32Array();
      for (let i = 0; i < 2; i++) {
        using yt = m.forward(x);
        y = yt.readSync();
        using dxt = m.backward(dy);
        dx = dxt.readSync();
      }
      return { y, dx, ...m.state() };
    };
    const g = run(gpu), c = run(cpu);
    const near16 = (name: string, a: Float32Array, b: Float32Array) => {
      assert.deepEqual([a.length, b.length], [rows * d, rows * d], `${name}: lengths`);
      for (let i = 0; i < b.length; i++) {
        const tol = Math.max(ulpOf(a[i], "bf16"), ulpOf(b[i], "bf16")) + 1e-5 * (1 + Math.abs(b[i]));
        assert.ok(Math.abs(a[i] - b[i]) <= tol, `${name}[${i}]: ${a[i]} (CUDA) vs ${b[i]} (CPU)`);
      }
    };
    near16("y", g.y, c.y);
    near16("dx", g.dx, c.dx);
    const grads = kind === "rms" ? ["weightGrad"] as const : ["weightGrad", "biasGrad"] as const;
    for (const k of grads) {
      const a = g[k]!, b = c[k]!;
      assert.ok(b.some((v) => v !== 0), `${k}: the CPU device's gradient is not all zeros`);
      for (let j = 0; j < d; j++) {
        assert.ok(Math.abs(a[j] - b[j]) <= 1e-4 * (1 + Math.abs(b[j])), `${k}[${j}]: ${a[j]} vs ${b[j]}`);
      }
    }
  });
}
