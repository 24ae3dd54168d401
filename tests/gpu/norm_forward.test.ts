/**
 * The forward norms on CUDA against the float64 reference, for every dtype combination, mapping and the
 * awkward sizes (odd D, strided rows, huge D, many rows). Outputs are poisoned (NaN) before each run.
 *
 * Tolerances (stated here, checked per element):
 *   f32 output:       |y − ref| ≤ 1e-5 · (1 + |ref|)
 *   f16/bf16 output:  |y − round(ref)| ≤ 1 ulp of the output dtype at |ref| + 1e-6 · (1 + |ref|)
 *                     (ref = float64 result from the same, already rounded, inputs; round = nearest-even to
 *                     the output dtype). The kernel computes y in f32 and rounds once; the second term is
 *                     that f32 result's own error, which exceeds an f16 ulp only for |y| ≲ 1e-3 (where f16
 *                     ulps are ≤ 6e-8): there the bound amounts to 2 ulp, nowhere else.
 * Skipped, with the reason, when there is no CUDA device.
 */
import assert from "node:assert/strict";
import { cpuNormForward, Device, type DType, layerNorm, loadKernels, rmsNorm, type Tensor } from "../../mod.ts";
import { NORM_FWD_ARGS, normKernel, planLimits } from "../../ops/kernels.ts";
import {
  fwdFull,
  type LaunchPlan,
  type Mapping,
  planNorm,
  planNormInvariant,
  stagedShared,
  stagesParams,
  stashBuilt,
  stashShared,
  WIDE_MAX_ROW_BYTES,
} from "../../ops/plan.ts";
import { LaunchConfig } from "../../runtime/module.ts";
import { roundTo, ulpOf } from "../../runtime/dtype.ts";
import { gpuTest, randoms, roundedTo } from "../fixtures/helpers.ts";

const NAN_BITS = 0x7fc00000;
type Kind = "layer" | "rms";
const COMBOS: [DType, DType, DType][] = [];
for (const tin of ["f32", "f16", "bf16"] as DType[]) {
  for (const tout of ["f32", "f16", "bf16"] as DType[]) {
    const weightTypes: DType[] = tin === "f32" ? ["f32"] : ["f32", tin];
    for (const tw of weightTypes) COMBOS.push([tin, tout, tw]);
  }
}

/**
 * outlier: the first element of every even row set to this value (far from the rest of its row). scale: x = scale ·
 * (1 + v / 1000) for the random v in [-3, 3) (huge values with a spread f32 keeps).
 */
interface Case {
  kind: Kind;
  rows: number;
  d: number;
  tin: DType;
  tout: DType;
  tw: DType;
  pad?: number;
  affine?: boolean;
  mean?: number;
  outlier?: number;
  scale?: number;
  /** With affine (the default): LayerNorm without its weight, or without its bias. */
  noWeight?: boolean;
  noBias?: boolean;
  /** The call with `batchInvariant: true` (planNormInvariant's tuned plan, or the fused kernels). */
  invariant?: boolean;
}

/**
 * Runs one case (with stats, then without: the same y required); returns the worst error in units of the tolerance (≤ 1 passes). `kernels` gets the name of the
 * kernel the op launches for it: the plan's, or its fullKernel where fwdFull holds for these very tensors (the
 * op's own test; tests/unit/hotpath.test.ts checks on a fake driver that the op launches that one).
 */
