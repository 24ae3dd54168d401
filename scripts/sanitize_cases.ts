/**
 * Small launches of every kernel family for compute-sanitizer (scripts/gpu-sanitize.sh): each mapping the launch
 * plans can take, once aligned (the vector-only / staged kernel where there is one) and once with padded row strides
 * (the masked kernel), at the smallest candidate shape the plan maps to it, checked against the float64 CPU reference.
 *
 *   deno run -A scripts/sanitize_cases.ts --family fwd|bwd|diag|fused   # bun scripts/sanitize_cases.ts --family …
 *   deno run -A scripts/sanitize_cases.ts --dry-run                  # the shapes and kernels for an H200, no GPU
 *
 * `--only TEXT` / `--skip TEXT` keep / drop the fwd or bwd cases whose description (as printed) contains TEXT: one case
 * alone under a tool, or the family without it (`--skip` may be given several times).
 *
 * Exit status: 0 all results match, 1 a result is wrong, 2 no CUDA device or bad arguments.
 */
import {
  cpuNormBackward,
  cpuNormForward,
  Device,
  type FloatDType,
  histogram,
  layerNorm,
  layerNormBackward,
  loadKernels,
  rmsNorm,
  rmsNormBackward,
  sanityCheck,
  tensorStats,
} from "../mod.ts";
import { bwdPlanLimits, planLimits } from "../ops/kernels.ts";
import { CLUSTER_GEOMETRIES, type NormKind, type PlanLimits, planNorm } from "../ops/plan.ts";
import { type BwdLimits, planNormBackward, STAGED_GEOMETRIES } from "../ops/plan_bwd.ts";
import type { DeviceInfo } from "../runtime/driver.ts";
import { FAKE_H200 } from "../tests/fixtures/fake_cuda.ts";
import { describeCase, type FusedCase, runFusedCase } from "../tests/fixtures/fused_cases.ts";
import { FUSED_KERNELS, FUSED_TRIPLE_KERNELS } from "../ops/plan_fused.ts";
import type { QuantDType } from "../runtime/dtype.ts";

export type Family = "fwd" | "bwd" | "diag";
/** x, y (forward) or dy (backward), weight dtypes. */
export type Triple = readonly [FloatDType, FloatDType, FloatDType];
export const TRIPLES: readonly Triple[] = [["f32", "f32", "f32"], ["bf16", "bf16", "f32"], ["f16", "f16", "f16"]];
/**
 * Bytes of x at most (the sanitizer slows kernels ~100×): 4.5 M f32 elements. The `stash` mapping needs 132 rows of
 * 33 K f32 (66 K 16-bit) elements, 17.6 MB.
 */
export const MAX_X_BYTES = 18_000_000;

const ROWS = [2, 4, 8, 132, 140, 300, 1024, 2048];
const DS = [
  32,
  64,
  128,
  256,
  512,
  1024,
  2048,
  4096,
  8192,
  12288,
  16384,
  20480,
  24576,
  32768,
  33280,
  40960,
  49152,
  65536,
  66560,
  98304,
  131072,
  140000,
  200000,
  262144,
];
/** Shapes whose D is no whole number of chunks: the masked tail (rows, block, cluster and wide-row mappings). */
const ODD: readonly (readonly [number, number])[] = [[512, 77], [300, 3001], [8, 20001], [2, 140001]];

export interface SanitizeCase {
  kind: NormKind;
  rows: number;
  d: number;
  triple: Triple;
  /** Backward: weight (and LayerNorm bias) given, so parameter gradients are computed. Forward: affine. */
  affine: boolean;
  /** Plan table ids this case reaches (mapping rules, geometries, variants). */
  tags: string[];
  /** Kernels it launches (aligned and strided), a cluster's size after the name. */
  kernels: string[];
}

