/**
 * layerNormBackward / rmsNormBackward: validation, then the float64 CPU maths or two GPU launches (dx with
 * per-block parameter sums from a persistent grid, then the finalize that adds them in a fixed order).
 * No floating-point atomics anywhere: results are bitwise identical run to run.
 */
import type { Device } from "../runtime/device.ts";
import { decode, type DType, encode } from "../runtime/dtype.ts";
import { ArgumentError, GpuError, UnsupportedError } from "../runtime/errors.ts";
import type { DeviceBuffer } from "../runtime/memory.ts";
import { type Kernel, LaunchConfig, MAX_PORTABLE_CLUSTER } from "../runtime/module.ts";
import { deviceCapturing, type Stream } from "../runtime/stream.ts";
import { type OptionKeys, optionKeys, refuseUnknownKeys } from "../runtime/options.ts";
import { emptyTensor, rowOffset, spanElements, Tensor } from "../runtime/tensor.ts";
import { normBackward } from "./cpu_bwd.ts";
import { backwardModule, bwdPlanLimits, normKernel } from "./kernels.ts";
import { addInto, addKernel } from "./fused_module.ts";
import type { NormKind } from "./plan.ts";
import {
  bwdFull,
  type BwdLimits,
  type BwdPlan,
  type BwdPlanInput,
  type BwdPlanResult,
  planNormBackward,
} from "./plan_bwd.ts";
import {
  checkFlag,
  checkInput,
  checkNormalizedShape,
  checkOneRowStride,
  checkParam,
  checkSameShape,
  checkStream,
  checkTensor,
  flattenNormalized,
  flattenParam,
  overlaps,
  reshapeOwned,
  sameView,
} from "./validate.ts";
import type { ArgType } from "../runtime/module.ts";

/** Parameters of nk_{ln|rms}_bwd_{cached|wide}_* (kernels/norm_bwd.cuh, NK_BWD_PARAMS). */
export const NORM_BWD_ARGS: readonly ArgType[] = [
  "ptr",
  "ptr",
  "ptr",
  "ptr",
  "ptr",
  "ptr",
  "ptr", // dy, x, weight, mean, rstd, dx, part
  "i32",
  "i32",
  "i64",
  "i64",
  "i64", //                rows, d, dy_stride, x_stride, dx_stride
  "i32",
  "i32",
  "i32", //                              tpr, nv, flags (from the plan: the two below)
];
/** flags bit 0 (NK_BWD_PREFETCH): ask L2 for the next row. */
const BWD_FLAG_PREFETCH = 1;
/** flags bits 4..7 (NK_BWD_STAGES_SHIFT): rows in flight in shared memory, for the staged kernels. */
const BWD_STAGES_SHIFT = 4;
/** Parameters of nk_bwd_finalize_{f32|f16|bf16}: part, nparts, d, nacc, dweight, dbias, accumulate. */
export const NORM_FINALIZE_ARGS: readonly ArgType[] = ["ptr", "i32", "i32", "i32", "ptr", "ptr", "i32"];

/** Options of rmsNormBackward (and the shared part of layerNormBackward's). */
export interface RMSNormBackwardOptions {
  /** Per-row 1/σ from the forward (`stats: true`): f32, one per row of x. */
  rstd: Tensor;
  /** The forward's weight (f32 or x's dtype); dweight is returned when it is given. */
  weight?: Tensor;
  /** Where to write dx (x's shape and dtype; may be dy itself). Default: a new tensor. */
  dx?: Tensor;
  /** Where to write dweight ([D], weight's dtype). Default: a new tensor. */
  dweight?: Tensor;
  /** Add the parameter gradients to `dweight` / `dbias` instead of overwriting them. */
  accumulate?: boolean;
  /**
   * A forward with `residual` (h = x + residual, normalized): the gradient arriving at h from the next residual
   * branch (x's shape and dtype). dx is then normBackward(dy) + dResidual, the gradient of both x and residual; x
   * here is h (the forward's residualOut). dx must not overlap it. The norm's gradient is rounded to the dtype before
   * the f32 add, whose sum is rounded again: bitwise the unfused backward followed by the add.
   */
  dResidual?: Tensor;
  /**
   * A second tensor that receives dx (x's shape and dtype), e.g. the residual branch's gradient kept apart from x's:
   * with `dResidual`, dx is the gradient of both. It must not overlap any other tensor of the call.
   */
  dx2?: Tensor;
  /** Stream to run on (default: the device's). */
  stream?: Stream;
  /**
   * The forward's `normalizedShape` (default: the last dimension): the trailing dimensions of x it normalized
   * over. dweight and dbias then have that shape; the normalized dimensions must be contiguous.
   */
  normalizedShape?: number | readonly number[];
}