function runCase(dev: Device, c: Case, kernels?: Set<string>): number {
  const { kind, rows, d, tin, tout, tw } = c;
  const seed = rows * 7919 + d * 31 + tin.length * 3 + tout.length;
  const xs = randoms(rows * d, seed, -3, 3);
  if (c.mean) { for (let i = 0; i < xs.length; i++) xs[i] = c.mean + xs[i] * 1e-2; }
  if (c.scale) { for (let i = 0; i < xs.length; i++) xs[i] = c.scale * (1 + xs[i] / 1000); }
  if (c.outlier !== undefined) { for (let r = 0; r < rows; r += 2) xs[r * d] = c.outlier; }
  const xin = roundedTo(xs, tin); // what the device actually holds
  const affine = c.affine ?? true;
  const wv = affine && !c.noWeight ? roundedTo(randoms(d, seed + 1, 0.5, 1.5), tw) : undefined;
  const bv = affine && kind === "layer" && !c.noBias ? roundedTo(randoms(d, seed + 2, -1, 1), tw) : undefined;
  const xStride = d + (c.pad ?? 0);
  using x = dev.tensor(xs, [rows, d], { dtype: tin, rowStride: xStride });
  using w = wv ? dev.tensor(wv, [d], { dtype: tw }) : undefined;
  using b = bv ? dev.tensor(bv, [d], { dtype: tw }) : undefined;
  using y = dev.empty([rows, d], { dtype: tout, rowStride: d + ((c.pad ?? 0) > 0 ? 3 : 0) });
  y.buffer.fill(0xff); // NaN in every dtype
  if (kernels) {
    const p = planOf(dev, kind, rows, d, tin, tout, w?.dtype ?? b?.dtype);
    const full = p.fullKernel !== null &&
      fwdFull(d, tin, tout, x.ptr, x.rowStride, y.ptr, y.rowStride, w?.ptr ?? 0n, b?.ptr ?? 0n);
    kernels.add(full ? p.fullKernel! : p.kernel);
  }
  const eps = kind === "layer" ? 1e-5 : 1e-6, batchInvariant = c.invariant ?? false;
  const r = kind === "layer"
    ? layerNorm(x, { weight: w, bias: b, eps, out: y, stats: true, batchInvariant })
    : rmsNorm(x, { weight: w, eps, out: y, stats: true, batchInvariant });
  const got = y.readSync(), rstd = r.rstd.readSync(), mean = r.mean.readSync();
  r.mean.close();
  r.rstd.close();
  // Without stats the kernels run their store-free loop (the tile compiles it apart: STATS in kernels/norm_fwd.cuh) and
  // the op its prepared hot path: y must be the same values, element for element (checked against float64 below).
  y.buffer.fill(0xff);
  if (kind === "layer") layerNorm(x, { weight: w, bias: b, eps, out: y, batchInvariant });
  else rmsNorm(x, { weight: w, eps, out: y, batchInvariant });
  const gotNoStats = y.readSync();
  for (let i = 0; i < rows * d; i++) {
    if (!Object.is(gotNoStats[i], got[i])) {
      assert.fail(
        `${JSON.stringify(c)}: without stats y[${(i / d) | 0}][${i % d}] = ${gotNoStats[i]}, with stats ${got[i]}`,
      );
    }
  }
  const ref = cpuNormForward({ kind, rows, d, x: xin, xStride: d, weight: wv, bias: bv, eps });
  let worst = 0;
  // `outlier` rows: y = ((x - k) - dm)·rstd·w + b with k = x[0], the kernels' shift, and dm the mean of x - k: dm's
  // summation error over d terms of size |k - mean| (and x - k's rounding) carries into y scaled by rstd·w. It stays
  // below 1e-5 where k is near the mean (every other case); with k hundreds of std away, 2^-20 · |k - mean| · rstd ·
  // |w| more is allowed (about 9 f32 ulps of |k - mean|; an f32 emulation of the kernels' sums uses at most 0.13 of
  // it). A variance taken in one pass where it should not be would still fail rstd's 2e-6 below.
  const shiftTol = (i: number): number => {
    const row = (i / d) | 0;
    if (c.outlier === undefined || row % 2 !== 0 || kind !== "layer") return 0;
    return 2 ** -20 * Math.abs(c.outlier - ref.mean[row]) * ref.rstd[row] * Math.abs(wv ? wv[i % d] : 1);
  };
  for (let i = 0; i < rows * d; i++) {
    const e = ref.y[i];
    const tol = (tout === "f32" ? 1e-5 * (1 + Math.abs(e)) : ulpOf(e, tout) + 1e-6 * (1 + Math.abs(e))) + shiftTol(i);
    const err = Math.abs(got[i] - (tout === "f32" ? e : roundTo(e, tout))) / tol;
    if (!(err <= 1)) {
      assert.fail(`${JSON.stringify(c)}: y[${(i / d) | 0}][${i % d}] = ${got[i]}, float64 ${e} (tolerance ${tol})`);
    }
    if (err > worst) worst = err;
  }
  for (let row = 0; row < rows; row++) {
    assert.ok(Math.abs(rstd[row] - ref.rstd[row]) <= 2e-6 * ref.rstd[row] + 1e-30, `${JSON.stringify(c)} rstd[${row}]`);
    if (kind === "layer") {
      // The mean is written as k + dm (k = x[0], the shift; dm the mean of x - k): where x[0] lies far from the mean
      // (the `outlier` rows) its error scales with |x[0]|, not with |mean|: 1e-6 · |x[0]| more there (about 8 to 16 f32
      // ulps of x[0]; the sum of d terms of size |x[0]|). Tiny against the row's spread, which dx uses it with.
      const kTol = c.outlier !== undefined && row % 2 === 0 ? 1e-6 * Math.abs(c.outlier) : 0;
      assert.ok(
        Math.abs(mean[row] - ref.mean[row]) <= 1e-6 * (1 + Math.abs(ref.mean[row])) + kTol,
        `${JSON.stringify(c)} mean[${row}]: ${mean[row]} vs ${ref.mean[row]}`,
      );
    } else {
      assert.equal(mean[row], 0, `${JSON.stringify(c)}: RMSNorm reports mean 0`);
    }
  }
  return worst;
}

