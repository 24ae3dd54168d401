/**
 * The fused forward: residual add, quantized output, head views (rows on two levels) and the QK split, on the fused
 * kernels (kernels/fused.cu) or the CPU reference, and batchInvariant on plain rows (planNormInvariant's tuned plan
 * where it has one). Every call here is batch-invariant: the fused plan's per-row geometry depends on (kind, D, dtypes)
 * only (ops/plan_fused.ts).
 */
import { type DType, type FloatDType, isDType, isQuantDType, type QuantDType } from "../runtime/dtype.ts";
import { ArgumentError, UnsupportedError } from "../runtime/errors.ts";
import { type OptionKeys, optionKeys } from "../runtime/options.ts";
import { LaunchConfig } from "../runtime/module.ts";
import { deviceCapturing, type Stream } from "../runtime/stream.ts";
import { emptyTensor, type RowLevels, Tensor } from "../runtime/tensor.ts";
import { normForward } from "./cpu.ts";
import { fusedKernel } from "./fused_module.ts";
import { fusedArgs } from "./fused_abi.ts";
import { fusedGeometry, fusedKernelFor, fusedLaunch } from "./plan_fused.ts";
import { planLimits } from "./kernels.ts";
import { lookupNormPlan, PlannedLaunch } from "./plan_cache.ts";
import { launchNorm } from "./norm_launch.ts";
import type { NormKind } from "./plan.ts";
import {
  checkEps,
  checkFlag,
  checkInput,
  checkOut,
  checkParam,
  checkParams,
  checkSameShape,
  checkStream,
  checkTensor,
  overlaps,
  sameView,
} from "./validate.ts";

/**
 * Quantized output of a norm: y is computed in f32 after weight/bias, divided by a scale and converted. Static (a
 * `scale`: StaticQuant) or dynamic (per-row scales computed and returned: DynamicQuant).
 */
export type QuantOptions = StaticQuant | DynamicQuant;

/** Static quantization: one scale for the tensor (the call returns y alone, or a NormResult with `stats: true`). */
export interface StaticQuant {
  /** The output dtype: fp8 (e4m3, max 448; e5m2, max 57344) or int8 (127), round to nearest even, saturating. */
  dtype: QuantDType;
  /**
   * The scale: q = convert(y / scale). A number, whose f32 must be finite and > 0, or an f32 tensor of one element,
   * which the kernel reads when it runs (a graph replays with the value the tensor holds then). A tensor's value is
   * checked on the CPU backend only: reading it on a GPU would synchronize; there q is convert(y / s) as f32 division
   * gives it, whatever s holds.
   */
  scale: number | Tensor;
  /** Dynamic quantization only. */
  scaleUpperBound?: undefined;
  /** Dynamic quantization only. */
  scaleOut?: undefined;
}

/** Dynamic quantization: no scale given; the call returns the per-row scales (QuantNormResult). */
export interface DynamicQuant {
  /** The output dtype: fp8 (e4m3, max 448; e5m2, max 57344) or int8 (127), round to nearest even, saturating. */
  dtype: QuantDType;
  /** Absent: each row's scale is max|y_row| / qmax, at least 1 / (qmax · 512), at most scaleUpperBound. */
  scale?: undefined;
  /** The largest scale, a number whose f32 is > 0 (default: Infinity, no bound). */
  scaleUpperBound?: number;
  /**
   * Where to write the per-row scales: f32, one per row, contiguous (e.g. shaped as x without its last dimension).
   * Default: a new tensor of x's shape without its last dimension.
   */
  scaleOut?: Tensor;
}

/** The fused options of rmsNorm and layerNorm (see RMSNormOptions). */
export interface FusedOptions {
  /**
   * Added to x before the norm: h = x + residual (f32 add, rounded to x's dtype) is written to `residualOut`
   * (default: residual itself, in place) and normalized. Shape and dtype of x.
   */
  residual?: Tensor;
  /** Where h goes (x's shape and dtype): residual (the default), x itself, or memory apart from both. */
  residualOut?: Tensor;
  /** Quantized output (fp8 or int8): see QuantOptions. Not with outDtype. */
  quant?: QuantOptions;
  /**
   * QK-norm in one launch: rows whose head index (the second-to-last dimension of x) is ≥ `split` use `weight2`,
   * the others `weight` (e.g. the query and key heads of a fused QKV buffer, viewed as [tokens, Hq + Hkv, headDim]).
   */
  weight2?: Tensor;
  /** The first head that takes weight2. */
  split?: number;
  /**
   * A row's result bitwise the same whatever the number of rows in the call and the row's place in it
   * (docs/batch-invariance.md): the fused kernels, or for a plain norm the tuned kernels' prefill plan where that plan
   * sums every row in one order (planNormInvariant; a LayerNorm row there agrees with itself among the calls of its
   * path: rows 16-byte aligned, or not). Default false.
   */
  batchInvariant?: boolean;
}