/** Options of layerNormBackward: those of rmsNormBackward, plus the forward's mean and the bias. */
export interface LayerNormBackwardOptions extends RMSNormBackwardOptions {
  /** Per-row mean from the forward: f32, one per row of x. */
  mean: Tensor;
  /** The forward's bias: dbias is returned when it is given (its values are not read). */
  bias?: Tensor;
  /** Where to write dbias ([D], bias's dtype). Default: a new tensor. */
  dbias?: Tensor;
}

/** The gradients of a backward call. The tensors are the ones given as dx / dweight / dbias, or new ones. */
export interface NormBackwardResult {
  /** ∂L/∂x: x's shape and dtype. */
  dx: Tensor;
  /** ∂L/∂weight summed over the rows ([D], weight's dtype): present when a weight was given. */
  dweight?: Tensor;
  /** ∂L/∂bias summed over the rows ([D], bias's dtype): present when a bias was given (layerNormBackward). */
  dbias?: Tensor;
}

/**
 * Gradients of y = layerNorm(x, { weight, bias }) given dy = ∂L/∂y, from the forward's statistics (run it with
 * `stats: true`). Asynchronous on the stream. The parameter gradients are summed over the rows in a fixed
 * order, without atomics: results are bitwise identical run to run.
 *
 * @param dy The gradient of the forward's output: x's shape.
 * @param x The forward's input.
 * @param opts The forward's `mean` and `rstd` (required), its `weight`, `bias` and `normalizedShape`, and
 *   optional outputs.
 * @returns dx, plus dweight with a weight and dbias with a bias.
 * @throws {ArgumentError} for a tensor of the wrong shape, dtype or device, outputs that overlap the inputs,
 *   or `accumulate` without the tensors to add into.
 * @throws {DisposedError} when a tensor, the stream or the device is closed.
 * @throws {UnsupportedError} on a GPU before `await loadKernels(dev, { backward: true })`, on HIP (the backward kernels
 *   run on CUDA only), for a row length the kernels do not cover, or when it would allocate while a stream captures (pass
 *   dx, dweight and dbias then).
 * @throws {GpuError} when the driver fails.
 *
 * @example
 * ```ts
 * import { Device, layerNorm, layerNormBackward, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { backward: true });
 * const rows = 8, d = 1024;
 * using x = dev.tensor(new Float32Array(rows * d).map(() => Math.random()), [rows, d]);
 * using w = dev.tensor(new Float32Array(d).fill(1), [d]);
 * using b = dev.tensor(new Float32Array(d), [d]);
 * using fwd = layerNorm(x, { weight: w, bias: b, stats: true });
 * using dy = dev.tensor(new Float32Array(rows * d).map(() => Math.random() - 0.5), [rows, d]);
 * const g = layerNormBackward(dy, x, { mean: fwd.mean, rstd: fwd.rstd, weight: w, bias: b });
 * const dweight = await g.dweight!.toArray();
 * for (const t of [g.dx, g.dweight!, g.dbias!]) t.close();
 * ```
 */
export function layerNormBackward(dy: Tensor, x: Tensor, opts: LayerNormBackwardOptions): NormBackwardResult {
  return runBackward("layer", dy, x, opts);
}

/**
 * Gradients of y = rmsNorm(x, { weight }) given dy = ∂L/∂y, from the forward's rstd (run it with
 * `stats: true`). Asynchronous on the stream; deterministic, as layerNormBackward.
 *
 * @param dy The gradient of the forward's output: x's shape.
 * @param x The forward's input.
 * @param opts The forward's `rstd` (required), `weight` and `normalizedShape`, and optional outputs.
 * @returns dx, plus dweight with a weight.
 * @throws {ArgumentError} for a tensor of the wrong shape, dtype or device, or outputs that overlap the inputs.
 * @throws {DisposedError} when a tensor, the stream or the device is closed.
 * @throws {UnsupportedError} on a GPU before `await loadKernels(dev, { backward: true })`, on HIP, for a row length
 *   the kernels do not cover, or when it would allocate while a stream captures.
 * @throws {GpuError} when the driver fails.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm, rmsNormBackward } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { backward: true });
 * using x = dev.tensor(new Float32Array(8 * 512).map(() => Math.random()), [8, 512]);
 * using w = dev.tensor(new Float32Array(512).fill(1), [512]);
 * using dy = dev.tensor(new Float32Array(8 * 512).fill(0.1), [8, 512]);
 * using fwd = rmsNorm(x, { weight: w, stats: true });
 * const { dx, dweight } = rmsNormBackward(dy, x, { rstd: fwd.rstd, weight: w });
 * for (const t of [dx, dweight!]) t.close();
 * ```
 */