const SIZES: [number, number][] = [
  // A few rows: the `latency` mapping up to 4 chunks per thread (16-bit D ≤ 16384, f32 ≤ 8192).
  [1, 1],
  [37, 3],
  [9, 127],
  [64, 128],
  [11, 1000],
  [40, 1024],
  [5, 4097],
  [6, 5120],
  [4, 8192],
  [3, 12288],
  [2, 65537],
  // Past 2 rows per SM (264 on the H200): the bandwidth mappings `rows` and `block` for the same kinds of D.
  [300, 3],
  [280, 127],
  [270, 1000],
  [270, 4097],
  [270, 5120],
  // The tile for aligned rows of 1, 2, 4, ..., 32 whole chunks (nk_{ln|rms}_rowstile_*; tileRows: D ≤ 128, RMSNorm ≤ 64): 16-bit x
  // in 1, 2, 4, 8 and 16 chunks (f32: 2, 4, 8, 16 and 32), with rows left over in the last step; D = 256 (16-bit: 32
  // chunks, f32: 64) past it, in the `rows` kernel.
  [1100, 8],
  [300, 16],
  [300, 32],
  [300, 64],
  [300, 128],
  [270, 256],
  // rows of 64–128 KB (f32 20000 and 32768, 16-bit 40001), masked and vector paths: on sm_90 RMSNorm's blocks of up
  // to 1024 threads and LayerNorm's clusters (fewer rows than SMs), `wide` elsewhere; f32 140000 (past a cluster of
  // 8's registers): `wide` everywhere.
  [3, 20000],
  [2, 32768],
  [2, 40001],
  [1, 140000],
];
/**
 * LayerNorm with a row per SM (`sms`: 132 on the H200) past a 512-thread block's registers, on sm_90: a block of up to
 * 1024 threads up to 128 KB rows, masked and vector paths (f32 20001 and 32768, 16-bit 40001 and 49152; 16-bit 20001
 * and 32768 fit 512 threads); past 128 KB a cluster per row on a persistent cluster grid (more rows than resident
 * clusters, so each cluster loops over rows): f32 40001 and 49152. Without clusters (sm_80): `wide`.
 */
const lnWideSizes = (
  sms: number,
): [number, number][] => [[sms + 8, 20001], [sms + 1, 32768], [sms + 8, 40001], [sms + 1, 49152]];

/** The mapping ops/plan.ts gives a case on `dev` (what the op launches). */
function mappingOf(dev: Device, kind: Kind, rows: number, d: number, tin: DType, tout: DType, tw: DType): Mapping {
  return planOf(dev, kind, rows, d, tin, tout, tw).mapping;
}
/** The plan ops/plan.ts makes for a case on `dev` (tw undefined: no weight or bias). */
function planOf(
  dev: Device,
  kind: Kind,
  rows: number,
  d: number,
  tin: DType,
  tout: DType,
  tw: DType | undefined,
): LaunchPlan {
  const r = planNorm({ kind, rows, d, inputDtype: tin, outputDtype: tout, paramDtype: tw }, planLimits(dev));
  if (!("plan" in r)) throw new Error(r.unsupported);
  return r.plan;
}
/** Every forward mapping this device has: `cluster` and `stash` need sm_90 (`stash`: compute capability 9 only). */
const allMappings = (dev: Device): Mapping[] =>
  dev.info.computeCapability[0] === 9
    ? ["block", "cluster", "latency", "rows", "stash", "wide"]
    : ["block", "latency", "rows", "wide"];

gpuTest("every dtype combination × LN/RMS × odd and even D: within tolerance of float64", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const worst: Record<string, number> = {};
  const reached = new Set<Mapping>();
  // The kernels the cases launch (runCase): LayerNorm's block and cluster with both paths and the vector-only ones,
  // its two-pass rows kernel (rows of 1–2 lanes); both kinds' tile.
  const kernels = new Set<string>();
  const lnWide = lnWideSizes(dev.info.multiprocessors);
  for (const [tin, tout, tw] of COMBOS) {
    for (const kind of ["layer", "rms"] as Kind[]) {
      for (const size of [...SIZES, ...lnWide]) {
        const [rows, d] = size;
        const mapping = mappingOf(dev, kind, rows, d, tin, tout, tw);
        if (kind === "layer" && tin === "f32" && lnWide.includes(size)) {
          const cc9 = dev.info.computeCapability[0] === 9;
          const stash = d % 4 === 0 && stashBuilt(tin, tout, tw);
          assert.equal(
            mapping,
            !cc9 ? "wide" : d * 4 <= WIDE_MAX_ROW_BYTES ? "block" : stash ? "stash" : "cluster",
            `LayerNorm ${rows} x ${d}`,
          );
        }
        reached.add(mapping);
        const e = runCase(dev, { kind, rows, d, tin, tout, tw }, kernels);
        const key = `${tin}->${tout} (w ${tw})`;
        worst[key] = Math.max(worst[key] ?? 0, e);
      }
    }
  }
  for (const [k, v] of Object.entries(worst)) console.log(`# worst error ${k}: ${v.toFixed(3)} × tolerance`);
  assert.deepEqual([...reached].sort(), allMappings(dev), "the sizes reach every mapping");
  const cc9 = dev.info.computeCapability[0] === 9;
  const lnKernels = new Set([...kernels].filter((k) => k.startsWith("nk_ln_")).map((k) => k.split("_")[2]));
  const lnWant = [
    "block",
    "blockfull",
    ...(cc9 ? ["cluster", "clusterfull"] : []),
    "latency",
    "rows",
    "rowstile",
    "rowstwopass",
    ...(cc9 ? ["stash"] : []),
    "wide",
  ];
  assert.deepEqual(
    [...lnKernels].sort(),
    lnWant,
    "LayerNorm's kernels: with and without the masked path, two-pass rows, the tile",
  );
  const rmsKernels = new Set([...kernels].filter((k) => k.startsWith("nk_rms_")).map((k) => k.split("_")[2]));
  const rmsWant = [
    "block",
    ...(cc9 ? ["cluster"] : []),
    "latency",
    "rows",
    "rowstile",
    ...(cc9 ? ["stash"] : []),
    "wide",
  ];
  assert.deepEqual([...rmsKernels].sort(), rmsWant, "RMSNorm's kernels, the tile among them");
});