/** Backward plans do not depend on rows: 300 rows (several blocks and row groups) up to D = 4096, 8 beyond. */
const candidates = (family: "fwd" | "bwd", t: Triple): [number, number][] =>
  (family === "fwd"
    ? ROWS.flatMap((r) => DS.map((d): [number, number] => [r, d]))
    : DS.map((d): [number, number] => [d <= 4096 ? 300 : 8, d]))
    .filter(([r, d]) => r * d * bytesOf(t[0]) <= MAX_X_BYTES)
    .sort((a, b) => a[0] * a[1] - b[0] * b[1] || a[0] - b[0]);
const bytesOf = (t: FloatDType): number => (t === "f32" ? 4 : 2);
const vecOf = (t: FloatDType): number => 16 / bytesOf(t);
const withCluster = (k: string, c: number): string => (c > 1 ? `${k} ×${c}` : k);

/** The plan-table ids and kernels of one problem (for the unit test's scan of every shape), or null: no plan. */
export function planUnits(
  family: "fwd" | "bwd",
  kind: NormKind,
  rows: number,
  d: number,
  t: Triple,
  affine: boolean,
  lim: { fwd: PlanLimits; bwd: BwdLimits },
): { tags: string[]; kernels: string[] } | null {
  return family === "fwd" ? fwdUnits(kind, rows, d, t, affine, lim.fwd) : bwdUnits(kind, d, t, affine, lim.bwd);
}

/** The forward plan's tags and kernels for one case, or null where there is no plan. */
function fwdUnits(kind: NormKind, rows: number, d: number, t: Triple, affine: boolean, lim: PlanLimits) {
  const r = planNorm(
    { kind, rows, d, inputDtype: t[0], outputDtype: t[1], paramDtype: affine ? t[2] : undefined },
    lim,
  );
  if (!("plan" in r)) return null;
  const p = r.plan, threads = p.block[0], tags = [`fwd.${p.mapping}`];
  if (p.mapping === "block" && threads > 512) tags.push("fwd.block-1024");
  if (p.mapping === "cluster") tags.push(CLUSTER_GEOMETRIES.find((g) => g.ctas === p.cluster)!.id);
  if (p.kernel.includes("_rowstwopass_")) tags.push("fwd.ln-rows-two-pass");
  if (p.fullKernel?.includes("_rowstile_")) tags.push("fwd.rows-tile");
  if (p.fullKernel?.includes("_blockfull_")) tags.push("fwd.ln-block-full");
  if (p.fullKernel?.includes("_clusterfull_")) tags.push("fwd.ln-cluster-full");
  if (p.mapping === "block" && kind === "layer" && threads > 512 && affine && t[2] === t[0]) {
    tags.push("fwd.ln-block-staged");
  }
  const aligned = d % vecOf(t[0]) === 0 && p.fullKernel !== null ? p.fullKernel : p.kernel;
  return { tags, kernels: [...new Set([aligned, p.kernel])].map((k) => withCluster(k, p.cluster)) };
}

/** The backward plan's tags and kernels for one case (x and dy of the triple's first two dtypes). */
function bwdUnits(kind: NormKind, d: number, t: Triple, affine: boolean, lim: BwdLimits) {
  const r = planNormBackward(
    { kind, d, xDtype: t[0], dyDtype: t[1], weightDtype: affine ? t[2] : undefined, paramGrads: affine },
    lim,
  );
  if (!("plan" in r)) return null;
  const p = r.plan, tags: string[] = [], kernels = [withCluster(p.kernel, p.cluster)];
  if (p.mapping === "cached") tags.push(p.rowsPerBlock > 1 ? "bwd.rows" : "bwd.cached");
  else tags.push(`bwd.${p.mapping}`);
  if (p.mapping === "cluster") tags.push(`bwd.cluster-${p.cluster}`);
  if (p.rowsumKernel) kernels.push(p.rowsumKernel);
  const aligned = d % (16 / Math.max(t[0] === "f32" ? 4 : 2, t[1] === "f32" ? 4 : 2)) === 0;
  if (p.staged && p.rowsPerBlock === 1 && aligned) {
    kernels.push(withCluster(p.staged.kernel, p.staged.cluster));
    const own = p.staged.block === p.block && p.staged.cluster === p.cluster;
    const geometry = own ? "bwd.staged-plan" : kind === "layer" ? "bwd.staged-ln-f32" : "bwd.staged-rms16-small";
    tags.push(STAGED_GEOMETRIES.find((g) => g.id === geometry)!.id);
  }
  if (affine) kernels.push(`nk_bwd_finalize_${t[2]}`);
  return { tags, kernels };
}