export function rmsNormBackward(dy: Tensor, x: Tensor, opts: RMSNormBackwardOptions): NormBackwardResult {
  return runBackward("rms", dy, x, opts as LayerNormBackwardOptions);
}

function checkStat(name: string, t: unknown, x: Tensor): Tensor {
  const s = checkTensor(name, t, x.device);
  if (s.dtype !== "f32") throw new ArgumentError(`${name}.dtype`, `"f32"`, s.dtype);
  if (s.numel !== x.rows || !s.contiguous) {
    throw new ArgumentError(name, `${x.rows} contiguous f32 values (one per row of x)`, `shape [${s.shape}]`);
  }
  return s;
}

function checkGradOut(name: string, t: unknown, x: Tensor, dtype: DType): Tensor | undefined {
  if (t === undefined || t === null) return undefined;
  const g = checkTensor(name, t, x.device);
  if (g.numel !== x.d || g.rows !== 1) throw new ArgumentError(name, `shape [${x.d}]`, `shape [${g.shape}]`);
  if (g.dtype !== dtype) throw new ArgumentError(`${name}.dtype`, `"${dtype}" (the parameter's dtype)`, g.dtype);
  return g;
}

/** The options of one backward call, each read exactly once before anything is checked (see ops/norm.ts). */
interface BackwardOptions {
  readonly mean: unknown;
  readonly rstd: unknown;
  readonly weight: unknown;
  readonly bias: unknown;
  readonly dx: unknown;
  readonly dweight: unknown;
  readonly dbias: unknown;
  readonly accumulate: unknown;
  readonly dResidual: unknown;
  readonly dx2: unknown;
  readonly stream: unknown;
  readonly normalizedShape: unknown;
}

/** The options of layerNormBackward and rmsNormBackward (rmsNormBackward refuses `mean` and `bias` by name). */
const BACKWARD_KEYS: OptionKeys = optionKeys(
  ...([
    "mean",
    "rstd",
    "weight",
    "bias",
    "dx",
    "dweight",
    "dbias",
    "accumulate",
    "dResidual",
    "dx2",
    "stream",
    "normalizedShape",
  ] satisfies (keyof BackwardOptions)[]),
);

function readBackwardOptions(kind: NormKind, opts: unknown): BackwardOptions {
  if (typeof opts !== "object" || opts === null) {
    throw new ArgumentError(
      "options",
      kind === "layer" ? "an options object { mean, rstd, … }" : "an options object { rstd, … }",
      opts,
    );
  }
  refuseUnknownKeys(opts, BACKWARD_KEYS);
  const o = opts as LayerNormBackwardOptions;
  return {
    mean: o.mean,
    rstd: o.rstd,
    weight: o.weight,
    bias: o.bias,
    dx: o.dx,
    dweight: o.dweight,
    dbias: o.dbias,
    accumulate: o.accumulate,
    dResidual: o.dResidual,
    dx2: o.dx2,
    stream: o.stream,
    normalizedShape: o.normalizedShape,
  };
}

function runBackward(kind: NormKind, dyIn: Tensor, xIn: Tensor, optsIn: LayerNormBackwardOptions): NormBackwardResult {
  const opts = readBackwardOptions(kind, optsIn);
  const ns = checkNormalizedShape(opts.normalizedShape);
  if (ns === undefined || ns.length === 1) {
    if (ns) flattenNormalized("x", checkInput(xIn), ns); // the last dimension must be the one named
    return runFlatBackward(kind, dyIn, xIn, opts);
  }
  // Several normalized dimensions: x, dy, dx and the parameters viewed flat over them, the results given back.
  const x = checkInput(xIn), dy = checkTensor("dy", dyIn, x.device);
  const view = (name: string, t: unknown) => Tensor.isTensor(t) && !t.closed ? flattenNormalized(name, t, ns) : t;
  const given = (t: unknown) => t !== undefined && t !== null;
  const r = runFlatBackward(kind, flattenNormalized("dy", dy, ns), flattenNormalized("x", x, ns), {
    ...opts,
    dx: view("dx", opts.dx),
    dResidual: view("dResidual", opts.dResidual),
    dx2: view("dx2", opts.dx2),
    weight: flattenParam("weight", opts.weight, ns),
    bias: flattenParam("bias", opts.bias, ns),
    dweight: flattenParam("dweight", opts.dweight, ns),
    dbias: flattenParam("dbias", opts.dbias, ns),
  });
  const dx = given(opts.dx) ? opts.dx as Tensor : reshapeOwned(r.dx, x.shape);
  const dweight = r.dweight && (given(opts.dweight) ? opts.dweight as Tensor : reshapeOwned(r.dweight, ns));
  const dbias = r.dbias && (given(opts.dbias) ? opts.dbias as Tensor : reshapeOwned(r.dbias, ns));
  return { dx, ...(dweight ? { dweight } : {}), ...(dbias ? { dbias } : {}) };
}