gpuTest("strided rows (random padding), no affine, huge D and many rows", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  let s = 5;
  const pad = (): number => (s = (s * 48271) % 2147483647) % 13;
  for (
    const [tin, tout, tw] of [["f32", "f32", "f32"], ["bf16", "bf16", "f32"], ["f16", "f32", "f16"]] as [
      DType,
      DType,
      DType,
    ][]
  ) {
    for (const kind of ["layer", "rms"] as Kind[]) {
      for (const [rows, d] of [[7, 1000], [33, 127], [5, 8192], [3, 4097], [3, 20000], [2, 48000]]) {
        runCase(dev, { kind, rows, d, tin, tout, tw, pad: 1 + pad() });
      }
      runCase(dev, { kind, rows: 12, d: 1024, tin, tout, tw, affine: false });
      runCase(dev, { kind, rows: 2, d: 262144, tin, tout, tw });
      runCase(dev, { kind, rows: 100_000, d: 128, tin, tout, tw });
      runCase(dev, { kind, rows: 100_000, d: 3, tin, tout, tw, pad: 2 });
    }
  }
});

gpuTest("stability: rows with mean 1e4 and std 1e-2 in f32 stay within 1e-3 relative error of float64", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  // [d, rows]: a few rows of each mapping; a row per SM (132 on the H200) of 30000 (sm_90: a 1024-thread block, else
  // `wide`), of 70001 (past 128 KB: a cluster per row on a persistent cluster grid on sm_90), and of 140000 (past a
  // cluster of 8: LayerNorm's `wide`, one-pass statistics), asserted below.
  const sms = dev.info.multiprocessors, cc9 = dev.info.computeCapability[0] === 9;
  const big = [30000, sms + 8], cl = [70001, sms], wide = [140000, sms];
  for (const c of [[128, 2048], [1024, 256], [8192, 32], [20000, 13], [65537, 3], big, cl, wide]) {
    const [d, rows] = c;
    const want = c === wide
      ? "wide"
      : c === cl
      ? (cc9 ? "cluster" : "wide")
      : c === big
      ? (cc9 ? "block" : "wide")
      : undefined;
    if (want) assert.equal(mappingOf(dev, "layer", rows, d, "f32", "f32", "f32"), want, `stability ${rows} x ${d}`);
    const xs = randoms(rows * d, d, -1, 1).map((v) => 1e4 + v * 1e-2);
    using x = dev.tensor(xs, [rows, d]);
    using y = layerNorm(x);
    const got = y.readSync();
    const ref = cpuNormForward({ kind: "layer", rows, d, x: Float64Array.from(xs), xStride: d, eps: 1e-5 });
    let worst = 0;
    // Normwise relative error: max |Δy| / max |y| (per element it would divide by values near zero).
    let maxRef = 0;
    for (let i = 0; i < got.length; i++) maxRef = Math.max(maxRef, Math.abs(ref.y[i]));
    for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - ref.y[i]) / maxRef);
    console.log(`# stability D=${d}: worst relative error ${worst.toExponential(2)}`);
    assert.ok(worst <= 1e-3, `D=${d}: ${worst}`);
  }
});

/** Rows × D that take `rows` (300 × 128, 768), `block` (270 × 4096) and, on sm_90, `cluster` (the rest; `wide` elsewhere). */
// f32 49152 from a row per SM: `stash`; on fewer rows than SMs: the cluster (16-bit 49152: a 768-thread block).
const shiftShapes = (
  sms: number,
): [number, number][] => [[300, 128], [300, 768], [270, 4096], [sms + 8, 20000], [sms + 1, 49152], [sms - 1, 49152]];