/**
 * The cases of a family for these limits: per kind, dtype triple and affine choice, the smallest candidate shape
 * that reaches a kernel or plan-table id no earlier case did; then the odd-D shapes.
 */
export function selectCases(family: "fwd" | "bwd", fwd: PlanLimits, bwd: BwdLimits): SanitizeCase[] {
  const seen = new Set<string>(), out: SanitizeCase[] = [];
  const unitsOf = (kind: NormKind, rows: number, d: number, t: Triple, affine: boolean) =>
    planUnits(family, kind, rows, d, t, affine, { fwd, bwd });
  for (const kind of ["layer", "rms"] as const) {
    for (const triple of TRIPLES) {
      for (const affine of [true, false]) {
        for (const [rows, d] of candidates(family, triple)) {
          const u = unitsOf(kind, rows, d, triple, affine);
          if (!u || [...u.tags, ...u.kernels].every((k) => seen.has(k))) continue;
          for (const k of [...u.tags, ...u.kernels]) seen.add(k);
          out.push({ kind, rows, d, triple, affine, ...u });
        }
      }
      if (triple[0] === "f16") continue; // the odd shapes: f32 and bf16 x
      for (const [rows, d] of ODD) {
        const u = unitsOf(kind, rows, d, triple, true);
        if (u) out.push({ kind, rows, d, triple, affine: true, ...u });
      }
    }
  }
  return out;
}

/** Every kernel the cases launch, sorted. */
export const coveredKernels = (cases: readonly SanitizeCase[]): string[] =>
  [...new Set(cases.flatMap((c) => c.kernels))].sort();
export const coveredTags = (cases: readonly SanitizeCase[]): string[] =>
  [...new Set(cases.flatMap((c) => c.tags))].sort();

/** Plan limits of an H200 (tests/fixtures/fake_cuda.ts), for --dry-run and the unit test. */
export function h200Limits(): { fwd: PlanLimits; bwd: BwdLimits } {
  const dev = { backend: "cuda", info: FAKE_H200 as DeviceInfo };
  return { fwd: planLimits(dev), bwd: bwdPlanLimits(dev) };
}

// ---------------------------------------------------------------------------------------------------------------
// Running the cases (on the CUDA device here; the unit test runs small ones on the CPU backend).

/** Per dtype: |got − want| ≤ ATOL·scale + RTOL·|want| (16-bit: a few units in the last place of the output). */
const TOL: Record<FloatDType, number> = { f32: 1e-4, f16: 4e-3, bf16: 3e-2 };

function rand(n: number, seed: number, lo: number, hi: number): Float32Array {
  let s = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    out[i] = lo + (((t ^ (t >>> 14)) >>> 0) / 4294967296) * (hi - lo);
  }
  return out;
}

/** Worst error over `got` in units of the tolerance (≤ 1 passes); NaN anywhere counts as Infinity. */
export function worst(got: ArrayLike<number>, want: ArrayLike<number>, dtype: FloatDType, scale = 1): number {
  let w = 0;
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i] - want[i]) / (TOL[dtype] * (scale + Math.abs(want[i])));
    w = Number.isNaN(e) ? Infinity : Math.max(w, e);
  }
  return w;
}

/** Device x of [rows, d] (row stride d or d + 1) and its values as held (rounded to the dtype). */
function input(dev: Device, rows: number, d: number, dtype: FloatDType, strided: boolean, seed: number) {
  const x = dev.tensor(rand(rows * d, seed, -3, 3), [rows, d], { dtype, rowStride: strided ? d + 1 : d });
  return { x, held: x.readSync() };
}

