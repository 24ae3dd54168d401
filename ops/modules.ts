/**
 * Training modules: LayerNorm and RMSNorm with their parameters resident on the device (an f32 master
 * copy, uploaded once), forward() that keeps what backward() needs, and gradients accumulated in f32
 * until zeroGrad(). Parameters load from and save to typed arrays, including int8 with a per-tensor or
 * per-channel scale (dequantized once on the host, then uploaded as f32).
 */
import { Device } from "../runtime/device.ts";
import { ArgumentError, DisposedError } from "../runtime/errors.ts";
import { checkOptionKeys, optionKeys, STREAM_KEYS } from "../runtime/options.ts";
import type { Stream } from "../runtime/stream.ts";
import { checkValues, emptyTensor, type Tensor } from "../runtime/tensor.ts";
import { copyRows, layerNormBackward, rmsNormBackward } from "./backward.ts";
import { layerNorm, rmsNorm } from "./norm.ts";
import {
  checkD,
  checkEps,
  checkFlag,
  checkInput,
  checkNormalizedShape,
  checkStream,
  flattenNormalized,
  MAX_D,
} from "./validate.ts";

const MODULE_KEYS = optionKeys(...(["eps", "weight", "bias", "zeroCentered"] satisfies (keyof NormModuleOptions)[]));
const FORWARD_KEYS = optionKeys("stream", "residual", "residualOut");
const BACKWARD_KEYS = optionKeys("stream", "dResidual");

/** The `{ stream? }` options of zeroGrad, read once (checked where it is used). */
function readStream(opts: unknown): Stream | undefined {
  return (checkOptionKeys(opts, STREAM_KEYS) as { stream?: Stream } | undefined)?.stream;
}

/** Parameter values: f32 (or any numbers), or int8 codes with a scale (one, or one per channel). */
export type ParamValues = ArrayLike<number> | { int8: Int8Array; scale: number | ArrayLike<number> };

/** Options of the LayerNorm and RMSNorm modules. All optional. */
export interface NormModuleOptions {
  /** Default 1e-5 (LayerNorm) / 1e-6 (RMSNorm). */
  eps?: number;
  /** Learnable scale (default true). */
  weight?: boolean;
  /** LayerNorm only: learnable shift (default true). */
  bias?: boolean;
  /** Gemma-style: the stored weight w is used as 1 + w (initialised to 0 instead of 1). */
  zeroCentered?: boolean;
}

/**
 * Dequantizes `v` to f32 (int8 codes × their scale), checking it whole first: d numbers (an Array of numbers or a
 * typed array), or d int8 codes with one scale or d per-channel scales, each a finite number ≥ 0; every value must be
 * finite as an f32 (a scale of 1e39 would make the weights Infinity). Each field is read once.
 */
export function dequantize(name: string, v: unknown, d: number): Float32Array {
  if (typeof v === "object" && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v)) {
    if (!("int8" in v)) throw new ArgumentError(name, `${d} numbers or { int8, scale }`, v);
    const q = v as { int8: unknown; scale: unknown };
    const codes = q.int8, scale = q.scale;
    if (!(codes instanceof Int8Array) || codes.length !== d) {
      throw new ArgumentError(`${name}.int8`, `an Int8Array of ${d} codes`, codes);
    }
    const perChannel = typeof scale !== "number";
    const scales = perChannel ? checkValues(scale, `${name}.scale`) : undefined;
    if (scales && scales.length !== d) {
      throw new ArgumentError(`${name}.scale`, `one number or ${d} per-channel scales`, scale);
    }
    const out = new Float32Array(d);
    for (let j = 0; j < d; j++) {
      const s = scales ? scales[j] : (scale as number);
      if (!(s >= 0) || s === Infinity) {
        throw new ArgumentError(scales ? `${name}.scale[${j}]` : `${name}.scale`, "a finite number ≥ 0", s);
      }
      out[j] = codes[j] * s;
      if (!Number.isFinite(out[j])) {
        throw new ArgumentError(
          scales ? `${name}.scale[${j}]` : `${name}.scale`,
          `a scale that keeps ${name} finite as f32 (code ${codes[j]} × scale)`,
          s,
        );
      }
    }
    return out;
  }
  const values = checkValues(v, name);
  if (values.length !== d) {
    throw new ArgumentError(name, `${d} numbers (or { int8, scale })`, `${values.length} numbers`);
  }
  const out = Float32Array.from(values);
  for (let j = 0; j < d; j++) {
    if (!Number.isFinite(out[j])) throw new ArgumentError(`${name}[${j}]`, "a number finite as f32", values[j]);
  }
  return out;
}

