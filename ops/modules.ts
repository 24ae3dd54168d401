/**
 * Training modules: LayerNorm and RMSNorm with their parameters resident on the device (an f32 master
 * copy, uploaded once), forward() that keeps what backward() needs, and gradients accumulated in f32
 * until zeroGrad(). Parameters load from and save to typed arrays, including int8 with a per-tensor or
 * per-channel scale (dequantized once on the host, then uploaded as f32).
 */
import { Device } from "../runtime/device.ts";
import { ArgumentError, DisposedError } from "../runtime/errors.ts";
import type { Stream } from "../runtime/stream.ts";
import { checkValues, type Tensor } from "../runtime/tensor.ts";
import { layerNormBackward, rmsNormBackward } from "./backward.ts";
import { layerNorm, rmsNorm } from "./norm.ts";
import type { NormKind } from "./plan.ts";
import { checkD, checkEps, checkFlag, checkInput, checkOptions, checkStream } from "./validate.ts";

/** The `{ stream? }` options of forward/backward/zeroGrad, read once (checked where it is used). */
function readStream(opts: unknown): Stream | undefined {
  return (checkOptions(opts, "an options object { stream? }") as { stream?: Stream } | undefined)?.stream;
}

/** Parameter values: f32 (or any numbers), or int8 codes with a scale (one, or one per channel). */
export type ParamValues = ArrayLike<number> | { int8: Int8Array; scale: number | ArrayLike<number> };

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
    if (!(codes instanceof Int8Array) || codes.length !== d) throw new ArgumentError(`${name}.int8`, `an Int8Array of ${d} codes`, codes);
    const perChannel = typeof scale !== "number";
    const scales = perChannel ? checkValues(scale, `${name}.scale`) : undefined;
    if (scales && scales.length !== d) throw new ArgumentError(`${name}.scale`, `one number or ${d} per-channel scales`, scale);
    const out = new Float32Array(d);
    for (let j = 0; j < d; j++) {
      const s = scales ? scales[j] : (scale as number);
      if (!(s >= 0) || s === Infinity) {
        throw new ArgumentError(scales ? `${name}.scale[${j}]` : `${name}.scale`, "a finite number ≥ 0", s);
      }
      out[j] = codes[j] * s;
      if (!Number.isFinite(out[j])) {
        throw new ArgumentError(scales ? `${name}.scale[${j}]` : `${name}.scale`, `a scale that keeps ${name} finite as f32 (code ${codes[j]} × scale)`, s);
      }
    }
    return out;
  }
  const values = checkValues(v, name);
  if (values.length !== d) throw new ArgumentError(name, `${d} numbers (or { int8, scale })`, `${values.length} numbers`);
  const out = Float32Array.from(values);
  for (let j = 0; j < d; j++) {
    if (!Number.isFinite(out[j])) throw new ArgumentError(`${name}[${j}]`, "a number finite as f32", values[j]);
  }
  return out;
}

/** NormModuleOptions read once and checked. */
function readModuleOptions(opts: unknown, defaultEps: number, hasBias: boolean): Required<NormModuleOptions> {
  const o = checkOptions(opts, "an options object { eps?, weight?, bias?, zeroCentered? }") as NormModuleOptions | undefined;
  const eps = o?.eps, weight = o?.weight, bias = o?.bias, zeroCentered = o?.zeroCentered;
  if (!hasBias && bias !== undefined) throw new ArgumentError("bias", "no bias option: RMSNorm has no bias (LayerNorm takes one)", bias);
  return {
    eps: checkEps(eps ?? defaultEps),
    weight: checkFlag("weight", weight) ?? true,
    bias: hasBias && (checkFlag("bias", bias) ?? true),
    zeroCentered: checkFlag("zeroCentered", zeroCentered) ?? false,
  };
}

abstract class NormModule implements Disposable {
  readonly device: Device;
  readonly d: number;
  readonly eps: number;
  readonly zeroCentered: boolean;
  /** The stored parameters (f32, [d]); with zeroCentered the weight is the offset from 1. */
  readonly weight?: Tensor;
  readonly bias?: Tensor;
  /** Accumulated gradients (f32, [d]). */
  readonly weightGrad?: Tensor;
  readonly biasGrad?: Tensor;
  /** The weight the kernels read: `weight`, or 1 + weight when zeroCentered. */
  #scale?: Tensor;
  #saved?: { x: Tensor; mean?: Tensor; rstd: Tensor };
  #closed = false;
  protected abstract readonly kind: NormKind;