export function runForward(dev: Device, c: SanitizeCase, strided: boolean): number {
  const [tin, tout, tw] = c.triple, { kind, rows, d } = c, eps = 1e-5;
  const { x, held } = input(dev, rows, d, tin, strided, rows * 31 + d);
  using _x = x;
  using w = c.affine ? dev.tensor(rand(d, d + 1, 0.5, 1.5), [d], { dtype: tw }) : undefined;
  using b = c.affine && kind === "layer" ? dev.tensor(rand(d, d + 2, -1, 1), [d], { dtype: tw }) : undefined;
  using y = dev.empty([rows, d], { dtype: tout, rowStride: strided ? d + 3 : d });
  const opts = { weight: w, bias: b, eps, out: y, stats: true as const };
  const r = kind === "layer" ? layerNorm(x, opts) : rmsNorm(x, opts);
  using _m = r.mean, _r = r.rstd;
  const want = cpuNormForward({
    kind,
    rows,
    d,
    x: held,
    xStride: d,
    weight: w?.readSync(),
    bias: b?.readSync(),
    eps,
  });
  return Math.max(worst(y.readSync(), want.y, tout), worst(r.rstd.readSync(), want.rstd, "f32"));
}

export function runBackward(dev: Device, c: SanitizeCase, strided: boolean): number {
  const [tx, tdy, tw] = c.triple, { kind, rows, d } = c, eps = 1e-5;
  const { x, held } = input(dev, rows, d, tx, strided, rows * 17 + d);
  const { x: dy, held: dyHeld } = input(dev, rows, d, tdy, strided, rows * 13 + d + 5);
  using _x = x, _dy = dy;
  using w = c.affine ? dev.tensor(rand(d, d + 1, 0.5, 1.5), [d], { dtype: tw }) : undefined;
  using b = c.affine && kind === "layer" ? dev.tensor(rand(d, d + 2, -1, 1), [d], { dtype: tw }) : undefined;
  // The forward's statistics from the reference: the bwd family launches backward kernels only.
  const fwd = cpuNormForward({ kind, rows, d, x: held, xStride: d, eps });
  using mean = dev.tensor(fwd.mean, [rows]), rstd = dev.tensor(fwd.rstd, [rows]);
  const r = kind === "layer"
    ? layerNormBackward(dy, x, { mean, rstd, weight: w, bias: b })
    : rmsNormBackward(dy, x, { rstd, weight: w });
  using dx = r.dx, dw = r.dweight, db = r.dbias;
  const want = cpuNormBackward({
    kind,
    rows,
    d,
    x: held,
    xStride: d,
    dy: dyHeld,
    dyStride: d,
    mean: fwd.mean,
    rstd: fwd.rstd,
    weight: w?.readSync(),
  });
  // Parameter gradients sum over rows: their absolute error grows like √rows.
  const sums = Math.sqrt(rows);
  return Math.max(
    worst(dx.readSync(), want.dx, tx),
    dw && want.dweight ? worst(dw.readSync(), want.dweight, tw, sums) : 0,
    db && want.dbias ? worst(db.readSync(), want.dbias, tw, sums) : 0,
  );
}