/** NormModuleOptions read once and checked. */
function readModuleOptions(opts: unknown, defaultEps: number, hasBias: boolean): Required<NormModuleOptions> {
  const o = checkOptionKeys(opts, MODULE_KEYS) as
    | NormModuleOptions
    | undefined;
  const eps = o?.eps, weight = o?.weight, bias = o?.bias, zeroCentered = o?.zeroCentered;
  if (!hasBias && bias !== undefined) {
    throw new ArgumentError("bias", "no bias option: RMSNorm has no bias (LayerNorm takes one)", bias);
  }
  return {
    eps: checkEps(eps ?? defaultEps),
    weight: checkFlag("weight", weight) ?? true,
    bias: hasBias && (checkFlag("bias", bias) ?? true),
    zeroCentered: checkFlag("zeroCentered", zeroCentered) ?? false,
  };
}

/** A module's normalized shape: d (a number, named "d" in errors) or trailing dimensions, their product ≤ MAX_D. */
function checkModuleShape(v: unknown): readonly number[] {
  if (typeof v === "number" || !Array.isArray(v)) return [checkD(v)];
  const ns = checkNormalizedShape(v)!;
  const n = ns.reduce((a, b) => a * b, 1);
  if (n > MAX_D) {
    throw new ArgumentError("normalizedShape", `at most ${MAX_D} elements in all`, `[${ns}]: ${n} elements`);
  }
  return ns;
}

/**
 * What LayerNorm and RMSNorm share: parameters resident on the device (f32, of shape normalizedShape), forward()
 * that keeps what backward() needs, gradients accumulated in f32 until zeroGrad(). Every method throws
 * DisposedError once the module is closed; closing it frees its parameters, gradients and saved statistics (not
 * the device).
 */
export abstract class NormModule implements Disposable {
  /** The device the parameters are on. */
  readonly device: Device;
  /** Elements normalized per row: the product of normalizedShape. */
  readonly d: number;
  /** The trailing dimensions normalized over (PyTorch's normalized_shape); the parameters have this shape. */
  readonly normalizedShape: readonly number[];
  /** Added to the variance (mean of squares for RMSNorm) inside the square root. */
  readonly eps: number;
  /** Whether the weight is stored as an offset from 1 (Gemma-style: the kernels use 1 + weight). */
  readonly zeroCentered: boolean;
  /** The stored weight (f32, normalizedShape); with zeroCentered the offset from 1. Absent with `weight: false`. */
  readonly weight?: Tensor;
  /** The stored bias (f32, normalizedShape); LayerNorm only, absent with `bias: false`. */
  readonly bias?: Tensor;
  /** The weight's accumulated gradient (f32, normalizedShape). */
  readonly weightGrad?: Tensor;
  /** The bias's accumulated gradient (f32, normalizedShape). */
  readonly biasGrad?: Tensor;
  /** The weight the kernels read: `weight`, or 1 + weight when zeroCentered. */
  #scale?: Tensor;
  /** What backward() needs; `x` is the module's own copy of h after a forward with a residual (`ownsX`). */
  #saved?: { x: Tensor; ownsX: boolean; mean?: Tensor; rstd: Tensor };
  #closed = false;
  /** Which norm the module computes. */
  protected abstract readonly kind: "layer" | "rms";

  /** @internal use new LayerNorm(…) or new RMSNorm(…) */
  constructor(
    device: Device,
    shape: number | readonly number[],
    optsIn: NormModuleOptions | undefined,
    defaultEps: number,
    hasBias: boolean,
  ) {
    // Everything the forward checks per call that is fixed at construction is checked here: a module that cannot run
    // is refused now, not at its first forward.
    if (!Device.isDevice(device)) throw new ArgumentError("device", "a Device (Device.open())", device);
    if (device.closed) throw new DisposedError("device");
    const ns = checkModuleShape(shape), d = ns.reduce((a, b) => a * b, 1);
    const opts = readModuleOptions(optsIn, defaultEps, hasBias);
    this.device = device;
    this.d = d;
    this.normalizedShape = ns;
    this.eps = opts.eps;
    this.zeroCentered = opts.zeroCentered;
    const made: Tensor[] = [];
    const zeros = () => {
      const t = device.tensor(new Float32Array(d), ns);
      made.push(t);
      return t;
    };
    try {
      if (opts.weight) {
        this.weight = device.tensor(new Float32Array(d).fill(this.zeroCentered ? 0 : 1), ns);
        made.push(this.weight);
        this.weightGrad = zeros();
        this.#scale = this.zeroCentered ? zeros() : this.weight;
        if (this.zeroCentered) this.#scale.write(new Float32Array(d).fill(1));
      }
      if (opts.bias) {
        this.bias = zeros();
        this.biasGrad = zeros();
      }
    } catch (e) {
      for (const t of made) t.close();
      throw e;
    }
  }