gpuTest(
  "LayerNorm rows whose first element (the shift) lies far from the rest, beside ordinary rows: within tolerance",
  async () => {
    // The one-pass statistics (ONEPASS, kernels/norm_fwd.cuh) hold only while the shift k = x[0] is near the mean;
    // these rows (x[0] = 300, the rest in [-3, 3): |mean - k| from about 11 std at d = 128 to 136 at d = 49152) must take the centred second pass,
    // and every other row beside them in the same warp, block or cluster loop stays correct. Without that pass var loses
    // about log2(d) bits and rstd misses its 2e-6 tolerance (runCase checks y, mean and rstd; y and the mean with the
    // shift's own rounding allowed for, see runCase).
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev);
    const sms = dev.info.multiprocessors, cc9 = dev.info.computeCapability[0] === 9;
    const reached = new Set<Mapping>();
    for (const [tin, tout] of [["f32", "f32"], ["bf16", "bf16"], ["f16", "f32"]] as [DType, DType][]) {
      // 1, 7 and 64 rows: the `latency` mapping (one pass there too); 270-300: rows and block; then clusters.
      for (const [rows, d] of [[1, 4096], [7, 8192], [64, 2048], ...shiftShapes(sms)]) {
        reached.add(mappingOf(dev, "layer", rows, d, tin, tout, "f32"));
        // 300: far (the centred pass); 5.02 and 6.06 (x[0] at 2.9 and 3.5 std of the rest, std sqrt(3)): the one-pass
        // statistics kept and, past 3 std, not: rstd within 2e-6 on both sides of the threshold.
        for (const outlier of [300, 5.02, 6.06]) {
          runCase(dev, {
            kind: "layer",
            rows,
            d,
            tin,
            tout,
            tw: "f32",
            outlier,
          });
        }
      }
    }
    assert.deepEqual(
      [...reached].sort(),
      cc9 ? ["block", "cluster", "latency", "rows", "stash"] : ["block", "latency", "rows", "wide"],
    );
  },
);

gpuTest(
  "batchInvariant: true on plain norms (the invariant tuned plan or the fused kernels): within tolerance of float64",
  async () => {
    // Every kernel the invariant plan takes (`rows`, LayerNorm's two-pass `rows` for rows of fewer lanes than a warp,
    // `block` and LayerNorm's vector-only `blockfull`, up to rows of 20000) and the fused kernels where it has none (the
    // tile's D 128), at decode and prefill row counts; LayerNorm also with its shifted rows (outlier).
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev, { fused: true });
    const limits = planLimits(dev), launched = new Set<string>();
    // y in x's dtype: the only output the fused path takes besides the quantized ones.
    const combos: [DType, DType, DType][] = [
      ["f32", "f32", "f32"],
      ["bf16", "bf16", "f32"],
      ["f16", "f16", "f16"],
      ["bf16", "bf16", "bf16"],
    ];
    const shapes = [
      [1, 512],
      [300, 512],
      [7, 768],
      [300, 1024],
      [11, 1000],
      [270, 2048],
      [5, 4096],
      [270, 4097],
      [
        270,
        5120,
      ],
      [3, 8192],
      [300, 128],
      [2, 20000],
    ];
    for (const [tin, tout, tw] of combos) {
      for (const kind of ["layer", "rms"] as Kind[]) {
        for (const [rows, d] of shapes) {
          const inv = planNormInvariant({ kind, rows, d, inputDtype: tin, outputDtype: tout, paramDtype: tw }, limits);
          launched.add(inv !== null && "plan" in inv ? inv.plan.kernel.split("_")[2] : "fused");
          runCase(dev, { kind, rows, d, tin, tout, tw, invariant: true });
          if (kind === "layer") runCase(dev, { kind, rows, d, tin, tout, tw, invariant: true, outlier: 300 });
        }
      }
    }
    assert.deepEqual([...launched].sort(), ["block", "fused", "rows", "rowstwopass"]);
  },
);

gpuTest(
  "LayerNorm rows of about 1e19 with a first element of 0: the one-pass sum of squares overflows, the centred one does not",
  async () => {
    // t = x - x[0] ≈ 1e19, so the one-pass sum of t^2 (d · 1e38) overflows f32 while the centred sum (x[0]'s own 1e38,
    // the rest about 1e32 each) and var (≈ 1e38 / d) stay finite: these rows must take the centred pass (ONEPASS's
    // finiteness test in kernels/norm_fwd.cuh); the other rows, all near 1e19, keep the one-pass statistics (in `rows`
    // those sharing a warp with an overflowing row take the centred pass too: the choice is a warp vote). 7 rows: `latency`.
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev);
    const sms = dev.info.multiprocessors;
    for (const tin of ["f32", "bf16"] as DType[]) {
      for (const [rows, d] of [[7, 8192], ...shiftShapes(sms)]) {
        runCase(dev, { kind: "layer", rows, d, tin, tout: "f32", tw: "f32", scale: 1e19, outlier: 0 });
      }
    }
  },
);