function runFlatBackward(kind: NormKind, dyIn: Tensor, xIn: Tensor, opts: BackwardOptions): NormBackwardResult {
  const op = `${kind}NormBackward`;
  const x = checkInput(xIn);
  checkOneRowStride("x", x, op);
  const dy = checkTensor("dy", dyIn, x.device);
  checkOneRowStride("dy", dy, op);
  checkSameShape("dy", dy, x);
  if (kind === "rms") {
    // RMSNorm has no bias and no mean: one given is a mistake (a LayerNorm's arguments), not something to ignore.
    for (const [name, v] of [["mean", opts.mean], ["bias", opts.bias], ["dbias", opts.dbias]] as const) {
      if (v !== undefined && v !== null) {
        const why = name === "mean"
          ? "RMSNorm has no mean (only rstd; layerNormBackward takes one)"
          : "RMSNorm has no bias (layerNormBackward takes one)";
        throw new ArgumentError(name, `no ${name}: ${why}`, v);
      }
    }
  }
  const mean = kind === "layer" ? checkStat("mean", opts.mean, x) : undefined;
  const rstd = checkStat("rstd", opts.rstd, x);
  const weight = checkParam("weight", opts.weight, x);
  const bias = kind === "layer" ? checkParam("bias", opts.bias, x) : undefined;
  if (weight && bias && weight.dtype !== bias.dtype) {
    throw new ArgumentError("bias.dtype", `weight's dtype "${weight.dtype}"`, bias.dtype);
  }
  const pdtype: DType = weight?.dtype ?? bias?.dtype ?? "f32";
  const dwGiven = checkGradOut("dweight", opts.dweight, x, pdtype);
  const dbGiven = kind === "layer" ? checkGradOut("dbias", opts.dbias, x, pdtype) : undefined;
  if (dwGiven && !weight) throw new ArgumentError("dweight", "only with a weight", "a tensor");
  if (dbGiven && !bias) throw new ArgumentError("dbias", "only with a bias", "a tensor");
  const dxGiven = opts.dx === undefined || opts.dx === null ? undefined : checkTensor("dx", opts.dx, x.device);
  if (dxGiven) {
    checkOneRowStride("dx", dxGiven, op);
    checkSameShape("dx", dxGiven, x);
    if (dxGiven.dtype !== x.dtype) throw new ArgumentError("dx.dtype", `x's dtype "${x.dtype}"`, dxGiven.dtype);
    if (overlaps(dxGiven, x)) throw new ArgumentError("dx", "memory that does not overlap x", "an overlap with x");
    if (!sameView(dxGiven, dy) && overlaps(dxGiven, dy)) {
      throw new ArgumentError(
        "dx",
        "dy itself (in place) or memory that does not overlap dy",
        "a partial overlap with dy",
      );
    }
  }
  // The outputs are written while other blocks still read the inputs (the forward refuses the same race for out).
  const read = [["x", x], ["dy", dy], ["weight", weight], ["mean", mean], ["rstd", rstd]] as const;
  for (const [n, g] of [["dx", dxGiven], ["dweight", dwGiven], ["dbias", dbGiven]] as const) {
    for (const [m, t] of read) {
      if (g && t && !(n === "dx" && (m === "x" || m === "dy")) && overlaps(g, t)) {
        throw new ArgumentError(n, `memory that does not overlap ${m}`, `an overlap with ${m}`);
      }
    }
  }
  for (const [n, g] of [["dweight", dwGiven], ["dbias", dbGiven]] as const) {
    if (g && dxGiven && overlaps(g, dxGiven)) {
      throw new ArgumentError(n, "memory that does not overlap dx", "an overlap with dx");
    }
  }
  if (dwGiven && dbGiven && overlaps(dwGiven, dbGiven)) {
    throw new ArgumentError("dbias", "memory that does not overlap dweight", "an overlap");
  }
  const accumulate = checkFlag("accumulate", opts.accumulate) === true;
  let dResidual: Tensor | undefined;
  if (opts.dResidual !== undefined && opts.dResidual !== null) {
    dResidual = checkTensor("dResidual", opts.dResidual, x.device);
    checkOneRowStride("dResidual", dResidual, op);
    checkSameShape("dResidual", dResidual, x);
    if (dResidual.dtype !== x.dtype) {
      throw new ArgumentError("dResidual.dtype", `x's dtype "${x.dtype}"`, dResidual.dtype);
    }
    for (const [n, g] of [["dx", dxGiven], ["dweight", dwGiven], ["dbias", dbGiven]] as const) {
      if (g && overlaps(g, dResidual)) {
        throw new ArgumentError(n, "memory that does not overlap dResidual", "an overlap with dResidual");
      }
    }
  }
  let dx2: Tensor | undefined;
  if (opts.dx2 !== undefined && opts.dx2 !== null) {
    dx2 = checkTensor("dx2", opts.dx2, x.device);
    checkSameShape("dx2", dx2, x);
    if (dx2.dtype !== x.dtype) throw new ArgumentError("dx2.dtype", `x's dtype "${x.dtype}"`, dx2.dtype);
    const others = { ...Object.fromEntries(read), dResidual, dx: dxGiven, dweight: dwGiven, dbias: dbGiven };
    for (const [m, t] of Object.entries(others)) {
      if (t && overlaps(dx2, t)) {
        throw new ArgumentError("dx2", `memory that does not overlap ${m}`, `an overlap with ${m}`);
      }
    }
  }
  const device = x.device;
  const stream = checkStream(opts.stream ?? device.stream, device);
  if (device.backend === "hip") {
    throw new UnsupportedError(`${kind}NormBackward on HIP: the backward kernels have not been run on an AMD GPU`);
  }
  if (accumulate && ((weight && !dwGiven) || (bias && !dbGiven))) {
    throw new ArgumentError(
      "accumulate",
      "dweight (and dbias with a bias) to add into",
      "no tensor to accumulate into",
    );
  }
  const plan = device.backend === "cpu" ? undefined : devicePlanBackward(device, {
    kind,
    d: x.d,
    xDtype: x.dtype,
    dyDtype: dy.dtype,
    weightDtype: weight?.dtype,
    paramGrads: !!(weight || bias),
  });
  if (plan && "unsupported" in plan) throw new UnsupportedError(`${kind}NormBackward: ${plan.unsupported}`);
  // The backward kernels are an image of their own (loadKernels(dev, { backward: true })): loaded before anything is
  // allocated or launched.
  if (plan) backwardModule(device);
  // dResidual's add is a fused kernel: its module must be loaded before anything is launched.
  if (plan && dResidual) addKernel(device, x.dtype);
  // Allocating while a stream captures breaks the capture (global mode): say so before the driver does.
  if (deviceCapturing(device)) {
    const missing = [!dxGiven && "dx", weight && !dwGiven && "dweight", bias && !dbGiven && "dbias"].filter(Boolean);
    if (missing.length) {
      throw new UnsupportedError(
        `${kind}NormBackward during a graph capture: it would allocate ${
          missing.join(", ")
        }; pass them (allocated before beginCapture())`,
      );
    }
  }

  let dx = dxGiven, dweight = dwGiven, dbias = dbGiven;
  try {
    dx ??= emptyTensor(device, x.shape, { dtype: x.dtype });
    if (weight) dweight ??= emptyTensor(device, [x.d], { dtype: pdtype });
    if (bias) dbias ??= emptyTensor(device, [x.d], { dtype: pdtype });
    if (!plan) {
      cpuBackward(kind, dy, x, mean, rstd, weight, dx, dweight, dbias, accumulate, dResidual);
    } else if (x.rows === 0) {
      // Nothing to launch for dx; the parameter gradients of no rows are zeros.
      if (!accumulate) { for (const g of [dweight, dbias]) g?.write(new Float32Array(x.d), { stream }); }
    } else {
      launchBackward(plan.plan, { dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, stream, pdtype });
      if (dResidual) addInto(dx, dResidual, stream);
    }
    if (dx2 && x.rows > 0) copyRows(dx2, dx, stream);
  } catch (e) {
    if (!dxGiven) dx?.close();
    if (!dwGiven) dweight?.close();
    if (!dbGiven) dbias?.close();
    throw e;
  }
  return { dx, ...(dweight ? { dweight } : {}), ...(dbias ? { dbias } : {}) };
}

