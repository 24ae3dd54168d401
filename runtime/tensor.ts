/**
 * Tensor: a dtype, a shape and rows in a DeviceBuffer. The last dimension is contiguous; the leading
 * dimensions are flattened into rows that start `rowStride` elements apart (rowStride ≥ last dim), so a
 * row-strided view is described without a copy.
 */
import type { Device } from "./device.ts";
import { decode, type DType, dtypeBytes, encode, isDType } from "./dtype.ts";
import { ArgumentError } from "./errors.ts";
import { DeviceBuffer } from "./memory.ts";
import { Stream } from "./stream.ts";

export interface TensorOptions {
  /** Element type on the device (default "f32"). Values are rounded to it (nearest-even). */
  dtype?: DType;
  /** Elements between consecutive row starts (default: the last dimension). */
  rowStride?: number;
  /** Stream for the upload (default: the device's). */
  stream?: Stream;
}

/** Checks a shape: an array of ≥ 1 non-negative safe integers. */
export function checkShape(shape: unknown, argument = "shape"): readonly number[] {
  if (!Array.isArray(shape) || shape.length === 0) {
    throw new ArgumentError(argument, "an array of at least one dimension (rank ≥ 1)", shape);
  }
  for (const [i, n] of shape.entries()) {
    if (!Number.isSafeInteger(n) || n < 0) throw new ArgumentError(`${argument}[${i}]`, "an integer ≥ 0", n);
  }
  return Object.freeze([...shape]);
}

/** The options of a call that takes none but an optional stream, read once: `{ stream? }` or nothing. */
export function readStreamOption(opts: unknown, device: Device): Stream | undefined {
  if (opts === undefined) return undefined;
  if (typeof opts !== "object" || opts === null) throw new ArgumentError("options", "an options object { stream? } or nothing", opts);
  const stream = (opts as { stream?: unknown }).stream;
  if (stream === undefined) return undefined;
  if (!Stream.isStream(stream) || stream.device !== device) throw new ArgumentError("stream", `a Stream of ${device.id}`, stream);
  return stream;
}

/** TensorOptions read once, each option checked. */
function readTensorOptions(opts: unknown): { dtype: DType; rowStride: unknown; stream: unknown } {
  if (opts === undefined) return { dtype: "f32", rowStride: undefined, stream: undefined };
  if (typeof opts !== "object" || opts === null) throw new ArgumentError("options", "an options object { dtype?, rowStride?, stream? } or nothing", opts);
  const o = opts as TensorOptions;
  const dtype = o.dtype ?? "f32", rowStride = o.rowStride, stream = o.stream;
  if (!isDType(dtype)) throw new ArgumentError("dtype", `"f32", "f16" or "bf16"`, dtype);
  return { dtype, rowStride, stream };
}

/**
 * Values to upload, checked and read once: an Array of numbers (copied, each element read once) or a typed array
 * of numbers. Strings, bigints, objects and other array-likes are refused, not coerced (to NaN or a digit).
 * NaN and ±Infinity are numbers and pass: check mode exists to find them.
 */
export function checkValues(values: unknown, argument = "values"): ArrayLike<number> {
  if (Array.isArray(values)) {
    const n = values.length, copy = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const v: unknown = values[i];
      if (typeof v !== "number") throw new ArgumentError(`${argument}[${i}]`, "a number", v);
      copy[i] = v;
    }
    return copy;
  }
  if (ArrayBuffer.isView(values) && !(values instanceof DataView) && !(values instanceof BigInt64Array) && !(values instanceof BigUint64Array)) {
    return values as unknown as ArrayLike<number>;
  }
  throw new ArgumentError(argument, "numbers: an Array of numbers or a typed array such as Float32Array", values);
}

const EXACT = 2 ** 52;

/**
 * The bytes a tensor of `shape` (rows of the last dimension `rowStride` elements apart, from element `offset`)
 * spans, exactly: refused (naming `argument`, with the exact count) past Number.MAX_SAFE_INTEGER elements or bytes.
 */
