/** Argument checks for the norm ops: everything is checked before anything is allocated or launched. */
import type { Device } from "../runtime/device.ts";
import { type DType, isDType } from "../runtime/dtype.ts";
import { ArgumentError, DisposedError } from "../runtime/errors.ts";
import { Stream } from "../runtime/stream.ts";
import { levelSpan, Tensor } from "../runtime/tensor.ts";

/** The largest hidden size the kernels are built for. */
export const MAX_D = 262_144;

export function checkTensor(name: string, t: unknown, device?: Device): Tensor {
  // A brand check: a Proxy of a Tensor passes instanceof, then fails on its private fields with a bare TypeError.
  if (!Tensor.isTensor(t)) {
    throw new ArgumentError(name, "a Tensor (a Proxy of one or a look-alike object is refused)", t);
  }
  // The device first: its tensors are closed with it, and "the device was closed" is the useful message.
  if (t.device.closed) throw new DisposedError(`${name}'s device`);
  if (t.closed) throw new DisposedError(`${name} (Tensor)`);
  if (device && t.device !== device) {
    throw new ArgumentError(name, `a tensor on the same device as x (${device.id})`, `a tensor on ${t.device.id}`);
  }
  return t;
}

/**
 * eps reaches the kernels as an f32 (the CPU backend uses it as given): the value checked is Math.fround(eps), which
 * must be finite and > 0 (1e-50 would become 0, and a constant row 0/0; 1e39 would become Infinity).
 */
export function checkEps(eps: unknown): number {
  if (typeof eps !== "number" || !(Math.fround(eps) > 0) || Math.fround(eps) === Infinity) {
    throw new ArgumentError(
      "eps",
      "a number whose f32, as the kernels get it, is finite and > 0 (Math.fround(eps): about 1e-45 to 3.4e38)",
      eps,
    );
  }
  return eps;
}

/** A boolean option: true, false or not given (undefined). */
export function checkFlag(name: string, v: unknown): boolean | undefined {
  if (v !== undefined && typeof v !== "boolean") throw new ArgumentError(name, "a boolean", v);
  return v;
}

/** A hidden size the kernels support: an integer 1 to MAX_D. */
export function checkD(d: unknown): number {
  if (!Number.isSafeInteger(d) || (d as number) < 1 || (d as number) > MAX_D) {
    throw new ArgumentError("d", `an integer from 1 to ${MAX_D}`, d);
  }
  return d as number;
}

export function checkInput(x: unknown): Tensor {
  const t = checkTensor("x", x);
  if (t.d === 0) {
    throw new ArgumentError("x", "a last dimension ≥ 1 (D = 0 cannot be normalized)", `shape [${t.shape}]`);
  }
  if (t.d > MAX_D) throw new ArgumentError("x", `a last dimension ≤ ${MAX_D}`, t.d);
  if (!isDType(t.dtype)) throw new ArgumentError("x.dtype", `"f32", "f16" or "bf16"`, t.dtype);
  return t;
}

/** weight/bias: a tensor of D elements, f32 or x's dtype, on x's device. */
export function checkParam(name: string, p: unknown, x: Tensor): Tensor | undefined {
  if (p === undefined || p === null) return undefined;
  const t = checkTensor(name, p, x.device);
  if (t.numel !== x.d || t.rows !== 1) throw new ArgumentError(name, `shape [${x.d}] (D of x)`, `shape [${t.shape}]`);
  if (t.dtype !== "f32" && t.dtype !== x.dtype) {
    throw new ArgumentError(`${name}.dtype`, `"f32" or x's dtype "${x.dtype}"`, t.dtype);
  }
  return t;
}