/** A norm with dynamic quantization: the quantized y and the per-row scales (and, with stats, mean and rstd). */
export interface QuantNormResult extends Disposable {
  /** The quantized output (`out` when given). */
  y: Tensor;
  /** The per-row scales, f32 (`quant.scaleOut` when given): y_row ≈ q_row · scale_row. */
  scale: Tensor;
  /** Per-row mean (f32; zeros for rmsNorm), with `stats: true`. */
  mean?: Tensor;
  /** Per-row 1 / sqrt(variance + eps), with `stats: true`. */
  rstd?: Tensor;
}

/** The fused options of a call, read once (CallOptions of ops/norm.ts carries them unchecked). */
export interface FusedCallOptions {
  readonly weight: unknown;
  readonly bias: unknown;
  readonly eps: unknown;
  readonly out: unknown;
  readonly outDtype: unknown;
  readonly stream: unknown;
  readonly stats: unknown;
  readonly residual: unknown;
  readonly residualOut: unknown;
  readonly quant: unknown;
  readonly weight2: unknown;
  readonly split: unknown;
  readonly batchInvariant: unknown;
}

/** Whether the call goes to the fused path: a fused option, batchInvariant, or rows on two levels. */
export function takesFused(x: unknown, o: FusedCallOptions): boolean {
  // null is "not given" for the tensor options (as for weight, bias and out), so it never makes a call fused.
  return o.residual != null || o.residualOut != null || o.quant !== undefined || o.weight2 != null ||
    o.split !== undefined ||
    (o.batchInvariant !== undefined && o.batchInvariant !== false) ||
    (Tensor.isTensor(x) && !x.uniformRows) || (Tensor.isTensor(o.out) && !o.out.uniformRows);
}

interface Quant {
  dtype: QuantDType;
  /** 1 static, 2 dynamic (the kernel's `quant`). */
  mode: 1 | 2;
  scaleValue: number;
  scaleTensor: Tensor | undefined;
  upperBound: number;
  scaleOut: Tensor | undefined;
}

/** The keys of QuantOptions (readOptions in ops/norm.ts refuses any other). */
export const QUANT_KEYS: OptionKeys = optionKeys(
  ...(["dtype", "scale", "scaleUpperBound", "scaleOut"] satisfies (keyof QuantOptions)[]),
);

