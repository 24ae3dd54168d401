/**
 * layerNorm / rmsNorm: validation, then the CPU maths or a GPU launch from the plan. Semantics follow
 * PyTorch's F.layer_norm / F.rms_norm over the last dimension (biased variance, f32 or better accumulation).
 */
import { decode, type DType, encode, isQuantDType } from "../runtime/dtype.ts";
import { ArgumentError, UnsupportedError } from "../runtime/errors.ts";
import { deviceCapturing, type Stream } from "../runtime/stream.ts";
import type { ArgBlock, Kernel, LaunchConfig } from "../runtime/module.ts";
import { releaseCount } from "../runtime/resource.ts";
import { type OptionKeys, optionKeys, refuseUnknownKeys } from "../runtime/options.ts";
import { emptyTensor, spanElements, Tensor } from "../runtime/tensor.ts";
import { normForward } from "./cpu.ts";
import type { NormKind } from "./plan.ts";
import { lookupNormPlan } from "./plan_cache.ts";
import { type KernelGeometry, launchNorm, writeNormArgs } from "./norm_launch.ts";
import {
  checkEps,
  checkFlag,
  checkInput,
  checkNormalizedShape,
  checkOut,
  checkOutDtype,
  checkParams,
  checkStream,
  flattenNormalized,
  flattenParam,
  reshapeOwned,
} from "./validate.ts";
import { checkModeFor, startCheck } from "./diag.ts";
import {
  type DynamicQuant,
  type FusedCallOptions,
  type FusedOptions,
  QUANT_KEYS,
  type QuantNormResult,
  type QuantOptions,
  runFused,
  type StaticQuant,
  takesFused,
} from "./fused.ts";

/**
 * Options of rmsNorm (and the shared part of layerNorm's). All optional. The fused options (residual,
 * residualOut, quant, weight2/split, batchInvariant; FusedOptions) run on the fused kernels (batchInvariant on a plain
 * norm: on the tuned ones where their plan allows it): `await loadKernels(dev, { fused: true })` first on a GPU, or
 * `{ quant: true }` for `quant`.
 */
export interface RMSNormOptions extends FusedOptions {
  /** Per-feature scale, shape [D], f32 or x's dtype. */
  weight?: Tensor;
  /** Default 1e-6. */
  eps?: number;
  /** Where to write y (x itself for in place). Default: a new tensor. */
  out?: Tensor;
  /** dtype of a new output (default: x's). */
  outDtype?: DType;
  /** Stream to run on (default: the device's). */
  stream?: Stream;
  /** Also return the per-row statistics. */
  stats?: boolean;
  /**
   * Check mode for this call (default: the device's, Device.open({ check })): count non-finite values and take
   * the abs-max of x and y, reported in `device.lastCheck`. Synchronizes the stream.
   */
  check?: boolean;
  /**
   * The trailing dimensions normalized over, as PyTorch's `normalized_shape` (default: the last one). E.g.
   * `[8, 64]` for x of shape [..., 8, 64] normalizes 512 elements per row; weight and bias then have shape
   * [8, 64] (or [512]), the statistics one value per leading index. The normalized dimensions must be contiguous.
   */
  normalizedShape?: number | readonly number[];
}

/** Options of layerNorm: those of rmsNorm, plus a bias. All optional. */
export interface LayerNormOptions extends RMSNormOptions {
  /** Per-feature shift, shape [D]. */
  bias?: Tensor;
  /** Default 1e-5. */
  eps?: number;
}

/**
 * y and, with `stats: true`, per-row mean and rstd (f32, shape = the leading dimensions of x). Disposable:
 * `using r = rmsNorm(x, { stats: true })` closes all three; `const { y, mean, rstd } = …` still works.
 */
export interface NormResult extends Disposable {
  /** The normalized output (`out` when given; disposing the result leaves `out` open). */
  y: Tensor;
  /** Per-row mean (f32). For rmsNorm: zeros. */
  mean: Tensor;
  /** Per-row 1 / sqrt(variance + eps) (f32; for rmsNorm 1 / sqrt(mean(x²) + eps)): what the backward takes. */
  rstd: Tensor;
}

