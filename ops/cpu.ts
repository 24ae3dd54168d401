/**
 * Float64 reference / CPU fallback for LayerNorm and RMSNorm, with the same
 * semantics as PyTorch F.layer_norm / F.rms_norm (biased variance, eps inside
 * the square root, weight then bias applied after normalising), and the fused
 * features of the GPU kernels: a residual added first, QK-norm's second weight,
 * and quantization of the output to a 1-byte dtype.
 */
import { type FloatDType, fromQuantBits, type QuantDType, quantMax, roundTo, toQuantBits } from "../runtime/dtype.ts";

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
  /**
   * Added to x first: the norm is of h = roundTo(Math.fround(x + residual), dtype), per element (an f32 add, then
   * rounded to the tensors' dtype), and the statistics are h's. Element index of row r is residualOffset + r *
   * residualStride.
   */
  residual?: ArrayLike<number>;
  /** Index of the first row's first element in `residual` (default 0). */
  residualOffset?: number;
  /** Elements from one row of `residual` to the next (default d). */
  residualStride?: number;
  /** The dtype of x and residual, which h is rounded to (default "f32"); used only with a residual. */
  dtype?: FloatDType;
  /**
   * QK-norm: rows are heads of tokens, row r being head r % heads; heads ≥ split take weight2, the others weight
   * (the same length d). Needs `heads` and `split`. The bias, if any, is not split.
   */
  weight2?: ArrayLike<number>;
  /** Rows per token (Q and K heads together) for weight2. */
  heads?: number;
  /** The first head that takes weight2 (0..heads). */
  split?: number;
  /** Quantize the output y (after weight and bias) to a 1-byte dtype (see quantizeRow). */
  quant?: CpuQuantOptions;
}

/** Quantization of a norm's output: static with `scale`, else dynamic (one scale per row). */
export interface CpuQuantOptions {
  /** The 1-byte dtype of q. */
  dtype: QuantDType;
  /** Static scale (its f32 must be positive and finite): q = convert(f32(y) / scale). Without it, per-row scales. */
  scale?: number;
  /** Largest dynamic scale (as an f32; default +Infinity). */
  scaleUpperBound?: number;
}

/** Quantized rows: bytes as the GPU writes them, their values and each row's scale. */
export interface CpuQuantOutput {
  /** The 1-byte dtype of the bytes. */
  dtype: QuantDType;
  /** rows * d bytes, contiguous (int8 as two's complement bytes). */
  bytes: Uint8Array;
  /** The values of `bytes` (NaN for an fp8 NaN byte). */
  q: Float64Array;
  /** Per-row scale as f32: the dynamic scale, or the static one repeated. y ≈ q * scale. */
  scale: Float32Array;
}