function checkQuant(q: unknown, x: Tensor): Quant | undefined {
  if (q === undefined) return undefined;
  if (typeof q !== "object" || q === null) {
    throw new ArgumentError("quant", "an object { dtype, scale?, scaleUpperBound?, scaleOut? }", q);
  }
  const { dtype, scale, scaleUpperBound, scaleOut } = q as QuantOptions;
  if (!isQuantDType(dtype)) throw new ArgumentError("quant.dtype", `"fp8e4m3", "fp8e5m2" or "int8"`, dtype);
  if (scale !== undefined) {
    if (scaleUpperBound !== undefined) {
      throw new ArgumentError("quant.scaleUpperBound", "nothing with a static scale", scaleUpperBound);
    }
    if (scaleOut !== undefined) throw new ArgumentError("quant.scaleOut", "nothing with a static scale", scaleOut);
    if (typeof scale === "number") {
      const f = Math.fround(scale);
      if (!(f > 0) || f === Infinity) {
        throw new ArgumentError("quant.scale", "a number whose f32 is finite and > 0 (or an f32 tensor of one)", scale);
      }
      return { dtype, mode: 1, scaleValue: f, scaleTensor: undefined, upperBound: Infinity, scaleOut: undefined };
    }
    const t = checkTensor("quant.scale", scale, x.device);
    if (t.numel !== 1 || t.dtype !== "f32") {
      throw new ArgumentError("quant.scale", "an f32 tensor of one element (or a number)", `${t}`);
    }
    // On the CPU its value is at hand: checked as a number is. On a GPU the kernel reads it (reading it here would
    // synchronize): StaticQuant.scale says what a bad value gives there.
    if (x.device.backend === "cpu") {
      const v = t.readSync()[0];
      if (!(v > 0) || v === Infinity) {
        throw new ArgumentError("quant.scale", "a tensor holding an f32 that is finite and > 0", v);
      }
    }
    return { dtype, mode: 1, scaleValue: 1, scaleTensor: t, upperBound: Infinity, scaleOut: undefined };
  }
  let ub = Infinity;
  if (scaleUpperBound !== undefined) {
    ub = typeof scaleUpperBound === "number" ? Math.fround(scaleUpperBound) : NaN;
    if (!(ub > 0)) {
      throw new ArgumentError(
        "quant.scaleUpperBound",
        "a number whose f32 is > 0 (Infinity: no bound)",
        scaleUpperBound,
      );
    }
  }
  let out: Tensor | undefined;
  if (scaleOut !== undefined) {
    out = checkTensor("quant.scaleOut", scaleOut, x.device);
    if (out.dtype !== "f32" || out.numel !== x.rows || !out.contiguous) {
      throw new ArgumentError(
        "quant.scaleOut",
        `a contiguous f32 tensor of ${x.rows} elements (one per row)`,
        `${out}`,
      );
    }
  }
  return { dtype, mode: 2, scaleValue: 1, scaleTensor: undefined, upperBound: ub, scaleOut: out };
}

/** The heads of x (its second-to-last dimension) and the split, when weight2 is given. */
function checkSplit(x: Tensor, weight: Tensor | undefined, weight2: Tensor | undefined, split: unknown): number {
  if (weight2 === undefined) {
    if (split !== undefined) throw new ArgumentError("split", "nothing without weight2", split);
    return 0;
  }
  if (weight === undefined) {
    throw new ArgumentError("weight", "a weight beside weight2 (the heads before split)", weight);
  }
  if (weight2.dtype !== weight.dtype) {
    throw new ArgumentError("weight2.dtype", `weight's dtype "${weight.dtype}"`, weight2.dtype);
  }
  const heads = x.shape.length >= 2 ? x.shape[x.shape.length - 2] : 1;
  if (heads < 2) {
    throw new ArgumentError(
      "weight2",
      "x of shape [..., heads, headDim] with at least 2 heads (weight for heads before split, weight2 after)",
      `x of shape [${x.shape}]`,
    );
  }
  if (!Number.isSafeInteger(split) || (split as number) < 1 || (split as number) >= heads) {
    throw new ArgumentError(
      "split",
      `an integer from 1 to ${heads - 1}: the first head (dimension ${x.shape.length - 2} of x, ${heads} heads) ` +
        `that takes weight2`,
      split,
    );
  }
  return split as number;
}

/** The limits the CPU backend checks the row length against: a GPU's block of 1024 threads (fusedGeometry). */
const FUSED_CPU_LIMITS = { maxThreadsPerBlock: 1024, warpSize: 32, multiprocessors: 1 };

/** The rows of every tensor of the call on one (n0, n1) grid, and each tensor's strides on it. */
function commonLevels(tensors: readonly Tensor[], heads: number): { n0: number; n1: number } {
  const rows = tensors[0].rows;
  const twoLevel = tensors.find((t) => !t.uniformRows);
  const n1 = twoLevel ? twoLevel.levels.n1 : heads > 0 ? heads : Math.max(rows, 1);
  if (heads > 0 && n1 !== heads) {
    throw new UnsupportedError(
      `weight2 with a view whose inner rows (${n1}) are not the heads (${heads}): view x as [tokens, heads, headDim]`,
    );
  }
  return { n0: n1 === 0 ? 0 : rows / n1, n1 };
}