gpuTest("a NaN row stays in its row; 100 repeated runs are bitwise identical (every mapping)", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const reached = new Set<Mapping>();
  // A few rows (latency), then 300 rows (rows, block) at the same D; clusters and wide (f32) for long rows; the `rows`
  // tile, whose warps hold 32 / n rows (n = 2, 16 chunks per row), where a row's NaN must not reach its neighbours.
  const cases: [number, number, DType][] = [
    [64, 100, "bf16"],
    [300, 100, "bf16"],
    [1100, 16, "bf16"],
    [300, 128, "bf16"],
    [64, 1024, "bf16"],
    [300, 1024, "bf16"],
    [64, 12288, "bf16"],
    [300, 12288, "bf16"],
    [20, 50000, "bf16"],
    [4, 262144, "bf16"],
    [2, 262144, "f32"],
    [dev.info.multiprocessors + 1, 65536, "f32"],
  ];
  for (const [rows, d, dtype] of cases) {
    reached.add(mappingOf(dev, "layer", rows, d, dtype, dtype, "f32"));
    const xs = randoms(rows * d, d + 3);
    xs[d + (d >> 1)] = NaN; // row 1
    using x = dev.tensor(xs, [rows, d], { dtype });
    using y = dev.empty([rows, d], { dtype });
    y.buffer.fill32(NAN_BITS);
    layerNorm(x, { out: y });
    const first = new Uint8Array(y.buffer.byteLength);
    y.buffer.read(first);
    const vals = y.readSync();
    for (let r = 0; r < rows; r++) {
      const row = vals.subarray(r * d, (r + 1) * d);
      assert.ok(r === 1 ? row.every(Number.isNaN) : row.every(Number.isFinite), `D=${d} row ${r}`);
    }
    const again = new Uint8Array(first.length);
    for (let i = 0; i < 100; i++) {
      layerNorm(x, { out: y });
      y.buffer.read(again);
      if (i % 10 === 0 || i === 99) assert.deepEqual(again, first, `D=${d} run ${i}`);
    }
  }
  assert.deepEqual([...reached].sort(), allMappings(dev), "every mapping ran");
});

gpuTest(
  "LayerNorm's 1024-thread-class blocks with weight/bias staged in shared memory (sm_90): whole and partial rows, weight or bias alone, neither",
  async () => {
    // The plan gives these launches the staging slots (stagedShared). The kernel (nk_fwd_block_full) stages where the
    // launch also has weight and bias and every thread holds 8 whole chunks (D = 32768 f32, 65536 16-bit: the staged loop,
    // nk_fwd_block_staged); the other cases here (partial rows, weight or bias alone, neither) take its plain loop with
    // the slots given: both sides of that dispatch, against float64.
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev);
    const sms = dev.info.multiprocessors;
    const cc9 = dev.info.computeCapability[0] === 9;
    let staged = 0;
    // 32768 f32 / 65536 16-bit: 1024 threads x 8 chunks, every chunk valid; 20000 f32 / 40000 16-bit: 640 x 8 for 5000
    // chunks, the last threads' eighth chunk past the row.
    const cases: [number, DType][] = [[32768, "f32"], [20000, "f32"], [65536, "bf16"], [40000, "f16"]];
    for (const [d, tin] of cases) {
      const rows = sms + 3;
      for (const tout of [tin, "f32"] as DType[]) {
        const p = planOf(dev, "layer", rows, d, tin, tout, tin);
        if (cc9) {
          assert.equal(p.mapping, "block", `${tin} D=${d}`);
          assert.ok(p.block[0] > 512, `${tin} D=${d}: ${p.block[0]} threads`);
          const wantShared = stagesParams(tin, tin) ? stagedShared(p.block[0]) : 2 * (p.block[0] / 32) * 4;
          assert.equal(p.sharedBytes, wantShared, `${tin} D=${d}: the staging slots where stagesParams holds`);
          if (p.sharedBytes === stagedShared(p.block[0])) staged++;
        }
        for (const [noWeight, noBias] of [[false, false], [true, false], [false, true]]) {
          const kernels = new Set<string>();
          runCase(dev, { kind: "layer", rows, d, tin, tout, tw: tin, noWeight, noBias }, kernels);
          if (cc9) {
            assert.deepEqual([...kernels], [`nk_ln_blockfull_${tin}_${tout}_${tin}`], "the vector-only block kernel");
          }
        }
        runCase(dev, { kind: "layer", rows, d, tin, tout, tw: tin, affine: false });
      }
    }
    if (cc9) assert.ok(staged >= 4, `the f32 cases ran staged (${staged})`);
  },
);