/**
 * planNormBackward with the device's limits, checked against what the GPU can hold (the driver counts 0 resident, e.g.
 * a MIG slice with too few SMs per GPC, or refuses the size):
 * - a plan of non-portable clusters (16 CTAs) that does not fit is replaced by the portable plan;
 * - a staged variant of clusters of any size (up to ~227 KB of shared memory per CTA) that does not fit gives way to
 *   the staged variant in the plan's own geometry, and where that does not fit either, to none (the register kernel).
 * Register plans of up to 8 CTAs are not checked (their shared memory is small), as the forward's are not.
 * The answer is kept per prepared kernel and geometry (one driver query, not one per call).
 * `overrides` replace some of the device's limits (tests: `smallStagedCtas: false` for the staged kernels in the
 * plan's own geometry).
 * @internal Exported for tests/unit/cluster_occupancy.test.ts and tests/gpu/norm_backward.test.ts.
 */
export function devicePlanBackward(
  device: Device,
  input: BwdPlanInput,
  overrides: Partial<BwdLimits> = {},
): BwdPlanResult {
  const limits = { ...bwdPlanLimits(device), ...overrides };
  const holds = (p: { kernel: string; block: number; sharedBytes: number; cluster: number }) =>
    p.cluster <= 1 || holdsCluster(normKernel(device, p.kernel, NORM_BWD_ARGS), p);
  const residentStaged = (r: BwdPlanResult, lim: BwdLimits): BwdPlanResult => {
    if (!("plan" in r) || !r.plan.staged || holds(r.plan.staged)) return r;
    const own = planNormBackward(input, { ...lim, smallStagedCtas: false });
    if ("plan" in own && own.plan.staged && holds(own.plan.staged)) return own;
    return { plan: (({ staged: _, ...p }) => p)(r.plan) };
  };
  const r = residentStaged(planNormBackward(input, limits), limits);
  if (!("plan" in r) || r.plan.cluster <= MAX_PORTABLE_CLUSTER || holds(r.plan)) return r;
  const portable = { ...limits, maxCluster: MAX_PORTABLE_CLUSTER };
  return residentStaged(planNormBackward(input, portable), portable);
}