/** A NormResult whose dispose closes y, mean and rstd (y not when it is the caller's `out`). */
function normResult(y: Tensor, mean: Tensor, rstd: Tensor, outGiven: boolean): NormResult {
  return {
    y,
    mean,
    rstd,
    [Symbol.dispose]() {
      if (!outGiven) y.close();
      mean.close();
      rstd.close();
    },
  };
}

/**
 * LayerNorm over the last dimension (or the trailing `normalizedShape` dimensions), as PyTorch's F.layer_norm
 * (biased variance, eps inside the square root): y = (x − mean) / sqrt(var + eps) · weight + bias, accumulated in
 * f32 or better. Asynchronous on the stream: it returns once the work is queued; read y with toArray() /
 * readSync(). The result is a new tensor unless `out` (which may be x itself, in place). With `stats: true` it
 * returns a disposable NormResult: y and the per-row mean and rstd, which layerNormBackward takes. Everything is
 * checked before anything is allocated or queued: a refused call changes nothing.
 *
 * @param x The input: f32, f16 or bf16, any number of leading dimensions; rows may be strided.
 * @param opts weight, bias ([D], f32 or x's dtype), eps (default 1e-5), out, outDtype, stream, stats, check,
 *   normalizedShape.
 * @throws {ArgumentError} for a tensor of the wrong shape, dtype or device, a bad eps or normalizedShape, or an
 *   `out` that partly overlaps x or overlaps weight/bias.
 * @throws {DisposedError} when x, a parameter, `out`, the stream or the device is closed.
 * @throws {UnsupportedError} on a GPU before `await loadKernels(dev)`, for a row length or dtype combination the
 *   kernels do not cover, or when the call would allocate (no `out`, `stats`, check mode) while a stream of the
 *   device captures a graph.
 * @throws {GpuError} when the driver fails.
 *
 * @example
 * ```ts
 * import { Device, layerNorm, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor(new Float32Array(16 * 768).map(() => Math.random() * 4 - 2), [16, 768]);
 * using w = dev.tensor(new Float32Array(768).fill(1), [768]);
 * using b = dev.tensor(new Float32Array(768), [768]);
 * using y = layerNorm(x, { weight: w, bias: b });
 * const out = await y.toArray();                                     // Float32Array(16 * 768)
 * using fwd = layerNorm(x, { weight: w, bias: b, stats: true });     // y, mean, rstd: for layerNormBackward
 * layerNorm(x, { weight: w, bias: b, out: x });                      // in place
 * ```
 */
export function layerNorm(
  x: Tensor,
  opts: LayerNormOptions & { stats: true } & ({ quant?: undefined } | { quant: StaticQuant; outDtype?: undefined }),
): NormResult;
/**
 * layerNorm with dynamic quantization (`quant` without a scale): the quantized y and its per-row f32 scales, and with
 * `stats: true` mean and rstd too. See docs/fused.md.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, layerNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { quant: true });
 * using x = dev.tensor(new Float32Array(4 * 64).map(() => Math.random() - 0.5), [4, 64], { dtype: "bf16" });
 * using r = layerNorm(x, { quant: { dtype: "fp8e4m3" } }); // r.y: fp8e4m3 [4, 64], r.scale: f32 [4]
 * ```
 */
export function layerNorm(
  x: Tensor,
  opts: LayerNormOptions & { quant: DynamicQuant; outDtype?: undefined },
): QuantNormResult;
/**
 * layerNorm with static quantization (`quant.scale` given): y quantized with that scale (a NormResult with `stats: true`).
 * See docs/fused.md.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, layerNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { quant: true });
 * using x = dev.tensor(new Float32Array(4 * 64).map(() => Math.random() - 0.5), [4, 64]);
 * using q = layerNorm(x, { quant: { dtype: "int8", scale: 0.02 } }); // int8 [4, 64]
 * ```
 */