/** The diagnostics kernels: tensorStats per dtype (with NaN/Inf planted), check mode on a norm, the sanity check. */
export function runDiag(dev: Device): number {
  let bad = 0;
  for (const dtype of ["f32", "bf16", "f16"] as const) {
    for (const [rows, d, strided] of [[1, 1, false], [300, 1000, false], [257, 999, true]] as const) {
      const { x, held } = input(dev, rows, d, dtype, strided, rows + d);
      using _x = x;
      const vals = Float32Array.from(held);
      if (rows > 1) {
        vals[7] = NaN, vals[rows * d - 1] = Infinity, vals[d + 3] = 1000;
        x.write(vals);
      }
      const got = tensorStats(x), h = histogram(x);
      let nonFinite = 0, absMax = 0;
      for (const v of vals) Number.isFinite(v) ? (absMax = Math.max(absMax, Math.abs(v))) : nonFinite++;
      const ok = got.count === rows * d && got.nonFinite === nonFinite && got.absMax === absMax &&
        h.nonFinite === nonFinite && h.count === rows * d;
      console.log(`  tensorStats ${dtype} [${rows}, ${d}]${strided ? " strided" : ""}: ${ok ? "ok" : "WRONG"}`);
      if (!ok) bad++, console.log(`    got ${JSON.stringify(got)}, want nonFinite ${nonFinite}, absMax ${absMax}`);
    }
  }
  using x = dev.tensor(rand(64 * 512, 3, -3, 3), [64, 512]);
  for (const kind of ["layer", "rms"] as const) {
    using y = kind === "layer" ? layerNorm(x, { check: true }) : rmsNorm(x, { check: true });
    const rep = dev.lastCheck, ok = rep?.input.count === x.numel && rep.output.nonFinite === 0 && rep.output.absMax > 0;
    console.log(`  check mode ${kind}Norm: ${ok ? "ok" : "WRONG"}`);
    if (!ok) bad++;
    y.close();
  }
  sanityCheck(dev); // throws SanityCheckError on a wrong result
  console.log("  sanityCheck: ok");
  return bad;
}

/** [rows, d, strided]: at a few rows (the latency split) rows of 1 to 8 chunks a thread (the _nv2, _nv4 and 8-chunk
 * kernels for every x dtype), x strided (the scalar path) and contiguous (the vector path); past the H200's 132 SMs
 * (the bandwidth splits) a short row (sub-warp lanes for 16-bit x) and a long one (a block per row), contiguous. */
const FUSED_SHAPES = [
  [7, 770, true],
  [3, 5125, true],
  [7, 768, false],
  [3, 5120, false],
  [5, 3072, false],
  [2, 12288, false],
  [200, 768, false],
  [140, 5120, false],
] as const;

/**
 * Every fused kernel (kind, x dtype, y dtype, weight dtype) once per FUSED_SHAPES row, each with a residual and dynamic
 * quantization for the 1-byte outputs.
 */
export function fusedCases(): FusedCase[] {
  const out: FusedCase[] = [];
  for (const name of FUSED_TRIPLE_KERNELS) {
    const [, , kindTag, ti, to, tw] = name.split("_"); // nk_fused_{ln|rms}_{ti}_{to}_{tw}: the triple's two kernels
    const kind = kindTag === "ln" ? "layer" : "rms", dtype = ti as "f32" | "f16" | "bf16";
    const quant = to === ti ? "none" : "dynamic";
    for (const [rows, d, strided] of FUSED_SHAPES) {
      out.push({
        kind,
        dtype,
        d,
        rows,
        residual: true,
        quant,
        qdtype: quant === "none" ? undefined : to as QuantDType,
        strided,
        paramsOfX: tw === ti && ti !== "f32",
      });
    }
  }
  return out;
}

/** The fused family: fusedCases against the reference, then a residual backward per dtype (nk_fused_add_*). */
function runFused(dev: Device): number {
  let bad = 0;
  for (const c of fusedCases()) {
    try {
      const e = runFusedCase(dev, c);
      console.log(`  ok    ${describeCase(c)}: error ${e.toFixed(3)} × tolerance`);
    } catch (e) {
      bad++;
      console.log(`  WRONG ${describeCase(c)}: ${(e as Error).message}`);
    }
  }
  for (const dtype of ["f32", "f16", "bf16"] as const) {
    using h = dev.tensor(rand(5 * 700, 1, -2, 2), [5, 700], { dtype });
    using dy = dev.tensor(rand(5 * 700, 2, -1, 1), [5, 700], { dtype });
    using dRes = dev.tensor(rand(5 * 700, 3, -1, 1), [5, 700], { dtype });
    using fwd = rmsNorm(h, { stats: true });
    const g = rmsNormBackward(dy, h, { rstd: fwd.rstd, dResidual: dRes });
    using _dx = g.dx;
    const got = g.dx.readSync(), plain = rmsNormBackward(dy, h, { rstd: fwd.rstd }).dx, add = dRes.readSync();
    using _plain = plain;
    const base = plain.readSync();
    const ok = got.every((v, i) => Math.abs(v - (base[i] + add[i])) <= 0.02 * (1 + Math.abs(v)));
    console.log(`  ${ok ? "ok   " : "WRONG"} residual backward ${dtype} [5, 700] (nk_fused_add_${dtype})`);
    if (!ok) bad++;
  }
  dev.synchronize();
  return bad;
}