gpuTest(
  "rows of 1024 × 9–16 chunks in one block, part in shared memory (`stash`, sm_90): geometries, dtypes, weight/bias or none, unaligned rows",
  async () => {
    // nk_fwd_stash (kernels/norm_fwd.cuh): 8 chunks per thread in registers, the rest (2, 4 or 8 here) in shared memory.
    // Unaligned rows (pad 1 f32 / 3 16-bit elements) are not FULL: the same kernel runs `wide`'s masked loop. Every case
    // against float64 (runCase: y, mean, rstd; with and without stats), with more rows than SMs (a block per row).
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev);
    const sms = dev.info.multiprocessors;
    const cc9 = dev.info.computeCapability[0] === 9;
    let ran = 0;
    // [D, x dtype, y dtype, threads, nv]: 1024 × 16 (f32 65536, bf16 131072), 1024 × 10, 1024 × 12, 768 × 12.
    const cases: [number, DType, DType, number, number][] = [
      [65536, "f32", "f32", 1024, 16],
      [131072, "bf16", "bf16", 1024, 16],
      [131072, "f16", "f32", 1024, 16],
      [40960, "f32", "f32", 1024, 10],
      [98304, "bf16", "f32", 1024, 12],
      [36864, "f32", "f32", 768, 12],
    ];
    for (const [d, tin, tout, threads, nv] of cases) {
      const rows = sms + 5;
      for (const kind of ["layer", "rms"] as Kind[]) {
        const p = planOf(dev, kind, rows, d, tin, tout, tin);
        if (cc9) {
          assert.deepEqual([p.mapping, p.block[0], p.nv, p.sharedBytes], [
            "stash",
            threads,
            nv,
            stashShared(threads, nv),
          ], `${kind} ${tin} D=${d}`);
          ran++;
        }
        const kernels = new Set<string>();
        runCase(dev, { kind, rows, d, tin, tout, tw: tin }, kernels);
        if (cc9) assert.deepEqual([...kernels], [`nk_${kind === "layer" ? "ln" : "rms"}_stash_${tin}_${tout}_${tin}`]);
        runCase(dev, { kind, rows, d, tin, tout, tw: tin, pad: tin === "f32" ? 1 : 3 }); // not FULL: wide's loop
        if (kind === "layer") {
          runCase(dev, { kind, rows, d, tin, tout, tw: tin, noWeight: true });
          runCase(dev, { kind, rows, d, tin, tout, tw: tin, noBias: true });
          runCase(dev, { kind, rows, d, tin, tout, tw: tin, outlier: 300 }); // the centred pass over registers and slots
        } else {
          runCase(dev, { kind, rows, d, tin, tout, tw: tin, affine: false });
        }
      }
    }
    // f32 rows with no weight or bias (the op's default weight dtype is f32): the stash too.
    runCase(dev, { kind: "layer", rows: sms + 1, d: 65536, tin: "f32", tout: "f32", tw: "f32", affine: false });
    if (cc9) assert.equal(ran, 2 * cases.length);
  },
);

gpuTest("in place (out: x) for every mapping", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const reached = new Set<Mapping>();
  const sms = dev.info.multiprocessors;
  // RMSNorm through every mapping (300 x 64: its tile, asserted below); LayerNorm through `latency` (4 rows; its one-pass statistics, vector and masked
  // paths), through the `rows` tile, with a row per SM through 1024-thread blocks (sm_90, rows ≤ 128 KB) on their vector and masked paths, past
  // 128 KB through a persistent cluster grid (sm_90) whose clusters loop over rows, and past a cluster of 8 through `wide`.
  const cc9 = dev.info.computeCapability[0] === 9;
  const cases: [Kind, number, number, Mapping?][] = [
    ...[[4, 64], [300, 64], [4, 3000], [300, 3000], [4, 20000], [4, 50000], [4, 200000]].map((
      [r, d],
    ): [Kind, number, number] => ["rms", r, d]),
    ["layer", 4, 4096, "latency"],
    ["layer", 4, 3001, "latency"],
    ["layer", 3000, 128, "rows"], // the tile (nk_ln_rowstile_f32_f32_f32, asserted below): aligned rows of 32 chunks
    ["layer", sms, 32768, cc9 ? "block" : "wide"],
    ["layer", sms, 20001, cc9 ? "block" : "wide"],
    ["layer", 2 * sms + 5, 49152, cc9 ? "stash" : "wide"],
    ["layer", sms, 70001, cc9 ? "cluster" : "wide"],
    ["layer", sms, 140000, "wide"],
  ];
  for (const [kind, rows, d, want] of cases) {
    const mapping = mappingOf(dev, kind, rows, d, "f32", "f32", "f32");
    if (want) assert.equal(mapping, want, `LayerNorm ${rows} x ${d}`);
    if (kind === "layer" && d === 128) {
      assert.equal(planOf(dev, kind, rows, d, "f32", "f32", undefined).fullKernel, "nk_ln_rowstile_f32_f32_f32");
    }
    if (kind === "rms" && rows === 300 && d === 64) {
      assert.equal(planOf(dev, kind, rows, d, "f32", "f32", undefined).fullKernel, "nk_rms_rowstile_f32_f32_f32");
    }
    reached.add(mapping);
    const xs = randoms(rows * d, d);
    using x: Tensor = dev.tensor(xs, [rows, d]);
    if (kind === "rms") rmsNorm(x, { out: x });
    else layerNorm(x, { out: x });
    const got = x.readSync();
    const eps = kind === "rms" ? 1e-6 : 1e-5;
    const ref = cpuNormForward({ kind, rows, d, x: xs, xStride: d, eps });
    for (let i = 0; i < got.length; i++) {
      assert.ok(Math.abs(got[i] - ref.y[i]) <= 1e-5 * (1 + Math.abs(ref.y[i])), `${kind} D=${d} i=${i}`);
    }
  }
  assert.deepEqual([...reached].sort(), allMappings(dev), "every mapping ran in place");
});

