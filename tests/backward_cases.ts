/**
 * One backward case on any device, checked against the float64 reference (ops/cpu_bwd.ts) fed with the
 * exact values the device holds (x and dy as rounded to their dtypes, the forward's f32 statistics as
 * read back). Outputs are poisoned (NaN bits) first, so an element not written fails.
 *
 * Tolerances (per element; rstd_r, g = dy·w, xhat, a = mean(g), b = mean(g·xhat) from the reference row):
 *   dx, f32:            |dx − ref| ≤ 1e-5 · T_r,   T_r = rstd_r · (max|g| + |a| + max|xhat|·|b|)
 *                       (the scale of the terms that cancel; f32 sums over D carry relative errors of
 *                       that order, so no tighter bound holds for rows where dx is small by cancellation)
 *   dx, f16/bf16:       1 ulp of the dtype at round(ref), plus the f32 bound
 *   dweight, f32:       |got − ref| ≤ 1e-5 · Σ_rows |dy·xhat| + 1e-6   (dbias: with Σ_rows |dy|)
 *   dweight, f16/bf16:  1 ulp at round(ref), plus the f32 bound
 */
import type { Device, DType, Tensor } from "../mod.ts";
import { cpuNormBackward, layerNorm, layerNormBackward, rmsNorm, rmsNormBackward } from "../mod.ts";
import { roundTo, ulpOf } from "../runtime/dtype.ts";
import { randoms, roundedTo } from "./random.ts";

export type Kind = "layer" | "rms";
export interface BwdCase {
  kind: Kind; rows: number; d: number; tx: DType; tdy: DType; tw?: DType;
  /** Extra elements between rows of x, dy and dx. */
  pad?: number;
  affine?: boolean;
  accumulate?: boolean;
  seed?: number;
}
export interface BwdOutcome {
  /** Worst error in units of the tolerance (≤ 1 passes) for dx, dweight, dbias. */
  dx: number; dweight: number; dbias: number;
  /** The raw results (for determinism checks). */
  bits: { dx: Float32Array; dweight?: Float32Array; dbias?: Float32Array };
}

/**
 * `reference: false` skips the float64 reference (the errors are then NaN, which no `<= 1` check passes): for runs whose
 * bits are compared with a checked run's (the 20-run determinism test).
 */
export function runBwdCase(dev: Device, c: BwdCase, opts: { reference?: boolean } = {}): BwdOutcome {
  const { kind, rows, d, tx, tdy } = c;
  const tw = c.tw ?? "f32";
  const seed = c.seed ?? rows * 131 + d * 7 + tx.length + 3 * tdy.length + (kind === "rms" ? 1 : 0);
  const affine = c.affine ?? true;
  const stride = d + (c.pad ?? 0);
  using x = dev.tensor(randoms(rows * d, seed, -2, 2), [rows, d], { dtype: tx, rowStride: stride });
  using dy = dev.tensor(randoms(rows * d, seed + 1, -1, 1), [rows, d], { dtype: tdy, rowStride: stride });
  const wv = affine ? roundedTo(randoms(d, seed + 2, 0.5, 1.5), tw) : undefined;
  using w = wv ? dev.tensor(wv, [d], { dtype: tw }) : undefined;
  using b = affine && kind === "layer" ? dev.tensor(randoms(d, seed + 3, -1, 1), [d], { dtype: tw }) : undefined;
  const f = kind === "layer"
    ? layerNorm(x, { weight: w, bias: b, stats: true })
    : rmsNorm(x, { weight: w, stats: true });
  f.y.close();
  using mean = f.mean;
  using rstd = f.rstd;
  using dx = dev.empty([rows, d], { dtype: tx, rowStride: stride });
  dx.buffer.fill(0xff);
  const prior = c.accumulate ? roundedTo(randoms(d, seed + 4, -1, 1), tw) : undefined;
  using dw = w ? dev.empty([d], { dtype: tw }) : undefined;
  using db = b ? dev.empty([d], { dtype: tw }) : undefined;
  for (const g of [dw, db]) {
    if (!g) continue;
    if (prior) g.write(prior);
    else g.buffer.fill(0xff);
  }
  const common = { rstd, weight: w, dx, dweight: dw, accumulate: c.accumulate };
  if (kind === "layer") layerNormBackward(dy, x, { ...common, mean, bias: b, dbias: db });
  else rmsNormBackward(dy, x, common);
  if (opts.reference === false) {
    return { dx: NaN, dweight: NaN, dbias: NaN, bits: { dx: dx.readSync(), dweight: dw?.readSync(), dbias: db?.readSync() } };
  }

  const xs = Float64Array.from(x.readSync()), dys = Float64Array.from(dy.readSync());
  const mu = mean.readSync(), rs = rstd.readSync();
  const ref = cpuNormBackward({ kind, rows, d, x: xs, xStride: d, dy: dys, dyStride: d, mean: mu, rstd: rs, weight: wv });
  const got = dx.readSync();
  let worstDx = 0;
  for (let r = 0; r < rows; r++) {
    let mg = 0, mxh = 0, sg = 0, sgx = 0;
    for (let j = 0; j < d; j++) {
      const g = dys[r * d + j] * (wv ? wv[j] : 1), xh = (xs[r * d + j] - (kind === "layer" ? mu[r] : 0)) * rs[r];
      mg = Math.max(mg, Math.abs(g));
      mxh = Math.max(mxh, Math.abs(xh));
      sg += g;
      sgx += g * xh;
    }
    const T = rs[r] * (mg + (kind === "layer" ? Math.abs(sg / d) : 0) + mxh * Math.abs(sgx / d));
    for (let j = 0; j < d; j++) {
      const e = ref.dx[r * d + j];
      const tol = 1e-5 * T + (tx === "f32" ? 0 : ulpOf(e, tx));
      const err = Math.abs(got[r * d + j] - (tx === "f32" ? e : roundTo(e, tx))) / tol;
      if (!(err <= worstDx)) worstDx = Number.isNaN(err) ? Infinity : err;
    }
  }
  const paramWorst = (t: Tensor | undefined, want: Float64Array, scale: Float64Array): [number, Float32Array | undefined] => {
    if (!t) return [0, undefined];
    const v = t.readSync();
    let worst = 0;
    for (let j = 0; j < d; j++) {
      const e = want[j] + (prior ? prior[j] : 0);
      const tol = 1e-5 * scale[j] + 1e-6 + (tw === "f32" ? 0 : ulpOf(e, tw));
      const err = Math.abs(v[j] - (tw === "f32" ? e : roundTo(e, tw))) / tol;
      if (!(err <= worst)) worst = Number.isNaN(err) ? Infinity : err;
    }
    return [worst, v];
  };
  const absW = new Float64Array(d), absB = new Float64Array(d);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < d; j++) {
      const dyv = dys[r * d + j];
      absW[j] += Math.abs(dyv * (xs[r * d + j] - (kind === "layer" ? mu[r] : 0)) * rs[r]);
      absB[j] += Math.abs(dyv);
    }
  }
  const [ew, vw] = paramWorst(dw, ref.dweight, absW);
  const [eb, vb] = paramWorst(db, ref.dbias, absB);
  return { dx: worstDx, dweight: ew, dbias: eb, bits: { dx: got, dweight: vw, dbias: vb } };
}