  #check(): void {
    if (this.#closed) throw new DisposedError(`${this.constructor.name} module`);
  }

  /**
   * Sets parameters from typed arrays (f32 or int8 + scale); uploads once. Everything is checked before anything is
   * written: a refused call leaves both parameters as they were.
   *
   * @param values weight and/or bias: d numbers, or `{ int8, scale }` (d int8 codes with one scale or d
   *   per-channel scales, dequantized to f32 on the host).
   * @throws {ArgumentError} for a wrong length, a non-finite value or scale, an unknown key, or a parameter the
   *   module was made without.
   *
   * @example
   * ```ts
   * import { Device, LayerNorm } from "@normkit/normkit";
   * using dev = Device.open();
   * using ln = new LayerNorm(dev, 768);
   * ln.load({ weight: new Float32Array(768).fill(1.5), bias: new Float32Array(768) });
   * ln.load({ weight: { int8: new Int8Array(768).fill(50), scale: 0.02 } });   // weight 1.0 everywhere
   * ```
   */
  load(values: { weight?: ParamValues; bias?: ParamValues }): void {
    this.#check();
    if (typeof values !== "object" || values === null) {
      throw new ArgumentError("values", "an object { weight?, bias? }", values);
    }
    for (const key of Object.keys(values)) {
      if (key !== "weight" && key !== "bias") {
        throw new ArgumentError(`values.${key}`, "only weight and bias", "an unknown key");
      }
    }
    const weightIn = values.weight, biasIn = values.bias;
    let w: Float32Array | undefined, b: Float32Array | undefined;
    if (weightIn !== undefined) {
      if (!this.weight) throw new ArgumentError("weight", "no weight (the module was made without one)", "values");
      w = dequantize("weight", weightIn, this.d);
    }
    if (biasIn !== undefined) {
      if (!this.bias) throw new ArgumentError("bias", "no bias (the module was made without one)", "values");
      b = dequantize("bias", biasIn, this.d);
    }
    // All or nothing: a failed upload puts back what was there, so state() and forward() always agree.
    const writes: [Tensor, Float32Array][] = [];
    if (w) {
      writes.push([this.weight!, w]);
      if (this.zeroCentered) writes.push([this.#scale!, w.map((v) => 1 + v)]);
    }
    if (b) writes.push([this.bias!, b]);
    const before = writes.map(([t]) => t.readSync());
    let done = 0;
    try {
      for (const [t, v] of writes) t.write(v), done++;
    } catch (e) {
      try {
        for (let i = 0; i <= Math.min(done, writes.length - 1); i++) writes[i][0].write(before[i]);
      } catch {
        // The device refuses uploads now: the original error is the one worth reporting.
      }
      throw e;
    }
  }

  /** The parameters and their gradients, as f32 arrays (waits for the device's stream); absent ones are undefined. */
  state(): { weight?: Float32Array; bias?: Float32Array; weightGrad?: Float32Array; biasGrad?: Float32Array } {
    this.#check();
    return {
      weight: this.weight?.readSync(),
      bias: this.bias?.readSync(),
      weightGrad: this.weightGrad?.readSync(),
      biasGrad: this.biasGrad?.readSync(),
    };
  }

  /**
   * Normalizes x and keeps x (by reference: do not close or overwrite it before backward; a view whose rows lie on
   * two levels is copied) and the statistics for one backward(). Returns y, a new tensor.
   *
   * @param x The input: trailing dimensions normalizedShape (last dimension d); f32, f16 or bf16.
   * @param opts.stream The stream to run on (default: the device's).
   * @param opts.residual Added to x first (x's shape and dtype): h = x + residual is written to `residualOut`
   *   (default: residual itself, in place) and normalized; the module keeps a copy of h for backward() (one
   *   device copy of h on the stream: the residual buffer is typically overwritten by the next layer's add before
   *   this layer's backward), whose `dResidual` then adds the gradient arriving at h from the next residual branch.
   *   The fused kernels run it (`await loadKernels(dev, { fused: true })` on a GPU).
   * @param opts.residualOut Where h goes (see layerNorm's residualOut).
   * @throws {ArgumentError} when x's trailing dimensions are not normalizedShape, or as layerNorm / rmsNorm do.
   * @throws {UnsupportedError} and {GpuError} as layerNorm / rmsNorm do.
   */
  forward(xIn: Tensor, opts?: { stream?: Stream; residual?: Tensor; residualOut?: Tensor }): Tensor {
    this.#check();
    const o = checkOptionKeys(opts, FORWARD_KEYS) as
      | { stream?: Stream; residual?: Tensor; residualOut?: Tensor }
      | undefined;
    const stream = o?.stream, residual = o?.residual, residualOut = o?.residualOut;
    const x = checkInput(xIn);
    // x's shape against the module's first: else the weight (of d elements) would be blamed for the mismatch.
    const ns = this.normalizedShape;
    if (ns.length === 1 && x.d !== this.d) {
      throw new ArgumentError("x", `a last dimension of ${this.d} (the module's d)`, `shape [${x.shape}]`);
    }
    flattenNormalized("x", x, ns);
    const normalizedShape = ns.length === 1 ? undefined : ns;
    const fused = residual == null && residualOut == null ? {} : { residual, residualOut };
    const r = this.kind === "layer"
      ? layerNorm(x, {
        weight: this.#scale,
        bias: this.bias,
        eps: this.eps,
        stats: true,
        stream,
        normalizedShape,
        ...fused,
      })
      : rmsNorm(x, { weight: this.#scale, eps: this.eps, stats: true, stream, normalizedShape, ...fused });
    const mean = this.kind === "layer" ? r.mean : (r.mean.close(), undefined);
    // With a residual, the backward's x is h (in residualOut, or residual itself): a copy of its own, since the
    // caller's buffer usually takes the next layer's sum before this layer's backward. x on two levels (a head view)
    // is copied too: the backward takes rows one stride apart.
    let saved = x;
    if (residual != null || !x.uniformRows) {
      try {
        const h = residual != null ? residualOut ?? residual : x;
        saved = emptyTensor(this.device, h.shape, { dtype: h.dtype });
        copyRows(saved, h, stream ?? this.device.stream);
      } catch (e) {
        if (saved !== x) saved.close();
        for (const t of [r.y, mean, r.rstd]) t?.close();
        throw e;
      }
    }
    this.#release();
    this.#saved = { x: saved, ownsX: saved !== x, mean, rstd: r.rstd };
    return r.y;
  }

  /**
   * dx for the last forward's x, adding dweight/dbias into weightGrad/biasGrad. Consumes what forward kept.
   *
   * @param dy The gradient of the last forward's y (its shape).
   * @param opts.stream The stream to run on (default: the device's).
   * @param opts.dResidual After a forward with a residual: the gradient arriving at h from the next residual branch,
   *   added to dx (which is then the gradient of both x and residual).
   * @throws {ArgumentError} without a forward() since the last backward(), or as the backward ops do.
   * @throws {UnsupportedError} and {GpuError} as layerNormBackward / rmsNormBackward do.
   */
  backward(dy: Tensor, opts?: { stream?: Stream; dResidual?: Tensor }): Tensor {
    this.#check();
    const o = checkOptionKeys(opts, BACKWARD_KEYS) as
      | { stream?: Stream; dResidual?: Tensor }
      | undefined;
    const stream = o?.stream, dResidual = o?.dResidual;
    const s = this.#saved;
    if (!s) throw new ArgumentError("backward", "a forward() first (each forward allows one backward)", "none");
    // d(1 + w)/dw = 1: the scale's gradient is the stored weight's.
    const common = {
      rstd: s.rstd,
      weight: this.#scale,
      dweight: this.weightGrad,
      accumulate: true,
      stream,
      ...(dResidual === undefined ? {} : { dResidual }),
      normalizedShape: this.normalizedShape.length === 1 ? undefined : this.normalizedShape,
    };
    const r = this.kind === "layer"
      ? layerNormBackward(dy, s.x, { ...common, mean: s.mean!, bias: this.bias, dbias: this.biasGrad })
      : rmsNormBackward(dy, s.x, common);
    this.#release();
    return r.dx;
  }

  /** Sets the accumulated gradients to zero (queued on `opts.stream`, default: the device's). */
  zeroGrad(opts?: { stream?: Stream }): void {
    this.#check();
    const stream = readStream(opts);
    if (stream !== undefined) checkStream(stream, this.device);
    this.weightGrad?.buffer.fill(0, { stream });
    this.biasGrad?.buffer.fill(0, { stream });
  }

  #release(): void {
    if (this.#saved?.ownsX) this.#saved.x.close();
    this.#saved?.mean?.close();
    this.#saved?.rstd.close();
    this.#saved = undefined;
  }

  /** Frees the parameters, gradients and saved statistics. Safe to call more than once. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#release();
    for (
      const t of [this.weight, this.bias, this.weightGrad, this.biasGrad, this.zeroCentered ? this.#scale : undefined]
    ) t?.close();
  }

  /** close(), for `using` declarations. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * LayerNorm with learnable weight and bias, as PyTorch's nn.LayerNorm: over the last dimension (`d`, a number) or
 * the trailing dimensions `normalizedShape` (e.g. `[8, 64]`: 512 elements per row, weight and bias of shape [8, 64]).
 * The weight starts at 1, the bias at 0.
 *
 * @example A training step
 * ```ts
 * import { Device, LayerNorm, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev, { backward: true }); // the forward and the backward kernels
 * const batch = 16;
 * using ln = new LayerNorm(dev, 768);
 * using x = dev.tensor(new Float32Array(batch * 768).map(() => Math.random()), [batch, 768]);
 * using y = ln.forward(x);
 * using dy = dev.tensor(new Float32Array(batch * 768).fill(0.01), [batch, 768]);
 * using dx = ln.backward(dy);         // adds into ln.weightGrad and ln.biasGrad
 * const { weightGrad, biasGrad } = ln.state();
 * ln.zeroGrad();
 * ```
 */
export class LayerNorm extends NormModule {
  /** "layer". */
  protected readonly kind = "layer" as const;
  /**
   * A LayerNorm module on `device`, its parameters allocated there.
   *
   * @param device The device for the parameters and the work.
   * @param normalizedShape The last dimension's size, or the trailing dimensions normalized over.
   * @param opts eps (default 1e-5), weight / bias (default true: learnable), zeroCentered.
   * @throws {ArgumentError} for a bad device, shape or option.
   * @throws {DisposedError} when the device is closed.
   */
  constructor(device: Device, normalizedShape: number | readonly number[], opts?: NormModuleOptions) {
    super(device, normalizedShape, opts, 1e-5, true);
  }
}

/**
 * RMSNorm with a learnable weight, as PyTorch's nn.RMSNorm: over the last dimension (`d`, a number) or the
 * trailing dimensions `normalizedShape` (e.g. `[8, 64]`: 512 elements per row, weight of shape [8, 64]).
 * The weight starts at 1 (0 with zeroCentered, used as 1 + weight).
 *
 * @example Gemma-style weights, loaded from int8
 * ```ts
 * import { Device, loadKernels, RMSNorm } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using norm = new RMSNorm(dev, 2048, { zeroCentered: true });
 * const codes = new Int8Array(2048).map((_, i) => (i % 255) - 127);
 * const scales = new Float32Array(2048).fill(1 / 127);
 * norm.load({ weight: { int8: codes, scale: scales } });   // per-channel scales
 * using x = dev.tensor(new Float32Array(4 * 2048).map(() => Math.random()), [4, 2048], { dtype: "bf16" });
 * using y = norm.forward(x);
 * ```
 */
export class RMSNorm extends NormModule {
  /** "rms". */
  protected readonly kind = "rms" as const;
  /**
   * An RMSNorm module on `device`, its weight allocated there.
   *
   * @param device The device for the weight and the work.
   * @param normalizedShape The last dimension's size, or the trailing dimensions normalized over.
   * @param opts eps (default 1e-6), weight (default true: learnable), zeroCentered. A bias is refused.
   * @throws {ArgumentError} for a bad device, shape or option.
   * @throws {DisposedError} when the device is closed.
   */
  constructor(device: Device, normalizedShape: number | readonly number[], opts?: NormModuleOptions) {
    super(device, normalizedShape, opts, 1e-6, false);
  }
}