// CUDA_ERROR_OUT_OF_MEMORY (hipErrorOutOfMemory has the same number).
const CUDA_ERROR_OUT_OF_MEMORY = 2;

/** Per prepared kernel (a module loaded again has new ones), per block/shared/cluster: whether one cluster fits. */
const clusterFits = new WeakMap<Kernel, Map<number, boolean>>();
function holdsCluster(k: Kernel, p: { block: number; sharedBytes: number; cluster: number }): boolean {
  let byGeometry = clusterFits.get(k);
  if (!byGeometry) clusterFits.set(k, byGeometry = new Map());
  // A number, not a string: every backward call of a staged cluster plan asks (block ≤ 1024, cluster ≤ 16).
  const key = (p.sharedBytes * 2048 + p.block) * 32 + p.cluster;
  let fits = byGeometry.get(key);
  if (fits === undefined) {
    try {
      fits = k.activeClusters(p.block, p.sharedBytes, p.cluster) > 0;
    } catch (e) {
      // A driver that refuses the non-portable size (its opt-in or the query): the portable plan. A sticky error
      // would fail that plan's launch in its turn, with its own message.
      if (!(e instanceof GpuError)) throw e;
      // Out of memory is no answer about the geometry: this call takes the portable plan, the next one asks again.
      if (e.code === CUDA_ERROR_OUT_OF_MEMORY) return false;
      fits = false;
    }
    byGeometry.set(key, fits);
  }
  return fits;
}

/** @internal */
export interface BackwardLaunch {
  dy: Tensor;
  x: Tensor;
  weight?: Tensor;
  mean?: Tensor;
  rstd: Tensor;
  dx: Tensor;
  dweight?: Tensor;
  dbias?: Tensor;
  accumulate: boolean;
  stream: Stream;
  pdtype: DType;
}

/**
 * Queues the plan's kernels (x has rows): dx with per-block parameter sums, then the finalize.
 * @internal Exported for tests/gpu/norm_backward.test.ts, which runs the staged kernels' geometry unstaged.
 */