/** The result of cpuNormForward, in float64. */
export interface CpuNormOutput {
  /** rows * d, contiguous. */
  y: Float64Array;
  /** Per-row mean; all 0 for rms. */
  mean: Float64Array;
  /** Per-row 1 / sqrt(var + eps), or 1 / sqrt(mean(x^2) + eps) for rms. */
  rstd: Float64Array;
  /** With a residual: rows * d, contiguous, the rounded sum the norm is of (what the GPU writes to residualOut). */
  h?: Float64Array;
  /** With `quant`: the quantized y. */
  quant?: CpuQuantOutput;
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
 * With `residual` the norm is of h = x + residual rounded as the GPU rounds it (returned as `h`); with `weight2`,
 * heads ≥ `split` take the second weight; with `quant`, y is quantized as quantizeRow does, row by row.
 *
 * @returns y (rows × d, contiguous) and each row's mean (0 for rms) and rstd; h and quant when asked for.
 * @throws {RangeError} when `x`, `residual`, `weight`, `weight2` or `bias` is too short for rows, d, the strides
 *   and offsets, or for bad heads/split or quant options.
 *
 * @example
 * ```ts
 * import { cpuNormForward } from "@normkit/normkit";
 * const { y, rstd } = cpuNormForward({ kind: "rms", rows: 2, d: 3, x: [1, 2, 3, 4, 5, 6], xStride: 3, eps: 1e-6 });
 * ```
 */
export function normForward(input: CpuNormInput): CpuNormOutput {
  const { rows, d } = input;
  checkRows("x", input.x, rows, d, input.xStride, input.xOffset ?? 0);
  const quant = input.quant === undefined ? undefined : checkQuant(input.quant);
  const weightOf = rowWeights(input);
  if (input.residual === undefined) {
    return withQuant(normRows(input, input.x, input.xOffset ?? 0, input.xStride, weightOf), quant, rows, d);
  }
  const h = residualSum(input);
  return { ...withQuant(normRows(input, h, 0, d, weightOf), quant, rows, d), h };
}

/** Throws unless rows of d elements, `stride` apart from `offset`, lie inside `arr`. */
function checkRows(
  name: string,
  arr: ArrayLike<number>,
  rows: number,
  d: number,
  stride: number,
  offset: number,
): void {
  if (rows > 0 && d > 0) {
    const last = offset + (rows - 1) * stride;
    const lo = Math.min(offset, last);
    const hi = Math.max(offset, last) + d;
    if (lo < 0 || hi > arr.length) {
      throw new RangeError(
        `${name}: length ${arr.length} too short for rows=${rows}, d=${d}, stride=${stride}, offset=${offset} (needs indices ${lo}..${
          hi - 1
        })`,
      );
    }
  }
}

/** h = roundTo(fround(x + residual), dtype), rows * d contiguous. */
function residualSum(input: CpuNormInput): Float64Array {
  const { rows, d, x, xStride } = input;
  const res = input.residual!, rOffset = input.residualOffset ?? 0, rStride = input.residualStride ?? d;
  const xOffset = input.xOffset ?? 0, dtype = input.dtype ?? "f32";
  checkRows("residual", res, rows, d, rStride, rOffset);
  const h = new Float64Array(rows * d);
  for (let r = 0; r < rows; r++) {
    const xb = xOffset + r * xStride, rb = rOffset + r * rStride;
    for (let j = 0; j < d; j++) h[r * d + j] = roundTo(Math.fround(x[xb + j] + res[rb + j]), dtype);
  }
  return h;
}

/** The weight of each row: `weight`, or `weight2` for heads ≥ split. */
function rowWeights(input: CpuNormInput): (row: number) => ArrayLike<number> | undefined {
  const { d, weight, weight2 } = input;
  checkLength("weight", weight, d);
  if (weight2 === undefined) return () => weight;
  checkLength("weight2", weight2, d);
  const heads = input.heads, split = input.split;
  if (!Number.isSafeInteger(heads) || heads! < 1) {
    throw new RangeError(`heads: an integer ≥ 1 with weight2, got ${heads}`);
  }
  if (!Number.isSafeInteger(split) || split! < 0 || split! > heads!) {
    throw new RangeError(`split: an integer from 0 to heads (${heads}) with weight2, got ${split}`);
  }
  return (row) => (row % heads! < split! ? weight : weight2);
}

/** The norm of rows read from `x` (see CpuNormInput), without the residual or quantization. */
function normRows(
  input: CpuNormInput,
  x: ArrayLike<number>,
  xOffset: number,
  xStride: number,
  weightOf: (row: number) => ArrayLike<number> | undefined,
): CpuNormOutput {
  const { kind, rows, d, eps } = input;
  const bias = kind === "layer" ? input.bias : undefined;
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
    const out = r * d, weight = weightOf(r);
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

// ---- quantization --------------------------------------------------------------

/** The checked quant options: scale and bound as the f32s the kernels get. */
interface QuantSpec {
  dtype: QuantDType;
  scale: number | undefined;
  upperBound: number;
}

function checkQuant(o: CpuQuantOptions): QuantSpec {
  if (o.dtype !== "fp8e4m3" && o.dtype !== "fp8e5m2" && o.dtype !== "int8") {
    throw new RangeError(`quant.dtype: "fp8e4m3", "fp8e5m2" or "int8", got ${String(o.dtype)}`);
  }
  const scale = o.scale === undefined ? undefined : Math.fround(o.scale);
  if (scale !== undefined && !(scale > 0 && scale < Infinity)) {
    throw new RangeError(`quant.scale: a number whose f32 is positive and finite, got ${o.scale}`);
  }
  const upperBound = Math.fround(o.scaleUpperBound ?? Infinity);
  if (!(upperBound > 0)) throw new RangeError(`quant.scaleUpperBound: a positive number, got ${o.scaleUpperBound}`);
  return { dtype: o.dtype, scale, upperBound };
}

function withQuant(out: CpuNormOutput, spec: QuantSpec | undefined, rows: number, d: number): CpuNormOutput {
  if (spec === undefined) return out;
  const bytes = new Uint8Array(rows * d), q = new Float64Array(rows * d), scale = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    const row = quantizeRow(out.y.subarray(r * d, (r + 1) * d), spec.dtype, {
      scale: spec.scale,
      scaleUpperBound: spec.upperBound,
    });
    bytes.set(row.bytes, r * d);
    q.set(row.q, r * d);
    scale[r] = row.scale;
  }
  return { ...out, quant: { dtype: spec.dtype, bytes, q, scale } };
}

/**
 * The dynamic scale of a row whose largest |f32(y)| is `amax`, in f32 steps as the kernels compute it:
 * s = f32(amax / qmax); s = max(s, f32(1 / (qmax · 512))); s = min(s, f32(scaleUpperBound)).
 * qmax is quantMax(dtype): 448 (fp8e4m3), 57344 (fp8e5m2), 127 (int8). The floor keeps an all-zero row's scale
 * positive (its q is 0).
 */
export function dynamicScale(amax: number, dtype: QuantDType, scaleUpperBound = Infinity): number {
  const qmax = quantMax(dtype);
  let s = Math.fround(Math.fround(amax) / qmax);
  const floor = Math.fround(1 / (qmax * 512));
  if (!(s >= floor)) s = floor;
  const ub = Math.fround(scaleUpperBound);
  return s > ub ? ub : s;
}

/**
 * One row of a norm's output quantized as the fused kernels do it: yf = f32(y) per element; the scale is
 * `opts.scale` (static, as an f32) or dynamicScale(amax) with amax the largest |yf| of the row, NaN ignored (CUDA
 * fmaxf); then q = convert(f32(yf / scale)), convert being toQuantBits (RNE, SATFINITE; NaN → NaN for fp8, 0 for
 * int8).
 *
 * @returns the bytes, their values q (NaN for an fp8 NaN byte) and the scale used (an f32 value).
 *
 * @example
 * ```ts
 * const { bytes, scale } = quantizeRow([0.5, -2, 7], "fp8e4m3"); // scale = f32(7 / 448)
 * ```
 */
export function quantizeRow(
  y: ArrayLike<number>,
  dtype: QuantDType,
  opts: { scale?: number; scaleUpperBound?: number } = {},
): { bytes: Uint8Array; q: Float64Array; scale: number } {
  const n = y.length;
  let scale: number;
  if (opts.scale !== undefined) {
    scale = Math.fround(opts.scale);
  } else {
    let amax = 0;
    for (let j = 0; j < n; j++) {
      const a = Math.abs(Math.fround(y[j]));
      if (a > amax) amax = a; // a NaN never compares greater: fmaxf ignores it
    }
    scale = dynamicScale(amax, dtype, opts.scaleUpperBound);
  }
  const bytes = new Uint8Array(n), q = new Float64Array(n);
  for (let j = 0; j < n; j++) {
    bytes[j] = toQuantBits(Math.fround(Math.fround(y[j]) / scale), dtype);
    q[j] = fromQuantBits(bytes[j], dtype);
  }
  return { bytes, q, scale };
}