  constructor(device: Device, d: number, optsIn: NormModuleOptions | undefined, defaultEps: number, hasBias: boolean) {
    // Everything the forward checks per call that is fixed at construction is checked here: a module that cannot run
    // is refused now, not at its first forward.
    if (!Device.isDevice(device)) throw new ArgumentError("device", "a Device (Device.open())", device);
    if (device.closed) throw new DisposedError("device");
    checkD(d);
    const opts = readModuleOptions(optsIn, defaultEps, hasBias);
    this.device = device;
    this.d = d;
    this.eps = opts.eps;
    this.zeroCentered = opts.zeroCentered;
    const made: Tensor[] = [];
    const zeros = () => {
      const t = device.tensor(new Float32Array(d), [d]);
      made.push(t);
      return t;
    };
    try {
      if (opts.weight) {
        this.weight = device.tensor(new Float32Array(d).fill(this.zeroCentered ? 0 : 1), [d]);
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
   */
  load(values: { weight?: ParamValues; bias?: ParamValues }): void {
    this.#check();
    if (typeof values !== "object" || values === null) throw new ArgumentError("values", "an object { weight?, bias? }", values);
    for (const key of Object.keys(values)) {
      if (key !== "weight" && key !== "bias") throw new ArgumentError(`values.${key}`, "only weight and bias", "an unknown key");
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
    if (w) {
      this.weight!.write(w);
      if (this.zeroCentered) this.#scale!.write(w.map((v) => 1 + v));
    }
    if (b) this.bias!.write(b);
  }

  /** The parameters and their gradients, as f32 arrays (waits for the device's stream). */
  state(): { weight?: Float32Array; bias?: Float32Array; weightGrad?: Float32Array; biasGrad?: Float32Array } {
    this.#check();
    return {
      weight: this.weight?.readSync(), bias: this.bias?.readSync(),
      weightGrad: this.weightGrad?.readSync(), biasGrad: this.biasGrad?.readSync(),
    };
  }

  /** Normalizes x and keeps x (by reference: do not close or overwrite it before backward) and the stats. */
  forward(xIn: Tensor, opts?: { stream?: Stream }): Tensor {
    this.#check();
    const stream = readStream(opts);
    const x = checkInput(xIn);
    // x's D against the module's d first: else the weight (of d elements) would be blamed for the mismatch.
    if (x.d !== this.d) throw new ArgumentError("x", `a last dimension of ${this.d} (the module's d)`, `shape [${x.shape}]`);
    const r = this.kind === "layer"
      ? layerNorm(x, { weight: this.#scale, bias: this.bias, eps: this.eps, stats: true, stream })
      : rmsNorm(x, { weight: this.#scale, eps: this.eps, stats: true, stream });
    this.#release();
    this.#saved = { x, mean: this.kind === "layer" ? r.mean : (r.mean.close(), undefined), rstd: r.rstd };
    return r.y;
  }

  /** dx for the last forward's x, adding dweight/dbias into weightGrad/biasGrad. Consumes what forward kept. */
  backward(dy: Tensor, opts?: { stream?: Stream }): Tensor {
    this.#check();
    const stream = readStream(opts);
    const s = this.#saved;
    if (!s) throw new ArgumentError("backward", "a forward() first (each forward allows one backward)", "none");
    // d(1 + w)/dw = 1: the scale's gradient is the stored weight's.
    const common = {
      rstd: s.rstd, weight: this.#scale, dweight: this.weightGrad, accumulate: true, stream,
    };
    const r = this.kind === "layer"
      ? layerNormBackward(dy, s.x, { ...common, mean: s.mean!, bias: this.bias, dbias: this.biasGrad })
      : rmsNormBackward(dy, s.x, common);
    this.#release();
    return r.dx;
  }

  /** Sets the accumulated gradients to zero. */
  zeroGrad(opts?: { stream?: Stream }): void {
    this.#check();
    const stream = readStream(opts);
    if (stream !== undefined) checkStream(stream, this.device);
    this.weightGrad?.buffer.fill(0, { stream });
    this.biasGrad?.buffer.fill(0, { stream });
  }

  #release(): void {
    this.#saved?.mean?.close();
    this.#saved?.rstd.close();
    this.#saved = undefined;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#release();
    for (const t of [this.weight, this.bias, this.weightGrad, this.biasGrad, this.zeroCentered ? this.#scale : undefined]) t?.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** LayerNorm over the last dimension, with learnable weight and bias. */
export class LayerNorm extends NormModule {
  protected readonly kind = "layer" as const;
  constructor(device: Device, d: number, opts?: NormModuleOptions) {
    super(device, d, opts, 1e-5, true);
  }
}

/** RMSNorm over the last dimension, with a learnable weight. */
export class RMSNorm extends NormModule {
  protected readonly kind = "rms" as const;
  constructor(device: Device, d: number, opts?: NormModuleOptions) {
    super(device, d, opts, 1e-6, false);
  }
}