export function layerNorm(
  x: Tensor,
  opts: LayerNormOptions & { quant: StaticQuant; stats?: false; outDtype?: undefined },
): Tensor;
/**
 * layerNorm with quantization whose kind is not known from the type (a QuantOptions value): y (static) or the quantized
 * y and its scales (dynamic).
 *
 * @example
 * ```ts
 * import { Device, layerNorm, type QuantOptions, Tensor } from "@normkit/normkit";
 * using dev = Device.open({ backend: "cpu" });
 * using x = dev.tensor(new Float32Array(64).fill(1), [1, 64]);
 * const quant: QuantOptions = { dtype: "int8" };
 * const r = layerNorm(x, { quant });
 * const q = Tensor.isTensor(r) ? r : r.y;
 * ```
 */
export function layerNorm(
  x: Tensor,
  opts: LayerNormOptions & { quant: QuantOptions; stats?: false; outDtype?: undefined },
): Tensor | QuantNormResult;
/**
 * layerNorm with quantization whose kind is not known from the type, and `stats: true`: y, mean and rstd (static) or the
 * quantized y, its scales, mean and rstd (dynamic).
 *
 * @example
 * ```ts
 * import { Device, layerNorm, type QuantOptions } from "@normkit/normkit";
 * using dev = Device.open({ backend: "cpu" });
 * using x = dev.tensor(new Float32Array(64).fill(1), [1, 64]);
 * const quant: QuantOptions = { dtype: "int8" };
 * using r = layerNorm(x, { quant, stats: true });
 * const scale = "scale" in r ? r.scale : undefined;
 * ```
 */
export function layerNorm(
  x: Tensor,
  opts: LayerNormOptions & { quant: QuantOptions; stats: true; outDtype?: undefined },
): NormResult | QuantNormResult;
/**
 * LayerNorm over the last dimension (or `normalizedShape`); returns y (a new tensor, or `out`). See the
 * `stats: true` form above for the semantics, the options and the errors.
 *
 * @example
 * ```ts
 * import { Device, layerNorm, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor(new Float32Array(2 * 8 * 64).map(() => Math.random()), [2, 8, 64], { dtype: "f16" });
 * using y = layerNorm(x, { eps: 1e-5, outDtype: "f32" });          // over the last dimension (64)
 * using z = layerNorm(x, { normalizedShape: [8, 64] });             // over the last two (512 per row)
 * ```
 */
export function layerNorm(x: Tensor, opts?: LayerNormOptions & { quant?: undefined }): Tensor;
export function layerNorm(x: Tensor, opts?: LayerNormOptions): Tensor | NormResult | QuantNormResult {
  const o = readOptions("layer", opts);
  if (takesFused(x, o)) return runFusedFlattened("layer", x, o);
  return o.normalizedShape === undefined ? runNorm("layer", x, o) : runFlattened("layer", x, o);
}

/**
 * RMSNorm over the last dimension (or the trailing `normalizedShape` dimensions), as PyTorch's F.rms_norm:
 * y = x / sqrt(mean(x²) + eps) · weight, accumulated in f32 or better. Asynchronous on the stream; the result is
 * a new tensor unless `out` (x itself for in place). With `stats: true` it returns a disposable NormResult: y and
 * the per-row rstd (mean: zeros), which rmsNormBackward takes. Everything is checked before anything is allocated
 * or queued: a refused call changes nothing.
 *
 * @param x The input: f32, f16 or bf16, any number of leading dimensions; rows may be strided.
 * @param opts weight ([D], f32 or x's dtype), eps (default 1e-6), out, outDtype, stream, stats, check,
 *   normalizedShape. A bias is refused (RMSNorm has none).
 * @throws {ArgumentError} for a tensor of the wrong shape, dtype or device, a bad eps or normalizedShape, a bias,
 *   or an `out` that partly overlaps x or overlaps the weight.
 * @throws {DisposedError} when x, the weight, `out`, the stream or the device is closed.
 * @throws {UnsupportedError} on a GPU before `await loadKernels(dev)`, for a row length or dtype combination the
 *   kernels do not cover, or when the call would allocate while a stream of the device captures a graph.
 * @throws {GpuError} when the driver fails.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor(new Float32Array(4 * 4096).map(() => Math.random() - 0.5), [4, 4096], { dtype: "bf16" });
 * using w = dev.tensor(new Float32Array(4096).fill(1), [4096], { dtype: "bf16" });
 * using y = rmsNorm(x, { weight: w });
 * using fwd = rmsNorm(x, { weight: w, stats: true });   // y, rstd (and zeros as mean): for rmsNormBackward
 * ```
 */