function describe(c: SanitizeCase): string {
  return `${c.kind === "layer" ? "LN " : "RMS"} ${c.triple.join("/")}${
    c.affine ? "" : " (no weight)"
  } [${c.rows}, ${c.d}]`;
}

function printPlan(family: "fwd" | "bwd", cases: readonly SanitizeCase[]): void {
  console.log(`== ${family}: ${cases.length} cases, ${coveredKernels(cases).length} kernels`);
  for (const c of cases) console.log(`  ${describe(c).padEnd(44)} ${c.kernels.join(", ")}`);
  console.log(`  plan ids: ${coveredTags(cases).join(" ")}`);
}

async function main(args: string[]): Promise<number> {
  const fam = args[args.indexOf("--family") + 1];
  if (args.includes("--dry-run")) {
    const { fwd, bwd } = h200Limits();
    for (const f of ["fwd", "bwd"] as const) printPlan(f, selectCases(f, fwd, bwd));
    console.log("== diag: nk_diag_partial_{f32,bf16,f16}, nk_diag_final (tensorStats, check mode, sanityCheck)");
    console.log(
      `== fused: ${fusedCases().length} cases over the ${FUSED_KERNELS.length} nk_fused_* kernels, and nk_fused_add_*`,
    );
    return 0;
  }
  if (!args.includes("--family") || !["fwd", "bwd", "diag", "fused"].includes(fam)) {
    console.error("usage: sanitize_cases.ts --family fwd|bwd|diag|fused | --dry-run");
    return 2;
  }
  let dev: Device;
  try {
    dev = Device.open({ backend: "cuda", sanityCheck: false });
  } catch (e) {
    console.error(`sanitize_cases: no CUDA device (${(e as Error).message.split("\n")[0]})`);
    return 2;
  }
  using _dev = dev;
  await loadKernels(dev, { quant: fam === "fused", backward: fam === "bwd" || fam === "fused" });
  console.log(`device: ${dev.name}`);
  if (fam === "diag") return runDiag(dev) === 0 ? 0 : 1;
  if (fam === "fused") return runFused(dev) === 0 ? 0 : 1;
  const family = fam as "fwd" | "bwd";
  const only = args.includes("--only") ? args[args.indexOf("--only") + 1] : undefined;
  const skips = args.flatMap((a, i) => (a === "--skip" && i + 1 < args.length ? [args[i + 1]] : []));
  const cases = selectCases(family, planLimits(dev), bwdPlanLimits(dev))
    .filter((c) => (only === undefined || describe(c).includes(only)) && !skips.some((t) => describe(c).includes(t)));
  printPlan(family, cases);
  let failed = 0;
  for (const c of cases) {
    for (const strided of [false, true]) {
      const e = family === "fwd" ? runForward(dev, c, strided) : runBackward(dev, c, strided);
      const ok = e <= 1;
      if (!ok) failed++;
      console.log(
        `  ${ok ? "ok   " : "WRONG"} ${describe(c)}${strided ? " strided" : ""}: error ${e.toFixed(3)} × tolerance`,
      );
    }
  }
  dev.synchronize();
  console.log(`${family}: ${cases.length * 2 - failed} of ${cases.length * 2} launches match the reference`);
  return failed === 0 ? 0 : 1;
}

if (import.meta.main) {
  const args = typeof Deno !== "undefined" ? Deno.args : process.argv.slice(2);
  const code = await main(args);
  if (typeof Deno !== "undefined") Deno.exit(code);
  else process.exit(code);
}