gpuTest(
  "L2 prefetch ahead (rows, block; back-to-back and strided rows): within tolerance of float64, and bitwise equal to the launch without it",
  async () => {
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev);
    const hopper = planLimits(dev).ccMajor >= 9;
    // Enough rows that rows ahead are fetched (the plan asks for about 2 MiB of x ahead), the last CTA short of rows.
    const cases: (Case & { mapping: Mapping })[] = [
      { kind: "layer", rows: 2050, d: 1024, tin: "f32", tout: "f32", tw: "f32", mapping: "rows" }, // a CTA's rows in one prefetch
      { kind: "layer", rows: 2050, d: 1024, tin: "f32", tout: "bf16", tw: "f32", pad: 4, mapping: "rows" }, // strided: one per row
      { kind: "rms", rows: 4099, d: 512, tin: "bf16", tout: "bf16", tw: "bf16", mapping: "rows" },
      { kind: "layer", rows: 700, d: 4096, tin: "bf16", tout: "f32", tw: "f32", mapping: "block" },
      { kind: "rms", rows: 700, d: 4100, tin: "f16", tout: "f16", tw: "f16", pad: 8, mapping: "block" }, // masked path
    ];
    for (const c of cases) {
      const r = planNorm({
        kind: c.kind,
        rows: c.rows,
        d: c.d,
        inputDtype: c.tin,
        outputDtype: c.tout,
        paramDtype: c.tw,
      }, planLimits(dev));
      assert.ok("plan" in r);
      const p: LaunchPlan = r.plan;
      assert.equal(p.mapping, c.mapping, JSON.stringify(c));
      if (hopper) {
        assert.ok(p.prefetch > 0 && p.prefetch < c.rows, `prefetch ${p.prefetch} rows ahead: ${JSON.stringify(c)}`);
      }
      assert.ok(runCase(dev, c) <= 1);
      // The same launch with prefetch 0, into a second output: the prefetch is a hint, the bytes are the same.
      const xStride = c.d + (c.pad ?? 0), eps = c.kind === "layer" ? 1e-5 : 1e-6;
      using x = dev.tensor(randoms(c.rows * c.d, c.d, -3, 3), [c.rows, c.d], { dtype: c.tin, rowStride: xStride });
      using w = dev.tensor(randoms(c.d, 5, 0.5, 1.5), [c.d], { dtype: c.tw });
      using b = dev.tensor(randoms(c.d, 6, -1, 1), [c.d], { dtype: c.tw });
      using y1 = dev.empty([c.rows, c.d], { dtype: c.tout }), y0 = dev.empty([c.rows, c.d], { dtype: c.tout });
      y1.buffer.fill(0xff);
      y0.buffer.fill(0xff);
      if (c.kind === "layer") layerNorm(x, { weight: w, bias: b, eps, out: y1 });
      else rmsNorm(x, { weight: w, eps, out: y1 });
      const k = normKernel(dev, p.kernel, NORM_FWD_ARGS);
      const config = { grid: p.grid, block: p.block, sharedBytes: p.sharedBytes, cluster: p.cluster };
      k.launch(dev.stream, new LaunchConfig(config), [
        x,
        y0,
        w,
        c.kind === "layer" ? b : null,
        null,
        null,
        c.rows,
        c.d,
        xStride,
        c.d,
        eps,
        p.tpr,
        p.nv,
        0,
      ]);
      dev.stream.synchronize();
      const a1 = new Uint8Array(y1.buffer.byteLength), a0 = new Uint8Array(y0.buffer.byteLength);
      y1.buffer.read(a1);
      y0.buffer.read(a0);
      assert.deepEqual(a1, a0, `prefetch ${p.prefetch} vs 0: ${JSON.stringify(c)}`);
    }
  },
);