export function tensorBytes(shape: readonly number[], rowStride: number, offset: number, dtype: DType, argument = "shape"): number {
  const d = shape[shape.length - 1];
  let rows = 1;
  for (let i = 0; i < shape.length - 1; i++) rows *= shape[i];
  const bytes = (offset + spanElements(rows, d, rowStride)) * dtypeBytes(dtype);
  // Below 2^52 every product above was exact (integer factors ≥ 1 only grow; a 0 makes the rest exact 0).
  if (rows < EXACT && rows * d < EXACT && bytes < EXACT) return bytes;
  let r = 1n;
  for (let i = 0; i < shape.length - 1; i++) r *= BigInt(shape[i]);
  const numel = r * BigInt(d);
  const span = r === 0n || d === 0 ? 0n : (r - 1n) * BigInt(rowStride) + BigInt(d);
  const exact = (BigInt(offset) + span) * BigInt(dtypeBytes(dtype));
  const max = BigInt(Number.MAX_SAFE_INTEGER);
  if (numel > max || r > max) throw new ArgumentError(argument, "at most 2^53 − 1 elements", `shape [${shape}]: ${numel} elements`);
  if (exact > max) throw new ArgumentError(argument, "a tensor of at most 2^53 − 1 bytes", `shape [${shape}] ${dtype}: ${exact} bytes`);
  return Number(exact);
}

/** Elements the storage of `rows` rows of `d` elements, `rowStride` apart, spans. */
export function spanElements(rows: number, d: number, rowStride: number): number {
  return rows === 0 || d === 0 ? 0 : (rows - 1) * rowStride + d;
}

export class Tensor implements Disposable {
  readonly device: Device;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Elements between consecutive row starts. */
  readonly rowStride: number;
  /** Element offset of the first row in the buffer. */
  readonly offset: number;
  readonly buffer: DeviceBuffer;
  readonly #ownsBuffer: boolean;
  // Derived once: a tensor is an immutable view (frozen shape, readonly fields), and the hot path of the ops
  // reads these on every call.
  readonly #rows: number;
  readonly #d: number;
  readonly #bytesPerElement: number;
  /** buffer.ptr + the offset in bytes, made on first use (a bigint: no BigInt maths per launch). */
  #ptr: bigint | undefined;

  /** Wraps `buffer` (owned: closed with the tensor when `owns`). Checks that the rows fit. */
  constructor(
    buffer: DeviceBuffer,
    shape: readonly number[],
    opts: { dtype?: DType; rowStride?: number; offset?: number; owns?: boolean } = {},
  ) {
    // A brand check, not instanceof: a Proxy or a look-alike object passes instanceof or duck typing and then fails
    // inside (private fields) with a bare TypeError.
    if (!DeviceBuffer.isBuffer(buffer)) throw new ArgumentError("buffer", "a DeviceBuffer (from device.alloc())", buffer);
    if (typeof opts !== "object" || opts === null) throw new ArgumentError("options", "an options object { dtype?, rowStride?, offset?, owns? }", opts);
    this.shape = checkShape(shape);
    const dtype = opts.dtype ?? "f32";
    if (!isDType(dtype)) throw new ArgumentError("dtype", `"f32", "f16" or "bf16"`, dtype);
    const d = this.shape[this.shape.length - 1];
    const rowStride = opts.rowStride ?? d;
    if (!Number.isSafeInteger(rowStride) || rowStride < d) {
      throw new ArgumentError("rowStride", `an integer ≥ the last dimension (${d}): the last dimension must be contiguous`, rowStride);
    }
    const offset = opts.offset ?? 0;
    if (!Number.isSafeInteger(offset) || offset < 0) throw new ArgumentError("offset", "an integer ≥ 0", offset);
    this.device = buffer.device;
    this.dtype = dtype;
    this.rowStride = rowStride;
    this.offset = offset;
    this.buffer = buffer;
    const owns = opts.owns ?? false;
    if (typeof owns !== "boolean") throw new ArgumentError("owns", "a boolean", owns);
    this.#ownsBuffer = owns;
    const need = tensorBytes(this.shape, rowStride, offset, dtype);
    if (need > buffer.byteLength) {
      throw new ArgumentError("buffer", `at least ${need} bytes for shape [${shape}] ${dtype}`, `${buffer.byteLength} bytes`);
    }
    let rows = 1;
    for (let i = 0; i < this.shape.length - 1; i++) rows *= this.shape[i];
    this.#rows = rows;
    this.#d = d;
    this.#bytesPerElement = dtypeBytes(dtype);
  }

  /** True for a Tensor made by this class (not a Proxy of one, nor an object that only looks like one). */
  static isTensor(v: unknown): v is Tensor {
    return typeof v === "object" && v !== null && #rows in v;
  }

  /** Product of all dimensions but the last. */
  get rows(): number {
    return this.#rows;
  }

  /** The last dimension (the one norms normalize). */
  get d(): number {
    return this.#d;
  }

  get numel(): number {
    return this.#rows * this.#d;
  }

  get bytesPerElement(): number {
    return this.#bytesPerElement;
  }

  /** True when rows are back to back. */
  get contiguous(): boolean {
    return this.rowStride === this.d || this.rows <= 1;
  }