export function rmsNorm(
  x: Tensor,
  opts: RMSNormOptions & { stats: true } & ({ quant?: undefined } | { quant: StaticQuant; outDtype?: undefined }),
): NormResult;
/**
 * rmsNorm with dynamic quantization (`quant` without a scale): the quantized y and its per-row f32 scales, and with
 * `stats: true` mean and rstd too. See docs/fused.md.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { quant: true });
 * using x = dev.tensor(new Float32Array(4 * 64).map(() => Math.random() - 0.5), [4, 64], { dtype: "bf16" });
 * using r = rmsNorm(x, { quant: { dtype: "fp8e4m3" } }); // r.y: fp8e4m3 [4, 64], r.scale: f32 [4]
 * ```
 */
export function rmsNorm(
  x: Tensor,
  opts: RMSNormOptions & { quant: DynamicQuant; outDtype?: undefined },
): QuantNormResult;
/**
 * rmsNorm with static quantization (`quant.scale` given): y quantized with that scale (a NormResult with `stats: true`).
 * See docs/fused.md.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { quant: true });
 * using x = dev.tensor(new Float32Array(4 * 64).map(() => Math.random() - 0.5), [4, 64]);
 * using q = rmsNorm(x, { quant: { dtype: "int8", scale: 0.02 } }); // int8 [4, 64]
 * ```
 */
export function rmsNorm(
  x: Tensor,
  opts: RMSNormOptions & { quant: StaticQuant; stats?: false; outDtype?: undefined },
): Tensor;
/**
 * rmsNorm with quantization whose kind is not known from the type (a QuantOptions value): y (static) or the quantized
 * y and its scales (dynamic).
 *
 * @example
 * ```ts
 * import { Device, rmsNorm, type QuantOptions, Tensor } from "@normkit/normkit";
 * using dev = Device.open({ backend: "cpu" });
 * using x = dev.tensor(new Float32Array(64).fill(1), [1, 64]);
 * const quant: QuantOptions = { dtype: "int8" };
 * const r = rmsNorm(x, { quant });
 * const q = Tensor.isTensor(r) ? r : r.y;
 * ```
 */
export function rmsNorm(
  x: Tensor,
  opts: RMSNormOptions & { quant: QuantOptions; stats?: false; outDtype?: undefined },
): Tensor | QuantNormResult;
/**
 * rmsNorm with quantization whose kind is not known from the type, and `stats: true`: y, mean and rstd (static) or the
 * quantized y, its scales, mean and rstd (dynamic).
 *
 * @example
 * ```ts
 * import { Device, rmsNorm, type QuantOptions } from "@normkit/normkit";
 * using dev = Device.open({ backend: "cpu" });
 * using x = dev.tensor(new Float32Array(64).fill(1), [1, 64]);
 * const quant: QuantOptions = { dtype: "int8" };
 * using r = rmsNorm(x, { quant, stats: true });
 * const scale = "scale" in r ? r.scale : undefined;
 * ```
 */
export function rmsNorm(
  x: Tensor,
  opts: RMSNormOptions & { quant: QuantOptions; stats: true; outDtype?: undefined },
): NormResult | QuantNormResult;
/**
 * RMSNorm over the last dimension (or `normalizedShape`); returns y (a new tensor, or `out`). See the
 * `stats: true` form above for the semantics, the options and the errors.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor([3, 4, 0, 0, 1, 1], [2, 3]);
 * using y = rmsNorm(x, { eps: 1e-6 });
 * console.log(y.readSync());
 * ```
 */