export function launchBackward(plan: BwdPlan, a: BackwardLaunch): void {
  const { x, stream } = a, device = x.device;
  // The plan's bulk-staged variant where every row of this call qualifies (its kernels hold the FULL path alone).
  const st = plan.staged && plan.rowsPerBlock === 1 && bwdFull(
      x.d,
      x.dtype,
      a.dy.dtype,
      a.weight?.dtype ?? "f32",
      x.ptr,
      x.rowStride,
      a.dx.ptr,
      a.dx.rowStride,
      a.dy.ptr,
      a.dy.rowStride,
      a.weight?.ptr ?? 0n,
    )
    ? plan.staged
    : undefined;
  const p = st
    ? {
      ...plan,
      kernel: st.kernel,
      sharedBytes: st.sharedBytes,
      block: st.block,
      tpr: st.block,
      nv: st.nv,
      cluster: st.cluster,
    }
    : plan;
  const flags = (p.prefetch ? BWD_FLAG_PREFETCH : 0) | ((st?.stages ?? 0) << BWD_STAGES_SHIFT);
  const sms = device.info.multiprocessors, maxGrid = device.info.maxGridDim[0];
  const k = normKernel(device, p.kernel, NORM_BWD_ARGS);
  const config = (grid: number, block: number, sharedBytes = 0, cluster = 1) =>
    new LaunchConfig({ grid: [grid, 1, 1], block: [block, 1, 1], sharedBytes, cluster });
  const args = (
    part: DeviceBuffer | null,
    tpr = p.tpr,
    nv = p.nv,
  ) => [
    a.dy,
    x,
    a.weight ?? null,
    a.mean ?? null,
    a.rstd,
    a.dx,
    part,
    x.rows,
    x.d,
    a.dy.rowStride,
    x.rowStride,
    a.dx.rowStride,
    tpr,
    nv,
    flags,
  ];
  const finalize = (partials: bigint, nparts: number) =>
    normKernel(device, `nk_bwd_finalize_${a.pdtype}`, NORM_FINALIZE_ARGS).launch(
      stream,
      config(Math.ceil((p.nacc * x.d) / 32), 512),
      [
        partials,
        nparts,
        x.d,
        p.nacc,
        a.dweight ?? null,
        a.dbias ?? null,
        a.accumulate ? 1 : 0,
      ],
    );
  if (p.mapping === "split") {
    // Row sums, then column tiles × row groups (kernels/norm_bwd.cuh); workspace: the row sums, then the
    // groups' column partials, which the finalize adds up. One wave of tile blocks fills the GPU once.
    const ntiles = Math.ceil(x.d / p.tileColumns!);
    const resident = sms * Math.max(1, k.occupancy(p.block, 0));
    const groups = Math.max(1, Math.min(x.rows, Math.ceil(resident / ntiles), Math.floor(maxGrid / ntiles)));
    const sumsFloats = (2 * x.rows + 3) & ~3;
    const part = workspace(device, stream, 4 * (sumsFloats + groups * p.nacc * x.d));
    normKernel(device, p.rowsumKernel!, NORM_BWD_ARGS)
      .launch(
        stream,
        config(Math.min(x.rows, 4 * sms, maxGrid), p.rowsumBlock!, p.rowsumShared!),
        args(part, p.rowsumBlock!, 0),
      );
    k.launch(stream, config(ntiles * groups, p.block), args(part));
    finalize(part.ptr + BigInt(4 * sumsFloats), groups);
    return;
  }
  if (p.mapping === "cluster") {
    // Persistent clusters: as many as the driver says are resident at once (a cluster more would wait for
    // a whole wave); one row of partial sums per cluster.
    const clusters = Math.max(
      1,
      Math.min(x.rows, k.activeClusters(p.block, p.sharedBytes, p.cluster), Math.floor(maxGrid / p.cluster)),
    );
    const part = p.nacc > 0 ? workspace(device, stream, clusters * p.nacc * x.d * 4) : null;
    k.launch(stream, config(clusters * p.cluster, p.block, p.sharedBytes, p.cluster), args(part));
    if (part) finalize(part.ptr, clusters);
    return;
  }
  // Persistent grid: as many blocks as fit at once. The occupancy query is asked about registers only
  // (0 bytes); the shared-memory bound is computed here, per SM, as before Kernel.occupancy learned to opt in.
  const perSm = Math.max(
    1,
    Math.min(k.occupancy(p.block, 0), Math.floor((device.info.maxSharedPerBlockOptin + 1024) / (p.sharedBytes + 1024))),
  );
  // `wide` re-reads each row: at most two rows in flight per SM keep the re-reads in L2 (and the per-block
  // parameter rows small).
  const blocksPerSm = p.mapping === "wide" ? Math.min(perSm, 2) : perSm;
  const grid = Math.min(Math.ceil(x.rows / p.rowsPerBlock), sms * blocksPerSm, maxGrid);
  const part = p.nacc > 0 ? workspace(device, stream, grid * p.nacc * x.d * 4) : null;
  k.launch(stream, config(grid, p.block, p.sharedBytes), args(part));
  if (part) finalize(part.ptr, grid);
}