/** `t`'s element strides (s0, s1) on the call's (n0, n1) grid. */
function stridesOn(t: Tensor, n1: number, name: string): [number, number] {
  const l: RowLevels = t.levels;
  if (!t.uniformRows) {
    if (l.n1 !== n1) {
      throw new UnsupportedError(`${name}'s rows (${l.n0} × ${l.n1}) do not line up with x's (${n1} per outer row)`);
    }
    return [l.s0, l.s1];
  }
  const s = t.rows <= 1 ? t.d : t.rowStride;
  return [s * n1, s];
}

/** A NormResult-like object for the fused call: disposing closes what the call allocated. */
function result(
  y: Tensor,
  owned: readonly (Tensor | undefined)[],
  extra: { scale?: Tensor; mean?: Tensor; rstd?: Tensor },
): QuantNormResult & { mean: Tensor; rstd: Tensor } {
  return {
    y,
    scale: extra.scale!,
    mean: extra.mean!,
    rstd: extra.rstd!,
    [Symbol.dispose]() {
      for (const t of owned) t?.close();
    },
  };
}

/**
 * The fused forward, validated in full before anything is allocated or queued. Returns y; with `stats` or dynamic
 * quantization, a disposable result with y and the statistics and/or scales.
 */
export function runFused(
  kind: NormKind,
  xIn: unknown,
  o: FusedCallOptions,
): Tensor | QuantNormResult {
  const layer = kind === "layer";
  const x = checkInput(xIn);
  const device = x.device;
  const eps = checkEps(o.eps);
  const { weight, bias } = checkParams(kind, o.weight, o.bias, x);
  const weight2 = checkParam("weight2", o.weight2, x);
  const split = checkSplit(x, weight, weight2, o.split);
  const invariant = checkFlag("batchInvariant", o.batchInvariant) === true;
  const stats = checkFlag("stats", o.stats) === true;
  const params = { weight, bias, weight2 };

  let residual: Tensor | undefined, h: Tensor | undefined;
  if (o.residual != null) {
    residual = checkTensor("residual", o.residual, device);
    checkSameShape("residual", residual, x);
    if (residual.dtype !== x.dtype) throw new ArgumentError("residual.dtype", `x's dtype "${x.dtype}"`, residual.dtype);
    if (overlaps(residual, x)) throw new ArgumentError("residual", "memory apart from x", "an overlap with x");
    h = residual;
    if (o.residualOut != null) {
      h = checkTensor("residualOut", o.residualOut, device);
      checkSameShape("residualOut", h, x);
      if (h.dtype !== x.dtype) throw new ArgumentError("residualOut.dtype", `x's dtype "${x.dtype}"`, h.dtype);
      for (const [name, t] of [["residual", residual], ["x", x]] as const) {
        if (!sameView(h, t) && overlaps(h, t)) {
          throw new ArgumentError(
            "residualOut",
            `${name} itself or memory apart from it`,
            `a partial overlap with ${name}`,
          );
        }
      }
    }
    // h is written: into residual itself unless residualOut is given, so the argument named is the one written.
    const hName = h === residual ? "residual" : "residualOut";
    for (const [name, p] of Object.entries(params)) {
      if (p && overlaps(h, p)) {
        throw new ArgumentError(hName, `memory apart from ${name} (h is written there)`, `an overlap with ${name}`);
      }
    }
  } else if (o.residualOut != null) {
    throw new ArgumentError("residualOut", "nothing without a residual", o.residualOut);
  }

  const quant = checkQuant(o.quant, x);
  if (quant && o.outDtype !== undefined) {
    throw new ArgumentError("outDtype", "nothing with quant (quant.dtype is the output's dtype)", o.outDtype);
  }
  if (!quant && o.outDtype !== undefined && !isDType(o.outDtype)) {
    throw new ArgumentError("outDtype", `"f32", "f16" or "bf16"`, o.outDtype);
  }
  const yDtype: DType = quant?.dtype ?? (o.outDtype as DType | undefined) ??
    (Tensor.isTensor(o.out) ? o.out.dtype : x.dtype);
  if (!quant && o.outDtype === undefined && isQuantDType(yDtype)) {
    throw new ArgumentError(
      "out.dtype",
      `x's dtype "${x.dtype}" (or a quant option for an out of ${yDtype})`,
      yDtype,
    );
  }
  if (!quant && yDtype !== x.dtype) {
    throw new UnsupportedError(
      `the fused kernels write y in x's dtype (${x.dtype}) or quantized; got ${yDtype} (${
        o.outDtype === undefined ? "out's dtype" : "outDtype"
      }): give y in ${x.dtype}, or drop the fused option`,
    );
  }
  const out = checkOut(o.out, x, yDtype, { ...params, ...(h ? { residualOut: h } : {}) });
  if (out && residual && h !== residual && overlaps(out, residual)) {
    throw new ArgumentError("out", "memory apart from residual", "an overlap with residual");
  }
  // The scales are read (static) or written (dynamic) while other blocks read and write the rows: apart from all.
  const scaleT = quant?.scaleTensor ?? quant?.scaleOut;
  if (scaleT) {
    const name = quant?.scaleTensor ? "quant.scale" : "quant.scaleOut";
    const others = { x, residual, residualOut: h, out, ...params };
    for (const [m, t] of Object.entries(others)) {
      if (t && overlaps(scaleT, t)) throw new ArgumentError(name, `memory apart from ${m}`, `an overlap with ${m}`);
    }
  }
  const stream: Stream = checkStream(o.stream ?? device.stream, device);
  const needsAlloc = !out || stats || (quant?.mode === 2 && !quant.scaleOut);
  if (needsAlloc && deviceCapturing(device)) {
    throw new UnsupportedError(
      `${kind}Norm during a graph capture would allocate (its output, stats or scales): pass out and quant.scaleOut, ` +
        `and allocate before beginCapture()`,
    );
  }
  const gpu = device.backend !== "cpu";
  if (gpu && x.rows > 0x7fffffff) throw new ArgumentError("x", "at most 2^31 − 1 rows on a GPU", x.rows);

  const heads = weight2 ? x.shape[x.shape.length - 2] : 0;
  const tensors = [x, ...(residual ? [residual] : []), ...(h ? [h] : []), ...(out ? [out] : [])];
  const grid = commonLevels(tensors, heads);
  // Every given tensor's rows on the call's grid, and the row length the kernels take: checked on every backend, so
  // that the CPU refuses what a GPU would.
  const [xs0, xs1] = stridesOn(x, grid.n1, "x");
  const [rs0, rs1] = residual ? stridesOn(residual, grid.n1, "residual") : [0, 0];
  const [hs0, hs1] = h ? stridesOn(h, grid.n1, "residualOut") : [0, 0];
  if (out) stridesOn(out, grid.n1, "out");
  const limits = gpu ? planLimits(device) : FUSED_CPU_LIMITS;
  const geometry = fusedGeometry(kind, x.d, x.dtype as FloatDType, limits, x.rows, device.backend);
  if ("unsupported" in geometry) throw new UnsupportedError(`${kind}Norm (fused): ${geometry.unsupported}`);
  // batchInvariant alone on rows of one stride: the tuned kernels where their plan keeps a row's sums fixed at every
  // row count (planNormInvariant: the plain norm's own prefill launch), else the fused kernels.
  const invariantPlain = invariant && !residual && !quant && !weight2 && x.uniformRows && (!out || out.uniformRows);
  let launch: (() => void) | undefined;
  const wDtype = (weight ?? bias)?.dtype;
  const backend = device.backend;
  if (backend !== "cpu") {
    const choice = fusedKernelFor(kind, x.dtype, yDtype, wDtype ?? x.dtype, geometry, backend);
    if ("unsupported" in choice) throw new UnsupportedError(`${kind}Norm (fused): ${choice.unsupported}`);
    const kernel = fusedKernel(device, choice.kernel); // UnsupportedError before loadKernels loads its image
    const tuned = invariantPlain ? invariantPlan(kind, x, yDtype, wDtype) : undefined;
    launch = tuned ? () => void launchNorm(tuned, device, stream, x, y!, weight, bias, mean, rstd, eps) : () => {
      const l = fusedLaunch(geometry, x.rows, planLimits(device));
      const config = new LaunchConfig({ grid: l.grid, block: l.block });
      kernel.checkLaunch(stream, config);
      kernel.launch(
        stream,
        config,
        fusedArgs({
          x: x.ptr,
          residual: residual?.ptr ?? 0n,
          h: h?.ptr ?? 0n,
          y: y!.ptr,
          weight: weight?.ptr ?? 0n,
          bias: bias?.ptr ?? 0n,
          weight2: weight2?.ptr ?? 0n,
          mean: mean?.ptr ?? 0n,
          rstd: rstd?.ptr ?? 0n,
          scale: (quant?.mode === 2 ? scale?.ptr : quant?.scaleTensor?.ptr) ?? 0n,
          n0: grid.n0,
          n1: grid.n1,
          d: x.d,
          xStrides: [xs0, xs1],
          rStrides: [rs0, rs1],
          hStrides: [hs0, hs1],
          yStrides: stridesOn(y!, grid.n1, "out"),
          eps,
          scaleValue: quant?.scaleValue ?? 1,
          scaleUpperBound: quant?.upperBound ?? Infinity,
          quant: quant?.mode ?? 0,
          split: weight2 ? split : grid.n1,
          tpr: geometry.tpr,
          nv: geometry.nv,
        }),
      );
    };
  }

  // Everything is checked: allocate, then queue.
  let y: Tensor | undefined = out, mean: Tensor | undefined, rstd: Tensor | undefined, scale: Tensor | undefined;
  const owned: (Tensor | undefined)[] = [];
  try {
    if (!y) owned.push(y = emptyTensor(device, x.shape, { dtype: yDtype }));
    const statShape = x.shape.length > 1 ? x.shape.slice(0, -1) : [1];
    if (stats) {
      owned.push(mean = emptyTensor(device, statShape), rstd = emptyTensor(device, statShape));
      if (!layer) mean.buffer.fill(0, { stream });
    }
    if (quant?.mode === 2) {
      scale = quant.scaleOut;
      if (!scale) owned.push(scale = emptyTensor(device, statShape));
    }
    if (x.rows > 0) {
      if (launch) launch();
      else cpuFused(kind, x, residual, h, y, weight, bias, weight2, split, quant, mean, rstd, scale, eps);
    }
  } catch (e) {
    for (const t of owned) t?.close();
    throw e;
  }
  if (!stats && quant?.mode !== 2) return y;
  return result(y, owned, { scale, mean, rstd });
}