export function rmsNorm(x: Tensor, opts?: RMSNormOptions & { quant?: undefined }): Tensor;
export function rmsNorm(x: Tensor, opts?: RMSNormOptions): Tensor | NormResult | QuantNormResult {
  const o = readOptions("rms", opts);
  if (takesFused(x, o)) return runFusedFlattened("rms", x, o);
  return o.normalizedShape === undefined ? runNorm("rms", x, o) : runFlattened("rms", x, o);
}

/** A call with `normalizedShape`: x, out, weight and bias viewed flat over the normalized dims, y given back in x's shape. */
function runFlattened(kind: NormKind, xIn: Tensor, o: CallOptions): Tensor | NormResult {
  const ns = checkNormalizedShape(o.normalizedShape)!;
  const x = checkInput(xIn);
  const xv = flattenNormalized("x", x, ns);
  if (ns.length === 1) return runNorm(kind, x, { ...o, normalizedShape: undefined });
  const outv = Tensor.isTensor(o.out) && !o.out.closed ? flattenNormalized("out", o.out, ns) : o.out;
  const r = runNorm(kind, xv, {
    ...o,
    out: outv,
    weight: flattenParam("weight", o.weight, ns),
    bias: flattenParam("bias", o.bias, ns),
    normalizedShape: undefined,
  });
  const given = o.out !== undefined && o.out !== null;
  const back = (y: Tensor): Tensor => (given ? o.out as Tensor : reshapeOwned(y, x.shape));
  if (Tensor.isTensor(r)) return back(r);
  return normResult(back(r.y), r.mean, r.rstd, given);
}

/** A fused call: normalizedShape of more than one dimension is refused (the fused kernels take the last dimension). */
function runFusedFlattened(kind: NormKind, x: Tensor, o: CallOptions): Tensor | NormResult | QuantNormResult {
  const ns = checkNormalizedShape(o.normalizedShape);
  if (ns !== undefined && ns.length > 1) {
    throw new UnsupportedError(
      `${kind}Norm with a fused option and normalizedShape [${ns}]: the fused kernels normalize the last dimension; ` +
        "view x with the normalized dimensions merged",
    );
  }
  if (ns !== undefined && Tensor.isTensor(x) && !x.closed && x.d !== ns[0]) {
    throw new ArgumentError("x", `a last dimension of ${ns[0]} (normalizedShape)`, `shape [${x.shape}]`);
  }
  if (checkFlag("check", o.check) === true) {
    throw new UnsupportedError(
      `${kind}Norm: check mode covers the unfused norms; pass check: false with fused options`,
    );
  }
  return runFused(kind, x, o) as Tensor | NormResult | QuantNormResult;
}

/**
 * A call's options, each read exactly once before anything is checked: an options object with getters cannot give
 * the checks one tensor or stream and the launch (or the repeat-call cache) another. Unchecked here.
 */
interface CallOptions extends FusedCallOptions {
  readonly check: unknown;
  readonly normalizedShape: unknown;
}

/** @internal The options of layerNorm and rmsNorm (rmsNorm refuses `bias` by name, as RMSNorm has none). */
export const NORM_KEYS: OptionKeys = optionKeys(
  ...([
    "weight",
    "bias",
    "eps",
    "out",
    "outDtype",
    "stream",
    "stats",
    "check",
    "normalizedShape",
    "residual",
    "residualOut",
    "quant",
    "weight2",
    "split",
    "batchInvariant",
  ] satisfies (keyof CallOptions)[]),
);