/**
 * The per-block parameter sums, one grow-only buffer per stream (work on one stream is ordered, so
 * consecutive backward calls on it can share it). Owned by the device: released with it.
 */
const workspaces = new WeakMap<Stream, DeviceBuffer>();
function workspace(device: Device, stream: Stream, bytes: number): DeviceBuffer {
  const have = workspaces.get(stream);
  if (have && !have.closed && have.byteLength >= bytes) return have;
  if (stream.capturing) {
    throw new UnsupportedError(
      `backward during a graph capture needs ${bytes} bytes of workspace on this stream: run the same backward once before beginCapture()`,
    );
  }
  if (have && !have.closed) {
    stream.synchronize(); // earlier launches on this stream may still read it
    have.close();
  }
  const buf = device.alloc(Math.max(bytes, 1 << 20));
  workspaces.set(stream, buf);
  return buf;
}

/**
 * dst's rows = src's rows (same shape and dtype; either may be a view of rows on two levels), queued on `stream`: one
 * copy when both are contiguous, else one per row.
 */
export function copyRows(dst: Tensor, src: Tensor, stream: Stream): void {
  const b = dst.bytesPerElement, row = dst.d * b;
  if (dst.contiguous && src.contiguous) {
    return dst.buffer.copyFrom(src.buffer, {
      offset: dst.offset * b,
      srcOffset: src.offset * b,
      bytes: dst.numel * b,
      stream,
    });
  }
  for (let r = 0; r < dst.rows; r++) {
    const offset = (dst.offset + rowOffset(dst.levels, r)) * b, srcOffset = (src.offset + rowOffset(src.levels, r)) * b;
    dst.buffer.copyFrom(src.buffer, { offset, srcOffset, bytes: row, stream });
  }
}

/** The CPU backend: float64 maths on the host bytes, with the forward's statistics as given. */
function cpuBackward(
  kind: NormKind,
  dy: Tensor,
  x: Tensor,
  mean: Tensor | undefined,
  rstd: Tensor,
  weight: Tensor | undefined,
  dx: Tensor,
  dweight: Tensor | undefined,
  dbias: Tensor | undefined,
  accumulate: boolean,
  dResidual?: Tensor,
): void {
  const rows = x.rows, d = x.d;
  const view = (t: Tensor) =>
    decode(
      t.buffer.hostBytes.subarray(
        t.offset * t.bytesPerElement,
        (t.offset + spanElements(t.rows, t.d, t.rowStride)) * t.bytesPerElement,
      ),
      t.dtype,
    );
  const r = normBackward({
    kind,
    rows,
    d,
    x: view(x),
    xStride: x.rowStride,
    dy: view(dy),
    dyStride: dy.rowStride,
    mean: mean?.readSync(),
    rstd: rstd.readSync(),
    weight: weight?.readSync(),
  });
  if (dResidual) {
    // As the CUDA path (the backward kernels, then nk_fused_add_*): the norm's dx rounded to the dtype, then the f32 sum
    // with dResidual, rounded again by encode below. A double's sum of two f32 values, rounded to f32, is the f32 sum.
    const add = dResidual.readSync(), normDx = decode(encode(r.dx, dx.dtype), dx.dtype);
    for (let i = 0; i < r.dx.length; i++) r.dx[i] = Math.fround(normDx[i] + add[i]);
  }
  const b = dx.bytesPerElement, out = dx.buffer.hostBytes;
  for (let row = 0; row < rows; row++) {
    const at = (dx.offset + row * dx.rowStride) * b;
    encode(r.dx.subarray(row * d, (row + 1) * d), dx.dtype, out.subarray(at, at + d * b));
  }
  for (const [g, v] of [[dweight, r.dweight], [dbias, r.dbias]] as const) {
    if (!g) continue;
    if (accumulate) {
      const old = g.readSync();
      g.write(v.map((s, j) => old[j] + s));
    } else g.write(v);
  }
}