/** A norm's weight and bias (none for RMSNorm), each [D] of f32 or x's dtype, the two of one dtype. */
export function checkParams(
  kind: "layer" | "rms",
  weightIn: unknown,
  biasIn: unknown,
  x: Tensor,
): { weight: Tensor | undefined; bias: Tensor | undefined } {
  const weight = checkParam("weight", weightIn, x);
  if (kind === "rms" && biasIn !== undefined && biasIn !== null) {
    throw new ArgumentError("bias", "no bias: RMSNorm has none (layerNorm takes one)", biasIn);
  }
  const bias = kind === "layer" ? checkParam("bias", biasIn, x) : undefined;
  // The kernels read weight and bias with one dtype.
  if (weight && bias && weight.dtype !== bias.dtype) {
    throw new ArgumentError("bias.dtype", `weight's dtype "${weight.dtype}"`, bias.dtype);
  }
  return { weight, bias };
}

export function checkOutDtype(outDtype: unknown, x: Tensor): DType {
  if (outDtype === undefined) return x.dtype;
  if (!isDType(outDtype)) throw new ArgumentError("outDtype", `"f32", "f16" or "bf16"`, outDtype);
  return outDtype;
}

/** The absolute range of addresses the rows of `t` span (first to last byte), in its buffer's address space. */
function addressRange(t: Tensor): { space: ArrayBufferLike | null; start: bigint; end: bigint } {
  const b = t.bytesPerElement;
  const { space, address } = t.buffer.addressOf(t.offset * b);
  return { space, start: address, end: address + BigInt(levelSpan(t.levels, t.d) * b) };
}

/**
 * Whether the byte spans of two tensors (first to last byte of their rows) intersect, by absolute address: two
 * buffers over the same memory (wrappers of one allocation) are compared as the memory they are. Conservative:
 * rows interleaved by their strides count as overlapping although no element is shared.
 */
export function overlaps(a: Tensor, b: Tensor): boolean {
  if (a.numel === 0 || b.numel === 0) return false; // no byte is read or written
  const ra = addressRange(a), rb = addressRange(b);
  return ra.space === rb.space && ra.start < rb.end && rb.start < ra.end;
}

/** Refuses a view whose rows lie on two levels (Tensor.uniformRows false) where an op needs one row stride. */
export function checkOneRowStride(name: string, t: Tensor, op: string): void {
  if (!t.uniformRows) {
    const l = t.levels;
    throw new ArgumentError(
      name,
      `rows one stride apart (${op} takes no view whose rows lie on two levels: copy it first)`,
      `${t} (row strides ${l.s0} and ${l.s1})`,
    );
  }
}

/** `t` (named `name`) must have x's shape. */
export function checkSameShape(name: string, t: Tensor, x: Tensor): void {
  if (t.shape.length !== x.shape.length || t.shape.some((n, i) => n !== x.shape[i])) {
    throw new ArgumentError(name, `shape [${x.shape}] (the shape of x)`, `shape [${t.shape}]`);
  }
}

/** The same elements in the same layout and dtype: an exact alias (in place), not a partial overlap. */
export function sameView(a: Tensor, b: Tensor): boolean {
  const la = a.levels, lb = b.levels;
  if (a.rows !== b.rows || a.dtype !== b.dtype) return false;
  if (a.uniformRows !== b.uniformRows) return false;
  if (
    a.uniformRows ? a.rows > 1 && a.rowStride !== b.rowStride : la.n1 !== lb.n1 || la.s0 !== lb.s0 || la.s1 !== lb.s1
  ) {
    return false;
  }
  const pa = a.buffer.addressOf(a.offset * a.bytesPerElement), pb = b.buffer.addressOf(b.offset * b.bytesPerElement);
  return pa.space === pb.space && pa.address === pb.address;
}

/** The stream an op runs on: an open Stream of x's device. */
export function checkStream(stream: unknown, device: Device): Stream {
  if (!Stream.isStream(stream) || stream.device !== device) {
    throw new ArgumentError("stream", `a Stream of x's device (${device.id})`, stream);
  }
  if (stream.closed) throw new DisposedError("stream");
  return stream;
}

