/**
 * Training modules: LayerNorm and RMSNorm with their parameters resident on the device (an f32 master
 * copy, uploaded once), forward() that keeps what backward() needs, and gradients accumulated in f32
 * until zeroGrad(). Parameters load from and save to typed arrays, including int8 with a per-tensor or
 * per-channel scale (dequantized once on the host, then uploaded as f32).
 */
import type { Device } from "../runtime/device.ts";
import { ArgumentError, DisposedError } from "../runtime/errors.ts";
import type { Stream } from "../runtime/stream.ts";
import type { Tensor } from "../runtime/tensor.ts";
import { layerNormBackward, rmsNormBackward } from "./backward.ts";
import { layerNorm, rmsNorm } from "./norm.ts";
import type { NormKind } from "./plan.ts";

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

/** Dequantizes `v` to f32 (int8 codes × their scale), checking its length against d. */
export function dequantize(name: string, v: ParamValues, d: number): Float32Array {
  if (v && typeof v === "object" && "int8" in v) {
    if (!(v.int8 instanceof Int8Array) || v.int8.length !== d) throw new ArgumentError(`${name}.int8`, `an Int8Array of ${d} codes`, v.int8);
    const s = v.scale;
    const perChannel = typeof s !== "number";
    if (perChannel ? !s || s.length !== d : !Number.isFinite(s)) {
      throw new ArgumentError(`${name}.scale`, `a finite number or ${d} per-channel scales`, s);
    }
    const out = new Float32Array(d);
    for (let j = 0; j < d; j++) out[j] = v.int8[j] * (perChannel ? (s as ArrayLike<number>)[j] : (s as number));
    return out;
  }
  if (!v || typeof (v as ArrayLike<number>).length !== "number" || (v as ArrayLike<number>).length !== d) {
    throw new ArgumentError(name, `${d} numbers (or { int8, scale })`, v);
  }
  return Float32Array.from(v as ArrayLike<number>);
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

  constructor(device: Device, d: number, opts: NormModuleOptions, defaultEps: number, hasBias: boolean) {
    if (!Number.isSafeInteger(d) || d < 1) throw new ArgumentError("d", "an integer ≥ 1", d);
    this.device = device;
    this.d = d;
    this.eps = opts.eps ?? defaultEps;
    this.zeroCentered = opts.zeroCentered === true;
    const made: Tensor[] = [];
    const zeros = () => {
      const t = device.tensor(new Float32Array(d), [d]);
      made.push(t);
      return t;
    };
    try {
      if (opts.weight !== false) {
        this.weight = device.tensor(new Float32Array(d).fill(this.zeroCentered ? 0 : 1), [d]);
        made.push(this.weight);
        this.weightGrad = zeros();
        this.#scale = this.zeroCentered ? zeros() : this.weight;
        if (this.zeroCentered) this.#scale.write(new Float32Array(d).fill(1));
      }
      if (hasBias && opts.bias !== false) {
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

  /** Sets parameters from typed arrays (f32 or int8 + scale); uploads once. */
  load(values: { weight?: ParamValues; bias?: ParamValues }): void {
    this.#check();
    if (values.weight !== undefined) {
      if (!this.weight) throw new ArgumentError("weight", "no weight (the module was made without one)", "values");
      const w = dequantize("weight", values.weight, this.d);
      this.weight.write(w);
      if (this.zeroCentered) this.#scale!.write(w.map((v) => 1 + v));
    }
    if (values.bias !== undefined) {
      if (!this.bias) throw new ArgumentError("bias", "no bias (the module was made without one)", "values");
      this.bias.write(dequantize("bias", values.bias, this.d));
    }
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
  forward(x: Tensor, opts: { stream?: Stream } = {}): Tensor {
    this.#check();
    const r = this.kind === "layer"
      ? layerNorm(x, { weight: this.#scale, bias: this.bias, eps: this.eps, stats: true, stream: opts.stream })
      : rmsNorm(x, { weight: this.#scale, eps: this.eps, stats: true, stream: opts.stream });
    this.#release();
    this.#saved = { x, mean: this.kind === "layer" ? r.mean : (r.mean.close(), undefined), rstd: r.rstd };
    return r.y;
  }

  /** dx for the last forward's x, adding dweight/dbias into weightGrad/biasGrad. Consumes what forward kept. */
  backward(dy: Tensor, opts: { stream?: Stream } = {}): Tensor {
    this.#check();
    const s = this.#saved;
    if (!s) throw new ArgumentError("backward", "a forward() first (each forward allows one backward)", "none");
    // d(1 + w)/dw = 1: the scale's gradient is the stored weight's.
    const common = {
      rstd: s.rstd, weight: this.#scale, dweight: this.weightGrad, accumulate: true, stream: opts.stream,
    };
    const r = this.kind === "layer"
      ? layerNormBackward(dy, s.x, { ...common, mean: s.mean!, bias: this.bias, dbias: this.biasGrad })
      : rmsNormBackward(dy, s.x, common);
    this.#release();
    return r.dx;
  }

  /** Sets the accumulated gradients to zero. */
  zeroGrad(opts: { stream?: Stream } = {}): void {
    this.#check();
    this.weightGrad?.buffer.fill(0, opts);
    this.biasGrad?.buffer.fill(0, opts);
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
  constructor(device: Device, d: number, opts: NormModuleOptions = {}) {
    super(device, d, opts, 1e-5, true);
  }
}

/** RMSNorm over the last dimension, with a learnable weight. */
export class RMSNorm extends NormModule {
  protected readonly kind = "rms" as const;
  constructor(device: Device, d: number, opts: NormModuleOptions = {}) {
    super(device, d, opts, 1e-6, false);
  }
}
