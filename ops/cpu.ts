/**
 * Float64 reference / CPU fallback for LayerNorm and RMSNorm, with the same
 * semantics as PyTorch F.layer_norm / F.rms_norm (biased variance, eps inside
 * the square root, weight then bias applied after normalising).
 */

/** Which norm: LayerNorm ("layer") or RMSNorm ("rms"). */
export type NormKind = "layer" | "rms";

/** The input of cpuNormForward: rows of `d` values read from `x` with a stride, and the norm's parameters. */
export interface CpuNormInput {
  /** "layer" (LayerNorm) or "rms" (RMSNorm). */
  kind: "layer" | "rms";
  /** How many rows to normalize. */
  rows: number;
  /** Values per row (the normalized dimension). */
  d: number;
  /** Element index of row r is xOffset + r * xStride. */
  x: ArrayLike<number>;
  /** Index of the first row's first element in `x` (default 0). */
  xOffset?: number;
  /** Elements from one row's start to the next's (d for contiguous rows). */
  xStride: number;
  /** Length d. */
  weight?: ArrayLike<number>;
  /** Length d; ignored for rms. */
  bias?: ArrayLike<number>;
  /** Added to the variance (mean of squares for rms) inside the square root. */
  eps: number;
  /** Scale is 1 + weight (Gemma-style); without a weight the scale is 1. */
  zeroCenteredWeight?: boolean;
}

/** The result of cpuNormForward, in float64. */
export interface CpuNormOutput {
  /** rows * d, contiguous. */
  y: Float64Array;
  /** Per-row mean; all 0 for rms. */
  mean: Float64Array;
  /** Per-row 1 / sqrt(var + eps), or 1 / sqrt(mean(x^2) + eps) for rms. */
  rstd: Float64Array;
}

function checkLength(name: string, arr: ArrayLike<number> | undefined, d: number): void {
  if (arr !== undefined && arr.length < d) {
    throw new RangeError(`${name}: length ${arr.length} is shorter than d=${d}`);
  }
}

/**
 * LayerNorm or RMSNorm of `rows` rows in float64, on the host: the reference the GPU kernels are tested against,
 * and the maths of the CPU backend. Same semantics as PyTorch's F.layer_norm / F.rms_norm over the last
 * dimension (biased variance, eps inside the square root, weight then bias after normalizing); sums are
 * compensated, so the result is within about an ulp of the exact one on long rows.
 *
 * @returns y (rows × d, contiguous) and each row's mean (0 for rms) and rstd.
 * @throws {RangeError} when `x`, `weight` or `bias` is too short for rows, d, xStride and xOffset.
 *
 * @example
 * ```ts
 * import { cpuNormForward } from "@normkit/normkit";
 * const { y, rstd } = cpuNormForward({ kind: "rms", rows: 2, d: 3, x: [1, 2, 3, 4, 5, 6], xStride: 3, eps: 1e-6 });
 * ```
 */
export function normForward(input: CpuNormInput): CpuNormOutput {
  const { kind, rows, d, x, xStride, eps } = input;
  const xOffset = input.xOffset ?? 0;
  if (rows > 0 && d > 0) {
    const last = xOffset + (rows - 1) * xStride;
    const lo = Math.min(xOffset, last);
    const hi = Math.max(xOffset, last) + d;
    if (lo < 0 || hi > x.length) {
      throw new RangeError(
        `x: length ${x.length} too short for rows=${rows}, d=${d}, xStride=${xStride}, xOffset=${xOffset} (needs indices ${lo}..${
          hi - 1
        })`,
      );
    }
  }
  const weight = input.weight;
  const bias = kind === "layer" ? input.bias : undefined;
  checkLength("weight", weight, d);
  checkLength("bias", bias, d);
  const zc = input.zeroCenteredWeight === true;

  const y = new Float64Array(rows * d);
  const mean = new Float64Array(rows);
  const rstd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    const base = xOffset + r * xStride;
    let mu = 0;
    let ss: number;
    if (kind === "layer") {
      mu = sum(x, base, d) / d;
      ss = sumSqDev(x, base, d, mu); // centred, so no E[x^2] - E[x]^2 cancellation
    } else {
      ss = sumSqDev(x, base, d, 0);
    }
    const rs = 1 / Math.sqrt(ss / d + eps);
    mean[r] = mu;
    rstd[r] = rs;
    const out = r * d;
    for (let j = 0; j < d; j++) {
      let v = (x[base + j] - mu) * rs;
      if (weight !== undefined) v *= zc ? 1 + weight[j] : weight[j];
      if (bias !== undefined) v += bias[j];
      y[out + j] = v;
    }
  }
  return { y, mean, rstd };
}

// Neumaier-compensated sums keep the reference within ~1 ulp on long rows.
// A non-finite running sum skips the correction term (it would be NaN after
// Inf - Inf), so Inf propagates exactly as in a plain sum.

function sum(x: ArrayLike<number>, base: number, n: number): number {
  let s = 0;
  let c = 0;
  for (let j = 0; j < n; j++) {
    const v = x[base + j];
    const t = s + v;
    c += Math.abs(s) >= Math.abs(v) ? (s - t) + v : (v - t) + s;
    s = t;
  }
  return Number.isFinite(s) ? s + c : s;
}

/** Sum of (x - mu)^2; with mu = 0 this is the RMS sum of squares. */
function sumSqDev(x: ArrayLike<number>, base: number, n: number, mu: number): number {
  let s = 0;
  let c = 0;
  for (let j = 0; j < n; j++) {
    const e = x[base + j] - mu;
    const v = e * e;
    const t = s + v;
    c += s >= v ? (s - t) + v : (v - t) + s;
    s = t;
  }
  return Number.isFinite(s) ? s + c : s;
}