/** The CPU backend: the float64 reference (ops/cpu.ts), inputs read before any output is written (in place). */
function cpuFused(
  kind: NormKind,
  x: Tensor,
  residual: Tensor | undefined,
  h: Tensor | undefined,
  y: Tensor,
  weight: Tensor | undefined,
  bias: Tensor | undefined,
  weight2: Tensor | undefined,
  split: number,
  quant: Quant | undefined,
  mean: Tensor | undefined,
  rstd: Tensor | undefined,
  scale: Tensor | undefined,
  eps: number,
): void {
  const r = normForward({
    kind,
    rows: x.rows,
    d: x.d,
    x: x.readSync(), // rows gathered from any view, packed
    xStride: x.d,
    residual: residual?.readSync(),
    dtype: x.dtype as FloatDType,
    weight: weight?.readSync(),
    bias: bias?.readSync(),
    ...(weight2 ? { weight2: weight2.readSync(), heads: x.shape[x.shape.length - 2], split } : {}),
    eps,
    ...(quant
      ? {
        quant: {
          dtype: quant.dtype,
          ...(quant.mode === 1
            ? { scale: quant.scaleTensor ? quant.scaleTensor.readSync()[0] : quant.scaleValue }
            : { scaleUpperBound: quant.upperBound }),
        },
      }
      : {}),
  });
  if (h && r.h) h.write(r.h);
  if (r.quant) y.write(r.quant.bytes, { bits: true });
  else y.write(r.y);
  if (mean) mean.write(r.mean);
  if (rstd) rstd.write(r.rstd);
  if (scale && r.quant) scale.write(r.quant.scale);
}

/** planNormInvariant's launch of a plain norm over x (cached with the device's plans), or undefined where it has none. */
function invariantPlan(kind: NormKind, x: Tensor, yDtype: DType, wDtype: DType | undefined): PlannedLaunch | undefined {
  const p = lookupNormPlan(
    x.device.cache,
    kind,
    Math.max(x.rows, 1),
    x.d,
    x.dtype,
    yDtype,
    wDtype,
    undefined,
    x.device,
    true,
  );
  return p instanceof PlannedLaunch ? p : undefined;
}