/**
 * out: x's shape, the output dtype, x's device; the same memory as x exactly (in place) or none of it, and
 * none of the parameters' memory (writing y into weight/bias while other rows still read them is a race).
 */
export function checkOut(
  out: unknown,
  x: Tensor,
  dtype: DType,
  params: Readonly<Record<string, Tensor | undefined>> = {},
): Tensor | undefined {
  if (out === undefined || out === null) return undefined;
  const t = checkTensor("out", out, x.device);
  checkSameShape("out", t, x);
  if (t.dtype !== dtype) throw new ArgumentError("out.dtype", `"${dtype}"`, t.dtype);
  if (!sameView(t, x) && overlaps(t, x)) {
    throw new ArgumentError(
      "out",
      "either x itself (in place) or memory that does not overlap x",
      "a partial overlap with x",
    );
  }
  for (const [name, p] of Object.entries(params)) {
    if (p && overlaps(t, p)) {
      throw new ArgumentError("out", `memory that does not overlap ${name}`, `an overlap with ${name}`);
    }
  }
  return t;
}

/** A `normalizedShape` option: undefined (the last dimension), a dimension, or an array of ≥ 1 dimensions ≥ 1. */
export function checkNormalizedShape(v: unknown): readonly number[] | undefined {
  if (v === undefined) return undefined;
  const dims = typeof v === "number" ? [v] : v;
  if (!Array.isArray(dims) || dims.length === 0) {
    throw new ArgumentError("normalizedShape", "a dimension or an array of ≥ 1 dimensions", v);
  }
  for (const [i, n] of dims.entries()) {
    if (!Number.isSafeInteger(n) || n < 1) throw new ArgumentError(`normalizedShape[${i}]`, "an integer ≥ 1", n);
  }
  return Object.freeze([...dims]);
}

/**
 * `t` (named `name`) viewed with its trailing `normalizedShape` dimensions as one (no copy): [...leading, N]. They
 * must be t's trailing dimensions and contiguous (rows back to back inside them). `t` itself for one dimension.
 */
export function flattenNormalized(name: string, t: Tensor, normalizedShape: readonly number[]): Tensor {
  const k = normalizedShape.length, r = t.shape.length;
  if (r < k || normalizedShape.some((n, i) => t.shape[r - k + i] !== n)) {
    throw new ArgumentError(name, `trailing dimensions [${normalizedShape}] (normalizedShape)`, `shape [${t.shape}]`);
  }
  if (k === 1) return t;
  let inner = 1;
  for (let i = 0; i < k - 1; i++) inner *= normalizedShape[i];
  if (inner > 1) checkOneRowStride(name, t, "a norm over several normalized dimensions");
  if (inner > 1 && t.rowStride !== t.d) {
    throw new ArgumentError(
      name,
      `contiguous normalized dimensions [${normalizedShape}] (rowStride = the last dimension, ${t.d})`,
      `rowStride ${t.rowStride}`,
    );
  }
  const n = inner * t.d, lead = t.shape.slice(0, r - k);
  return new Tensor(t.buffer, [...lead, n], {
    dtype: t.dtype,
    offset: t.offset,
    rowStride: inner === 1 ? t.rowStride : n,
  });
}

/** A parameter (weight, bias, their gradients) of shape `normalizedShape` viewed flat as [N]; anything else as it is. */
export function flattenParam(name: string, p: unknown, normalizedShape: readonly number[]): unknown {
  if (!Tensor.isTensor(p) || p.closed || normalizedShape.length === 1) return p;
  const same = p.shape.length === normalizedShape.length && p.shape.every((n, i) => n === normalizedShape[i]);
  return same ? flattenNormalized(name, p, normalizedShape) : p;
}

/** A fresh, contiguous, owning result tensor given back in `shape` (same element count; no copy). */
export function reshapeOwned(t: Tensor, shape: readonly number[]): Tensor {
  return new Tensor(t.buffer, shape, { dtype: t.dtype, offset: t.offset, owns: true });
}