// NORM_KEYS as a switch, for the hot path: for…in with a switch costs a few ns a call in V8 and JavaScriptCore, a
// Set lookup per key several times that (bench/hotpath_cpu.ts). refuseUnknownKeys then names the key.
function isNormKey(k: string): boolean {
  switch (k) {
    case "weight":
    case "bias":
    case "eps":
    case "out":
    case "outDtype":
    case "stream":
    case "stats":
    case "check":
    case "normalizedShape":
    case "residual":
    case "residualOut":
    case "quant":
    case "weight2":
    case "split":
    case "batchInvariant":
      return true;
  }
  return false;
}

function readOptions(kind: NormKind, opts: unknown): CallOptions {
  const eps0 = kind === "layer" ? 1e-5 : 1e-6;
  if (opts === undefined) {
    return {
      residual: undefined,
      residualOut: undefined,
      quant: undefined,
      weight2: undefined,
      split: undefined,
      batchInvariant: undefined,
      weight: undefined,
      bias: undefined,
      eps: eps0,
      out: undefined,
      outDtype: undefined,
      stream: undefined,
      stats: undefined,
      check: undefined,
      normalizedShape: undefined,
    };
  }
  if (typeof opts !== "object" || opts === null) {
    throw new ArgumentError("options", "an options object { weight?, eps?, out?, … } or nothing", opts);
  }
  for (const k in opts) if (!isNormKey(k)) refuseUnknownKeys(opts, NORM_KEYS);
  const o = opts as LayerNormOptions;
  const eps = o.eps;
  // The quant object is copied: its fields are read once here too. A misspelt key would silently turn a static
  // quantization dynamic (and change the result's type): only QuantOptions' keys are taken.
  const q = o.quant;
  if (typeof q === "object" && q !== null) refuseUnknownKeys(q, QUANT_KEYS, "quant.");
  return {
    residual: o.residual,
    residualOut: o.residualOut,
    quant: typeof q === "object" && q !== null
      ? { dtype: q.dtype, scale: q.scale, scaleUpperBound: q.scaleUpperBound, scaleOut: q.scaleOut }
      : q,
    weight2: o.weight2,
    split: o.split,
    batchInvariant: o.batchInvariant,
    weight: o.weight,
    bias: o.bias,
    eps: eps === undefined ? eps0 : eps,
    out: o.out,
    outDtype: o.outDtype,
    stream: o.stream,
    stats: o.stats,
    check: o.check,
    normalizedShape: o.normalizedShape,
  };
}

/**
 * The last GPU call with `out` (no stats, no check mode) of each kind, as validated: the objects it was given
 * and the launch it made. A call with the very same objects (and eps) skips validation and the plan lookup:
 * none of what they checked can change (tensors are immutable views; streams, devices and modules only
 * close), so what is left to check per call is that everything is still open. Anything else goes through
 * runNorm's full validation, which refuses bad input with the same errors as ever.
 */
class ValidatedCall {
  constructor(
    readonly x: Tensor,
    readonly weightIn: unknown,
    readonly biasIn: unknown,
    readonly out: Tensor,
    readonly outDtypeIn: unknown,
    readonly streamIn: unknown,
    readonly eps: unknown,
    readonly weight: Tensor | undefined,
    readonly bias: Tensor | undefined,
    readonly stream: Stream,
    readonly kernel: Kernel,
    readonly config: LaunchConfig,
    readonly geometry: KernelGeometry,
    /** releaseCount() when every object above was last seen open. */
    public openAt: number,
  ) {}
  /** This call's own argument block, written on its first repeat (a call never repeated costs none). */
  args: ArgBlock | undefined;
}
/**
 * The validated calls kept per kind (a model alternating rms and layer norms keeps both): `last`, the last one, and
 * `byKey`, the last one of each weight (of the bias without a weight, of x without either; callKey): a model's layers
 * each call with their own weight, so the call before is rarely the same one. An entry keeps that call's objects (x,
 * out, stream) reachable while its key lives: closed ones hold no device memory, and one forgotten unclosed is
 * collected only once the key is, or the key calls again with other tensors. (Bun, bench/hotpath_cpu.ts, fake driver:
 * alternating two weights cost ~450-550 ns of JS per call through the full validation, against ~30-60 ns for a repeat.)
 */
