/**
 * Float64 reference / CPU fallback for the LayerNorm and RMSNorm backward pass (PyTorch semantics).
 * With xhat = (x − mean)·rstd (LN) or x·rstd (RMS) and g = dy·w:
 *   LN : dx = rstd·(g − mean(g) − xhat·mean(g·xhat)),  dweight = Σ_rows dy·xhat,  dbias = Σ_rows dy
 *   RMS: dx = rstd·(g − xhat·mean(g·xhat)),            dweight = Σ_rows dy·xhat
 * The statistics are the forward's (given), or recomputed here in float64 when absent. With a residual fused into
 * the forward (h = x + residual), x here is h, and the gradient of h gains dResidual (the gradient of residualOut
 * from later layers): dh = dx + dResidual.
 * tests/unit/reference_backward.test.ts checks these formulas against finite differences of ops/cpu.ts's forward.
 */
import { normForward } from "./cpu.ts";

/** The input of cpuNormBackward: the forward's input rows, the gradient of its output, and its statistics or eps. */
export interface CpuNormBackwardInput {
  /** "layer" (LayerNorm) or "rms" (RMSNorm). */
  kind: "layer" | "rms";
  /** How many rows. */
  rows: number;
  /** Values per row (the normalized dimension). */
  d: number;
  /** Element index of row r is r * xStride (and r * dyStride). */
  x: ArrayLike<number>;
  /** Elements from one row of `x` to the next. */
  xStride: number;
  /** The gradient of the forward's output y. */
  dy: ArrayLike<number>;
  /** Elements from one row of `dy` to the next. */
  dyStride: number;
  /** Per-row mean (LN) and rstd from the forward; recomputed in float64 with `eps` when absent. */
  mean?: ArrayLike<number>;
  /** Per-row rstd from the forward (see `mean`). */
  rstd?: ArrayLike<number>;
  /** The forward's eps, needed only when the statistics are not given. */
  eps?: number;
  /** Length d; without it the scale is 1. */
  weight?: ArrayLike<number>;
  /** Added to dx (the gradient that reached the forward's residual output); element index r * dResidualStride. */
  dResidual?: ArrayLike<number>;
  /** Elements from one row of `dResidual` to the next (default d). */
  dResidualStride?: number;
}

/** The result of cpuNormBackward, in float64. */
export interface CpuNormBackwardOutput {
  /** rows · d, contiguous; plus dResidual when given. */
  dx: Float64Array;
  /** Σ over rows of dy·xhat, length d. */
  dweight: Float64Array;
  /** Σ over rows of dy, length d (zeros for RMS). */
  dbias: Float64Array;
}

/**
 * The LayerNorm or RMSNorm backward pass in float64, on the host (PyTorch semantics): dx, and dweight / dbias
 * summed over the rows. The reference the GPU backward kernels are tested against, and the CPU backend's maths.
 *
 * @throws {RangeError} when neither the statistics (rstd, and mean for "layer") nor `eps` are given, or dResidual is
 *   too short for rows, d and dResidualStride.
 *
 * @example
 * ```ts
 * import { cpuNormBackward } from "@normkit/normkit";
 * const x = [1, 2, 3, 4, 5, 6], dy = [0.1, -0.2, 0.3, 0.5, 0, -0.5];
 * const { dx, dweight } = cpuNormBackward({ kind: "layer", rows: 2, d: 3, x, xStride: 3, dy, dyStride: 3, eps: 1e-5 });
 * ```
 */
export function normBackward(p: CpuNormBackwardInput): CpuNormBackwardOutput {
  const { kind, rows, d } = p;
  let mean = p.mean, rstd = p.rstd;
  if (!rstd || (kind === "layer" && !mean)) {
    if (p.eps === undefined) throw new RangeError("normBackward: give mean/rstd, or eps to recompute them");
    const f = normForward({ kind, rows, d, x: p.x, xStride: p.xStride, eps: p.eps });
    mean = f.mean;
    rstd = f.rstd;
  }
  const dResidual = p.dResidual, drStride = p.dResidualStride ?? d;
  if (dResidual !== undefined && rows > 0 && d > 0 && (rows - 1) * drStride + d > dResidual.length) {
    throw new RangeError(
      `dResidual: length ${dResidual.length} too short for rows=${rows}, d=${d}, stride=${drStride}`,
    );
  }
  const dx = new Float64Array(rows * d);
  const dweight = new Float64Array(d), dbias = new Float64Array(d);
  const xhat = new Float64Array(d), g = new Float64Array(d);
  for (let r = 0; r < rows; r++) {
    const mu = kind === "layer" ? mean![r] : 0, rs = rstd[r];
    let sg = 0, sgx = 0;
    for (let j = 0; j < d; j++) {
      const dyv = p.dy[r * p.dyStride + j];
      xhat[j] = (p.x[r * p.xStride + j] - mu) * rs;
      g[j] = p.weight ? dyv * p.weight[j] : dyv;
      sg += g[j];
      sgx += g[j] * xhat[j];
      dweight[j] += dyv * xhat[j];
      dbias[j] += dyv;
    }
    const a = kind === "layer" ? sg / d : 0, b = sgx / d;
    for (let j = 0; j < d; j++) dx[r * d + j] = rs * (g[j] - a - xhat[j] * b);
    if (dResidual !== undefined) { for (let j = 0; j < d; j++) dx[r * d + j] += dResidual[r * drStride + j]; }
  }
  if (kind === "rms") dbias.fill(0);
  return { dx, dweight, dbias };
}