  /** Device address of the first element (for kernel arguments). */
  get ptr(): bigint {
    const base = this.buffer.ptr; // throws DisposedError once the buffer is closed, every time
    return this.#ptr ??= base + BigInt(this.offset * this.#bytesPerElement);
  }

  get closed(): boolean {
    return this.buffer.closed;
  }

  /** Uploads `values` (rows × d, row-major, no padding) into this tensor's rows, converting to its dtype. */
  write(valuesIn: ArrayLike<number>, opts?: { stream?: Stream }): void {
    const stream = readStreamOption(opts, this.device);
    const values = checkValues(valuesIn);
    if (values.length !== this.numel) {
      throw new ArgumentError("values", `${this.numel} elements for shape [${this.shape}]`, `${values.length}`);
    }
    const b = this.bytesPerElement;
    if (this.contiguous) {
      this.buffer.write(encode(values, this.dtype), { offset: this.offset * b, stream });
      return;
    }
    // Padded rows: lay the rows out with their stride, then one upload (gaps keep their current contents).
    const span = spanElements(this.rows, this.d, this.rowStride);
    const host = new Uint8Array(span * b);
    this.buffer.read(host, { offset: this.offset * b, stream });
    for (let r = 0; r < this.rows; r++) {
      encode(
        (values as Float32Array).subarray ? (values as Float32Array).subarray(r * this.d, (r + 1) * this.d) : Array.prototype.slice.call(values, r * this.d, (r + 1) * this.d),
        this.dtype,
        host.subarray(r * this.rowStride * b, (r * this.rowStride + this.d) * b),
      );
    }
    this.buffer.write(host, { offset: this.offset * b, stream });
  }

  /** Downloads the rows (after earlier work on the stream) as float32, row-major without padding. */
  readSync(opts?: { stream?: Stream }): Float32Array {
    const stream = readStreamOption(opts, this.device);
    const b = this.bytesPerElement, d = this.d, rows = this.rows;
    const host = new Uint8Array(spanElements(rows, d, this.rowStride) * b);
    this.buffer.read(host, { offset: this.offset * b, stream });
    if (this.contiguous) return decode(host, this.dtype) as Float32Array;
    const out = new Float32Array(rows * d);
    for (let r = 0; r < rows; r++) {
      decode(host.subarray(r * this.rowStride * b, (r * this.rowStride + d) * b), this.dtype, out.subarray(r * d, (r + 1) * d));
    }
    return out;
  }

  /** Like readSync, but waits for the GPU without blocking the event loop. */
  async toArray(opts?: { stream?: Stream }): Promise<Float32Array> {
    const stream = readStreamOption(opts, this.device) ?? this.device.stream;
    while (!stream.query()) await new Promise((r) => setTimeout(r, 0));
    return this.readSync({ stream });
  }

  /** Closes the buffer when this tensor owns it (tensors made by the device or by ops do). */
  close(): void {
    if (this.#ownsBuffer) this.buffer.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** Allocates an uninitialized tensor on `device`. */
export function emptyTensor(device: Device, shape: readonly number[], opts?: TensorOptions): Tensor {
  return allocTensor(device, checkShape(shape), readTensorOptions(opts));
}

function allocTensor(device: Device, s: readonly number[], o: { dtype: DType; rowStride: unknown }): Tensor {
  const d = s[s.length - 1];
  const rowStride = o.rowStride ?? d;
  if (!Number.isSafeInteger(rowStride) || (rowStride as number) < d) {
    throw new ArgumentError("rowStride", `an integer ≥ the last dimension (${d}): the last dimension must be contiguous`, rowStride);
  }
  const buf = device.alloc(tensorBytes(s, rowStride as number, 0, o.dtype));
  try {
    return new Tensor(buf, s, { dtype: o.dtype, rowStride: rowStride as number, owns: true });
  } catch (e) {
    buf.close();
    throw e;
  }
}

/** Allocates a tensor on `device` and uploads `values` (row-major, rows × d, no padding). */
export function tensorFrom(device: Device, valuesIn: ArrayLike<number>, shape: readonly number[], opts?: TensorOptions): Tensor {
  const values = checkValues(valuesIn);
  const s = checkShape(shape);
  const o = readTensorOptions(opts);
  const stream = o.stream === undefined ? undefined : readStreamOption({ stream: o.stream }, device);
  tensorBytes(s, s[s.length - 1], 0, o.dtype); // refuses a size past 2^53 − 1, exactly
  const numel = s.reduce((a, n) => a * n, 1);
  if (values.length !== numel) throw new ArgumentError("values", `${numel} numbers for shape [${s}]`, `${values.length} numbers`);
  const t = allocTensor(device, s, o);
  try {
    t.write(values, { stream });
  } catch (e) {
    t.close();
    throw e;
  }
  return t;
}