class KindCalls {
  last: ValidatedCall | undefined;
  readonly byKey = new WeakMap<object, ValidatedCall>();
}
const rmsCalls = new KindCalls();
const layerCalls = new KindCalls();
/** The key of a call in KindCalls.byKey (RMSNorm passes no bias). */
const callKey = (weight: unknown, bias: unknown, x: unknown): unknown => weight ?? bias ?? x;

/** Launches `c` again when `x` and the options `o` are exactly its call and everything is still open; else false. */
function repeatCall(c: ValidatedCall | undefined, x: Tensor, o: CallOptions, layer: boolean): boolean {
  if (
    c === undefined || c.x !== x || c.out !== o.out || c.weightIn !== o.weight || c.eps !== o.eps ||
    (layer && c.biasIn !== o.bias) || c.streamIn !== o.stream || c.outDtypeIn !== o.outDtype ||
    (o.stats !== undefined && o.stats !== false) || (o.check !== undefined && o.check !== false) ||
    (!layer && o.bias !== undefined && o.bias !== null)
  ) return false;
  if (o.check === undefined && checkModeFor(x.device, undefined)) return false; // the device's check mode
  const k = c.kernel;
  // Nothing released anywhere since the objects were last seen open: they still are. Else check them.
  const released = releaseCount();
  if (c.openAt !== released) {
    // Closed objects go the full way, which throws the usual DisposedError (x first: it covers the device).
    if (
      x.closed || c.out.closed || (c.weight !== undefined && c.weight.closed) || (c.bias !== undefined && c.bias.closed)
    ) {
      return false;
    }
    // The default stream is replaced when closed: the call must still be on the stream it validated.
    if (c.streamIn === undefined ? x.device.stream !== c.stream : c.stream.closed) return false;
    if (k.module.closed) return false;
    c.openAt = released;
  }
  if (c.args === undefined) {
    c.args = k.argBlock();
    writeNormArgs(c.args, x, c.out, c.weight, c.bias, undefined, undefined, c.eps as number, c.geometry);
  }
  k.launchWritten(c.stream, c.config, c.args);
  return true;
}

function runNorm(kind: NormKind, xIn: Tensor, o: CallOptions): Tensor | NormResult {
  const layer = kind === "layer", calls = layer ? layerCalls : rmsCalls;
  if (repeatCall(calls.last, xIn, o, layer)) return o.out as Tensor;
  // (WeakMap.get of a key that is no object, e.g. a bad weight, is undefined: the full validation then refuses it.)
  const recent = calls.byKey.get(callKey(o.weight, layer ? o.bias : undefined, xIn) as object);
  if (recent !== calls.last && repeatCall(recent, xIn, o, layer)) {
    calls.last = recent;
    return o.out as Tensor;
  }
  // Everything is validated before anything is allocated or queued.
  const x = checkInput(xIn);
  const eps = checkEps(o.eps);
  const { weight, bias } = checkParams(kind, o.weight, o.bias, x);
  const stats = checkFlag("stats", o.stats) === true;
  if (o.outDtype === undefined && Tensor.isTensor(o.out) && isQuantDType(o.out.dtype)) {
    throw new ArgumentError(
      "out.dtype",
      `"f32", "f16" or "bf16" (a ${o.out.dtype} out takes quant: { dtype: "${o.out.dtype}" })`,
      o.out.dtype,
    );
  }
  const outDtype = checkOutDtype(o.outDtype ?? (Tensor.isTensor(o.out) ? o.out.dtype : undefined), x);
  const outGiven = checkOut(o.out, x, outDtype, { weight, bias });
  const device = x.device;
  const stream = checkStream(o.stream ?? device.stream, device);
  const checking = checkModeFor(device, o.check);
  // Allocating while a stream captures would break the capture (global mode): say so before the driver does.
  if ((!outGiven || stats || checking) && deviceCapturing(device)) {
    throw new UnsupportedError(
      checking
        ? `${kind}Norm during a graph capture: check mode reads statistics back, which a capture cannot; pass check: false`
        : `${kind}Norm during a graph capture: it would allocate ${
          outGiven ? "the statistics (stats: true)" : "its output (pass out)"
        }, ` +
          `and allocation breaks the capture; allocate before beginCapture()`,
    );
  }
  const gpu = device.backend !== "cpu";
  if (gpu && x.rows > 0x7fffffff) throw new ArgumentError("x", "at most 2^31 − 1 rows on a GPU", x.rows);
  // Plans (with their LaunchConfig and kernel) cached per problem: nothing allocated per call. Limits on a
  // miss from planLimits(device): wave size 32/64 from the device; clusters only on CUDA.
  const plan = gpu
    ? lookupNormPlan(
      device.cache,
      kind,
      Math.max(x.rows, 1),
      x.d,
      x.dtype,
      outDtype,
      weight?.dtype ?? bias?.dtype,
      undefined,
      device,
    )
    : undefined;
  if (plan && "unsupported" in plan) {
    throw new UnsupportedError(`${kind}Norm on ${device.backend}: ${plan.unsupported}`);
  }
  let y: Tensor | undefined = outGiven, mean: Tensor | undefined, rstd: Tensor | undefined;
  // Check mode: the input's statistics are queued before the op, which may overwrite x (in place).
  const pending = checking ? startCheck(`${kind}Norm`, x, stream) : undefined;
  try {
    y ??= emptyTensor(device, x.shape, { dtype: outDtype });
    if (stats) {
      const statShape = x.shape.length > 1 ? x.shape.slice(0, -1) : [1];
      mean = emptyTensor(device, statShape);
      rstd = emptyTensor(device, statShape);
      // RMSNorm has no mean: report zeros (the kernels leave it unwritten).
      if (kind === "rms") mean.buffer.fill(0, { stream });
    }
    if (x.rows > 0) {
      if (plan) {
        const { kernel: k, config } = launchNorm(plan, device, stream, x, y, weight, bias, mean, rstd, eps);
        if (outGiven && !stats && !checking) {
          // Remembered for repeatCall(): the very same call next time skips the checks above.
          const c = new ValidatedCall(
            x,
            o.weight,
            o.bias,
            outGiven,
            o.outDtype,
            o.stream,
            eps,
            weight,
            bias,
            stream,
            k,
            config,
            plan.plan,
            releaseCount(),
          );
          calls.last = c;
          calls.byKey.set(callKey(weight, bias, x) as object, c);
        }
      } else {
        cpuNorm(kind, x, y, weight, bias, mean, rstd, eps);
      }
    }
    pending?.finish(y);
  } catch (e) {
    if (!outGiven) y?.close();
    mean?.close();
    rstd?.close();
    throw e;
  }
  return stats ? normResult(y, mean!, rstd!, outGiven !== undefined) : y;
}

/** The CPU backend: float64 maths straight on the host bytes. */
function cpuNorm(
  kind: NormKind,
  x: Tensor,
  y: Tensor,
  w?: Tensor,
  b?: Tensor,
  mean?: Tensor,
  rstd?: Tensor,
  eps = 1e-5,
): void {
  const xb = x.bytesPerElement;
  const xs = x.buffer.hostBytes.subarray(x.offset * xb, (x.offset + spanElements(x.rows, x.d, x.rowStride)) * xb);
  const r = normForward({
    kind,
    rows: x.rows,
    d: x.d,
    x: decode(xs, x.dtype),
    xStride: x.rowStride,
    weight: w?.readSync(),
    bias: b?.readSync(),
    eps,
  });
  const yb = y.bytesPerElement;
  const yBytes = y.buffer.hostBytes;
  for (let row = 0; row < x.rows; row++) {
    const at = (y.offset + row * y.rowStride) * yb;
    encode(r.y.subarray(row * x.d, (row + 1) * x.d), y.dtype, yBytes.subarray(at, at + x.d * yb));
  }
  if (mean) mean.write(r.mean);
  if (rstd) rstd.write(r.rstd);
}
