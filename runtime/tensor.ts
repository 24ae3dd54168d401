/**
 * Tensor: a dtype, a shape and rows in a DeviceBuffer. The last dimension is contiguous; the leading
 * dimensions are flattened into rows that start `rowStride` elements apart (rowStride ≥ last dim), so a
 * row-strided view is described without a copy.
 */
import type { Device } from "./device.ts";
import { decode, type DType, dtypeBytes, encode, isDType } from "./dtype.ts";
import { ArgumentError } from "./errors.ts";
import type { DeviceBuffer } from "./memory.ts";
import type { Stream } from "./stream.ts";

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
    this.#ownsBuffer = opts.owns ?? false;
    let rows = 1;
    for (let i = 0; i < this.shape.length - 1; i++) rows *= this.shape[i];
    this.#rows = rows;
    this.#d = d;
    this.#bytesPerElement = dtypeBytes(dtype);
    const need = (offset + spanElements(this.rows, d, rowStride)) * dtypeBytes(dtype);
    if (need > buffer.byteLength) {
      throw new ArgumentError("buffer", `at least ${need} bytes for shape [${shape}] ${dtype}`, `${buffer.byteLength} bytes`);
    }
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
  write(values: ArrayLike<number>, opts: { stream?: Stream } = {}): void {
    if (values.length !== this.numel) {
      throw new ArgumentError("values", `${this.numel} elements for shape [${this.shape}]`, `${values.length}`);
    }
    const b = this.bytesPerElement;
    if (this.contiguous) {
      this.buffer.write(encode(values, this.dtype), { offset: this.offset * b, stream: opts.stream });
      return;
    }
    // Padded rows: lay the rows out with their stride, then one upload (gaps keep their current contents).
    const span = spanElements(this.rows, this.d, this.rowStride);
    const host = new Uint8Array(span * b);
    this.buffer.read(host, { offset: this.offset * b, stream: opts.stream });
    for (let r = 0; r < this.rows; r++) {
      encode(
        (values as Float32Array).subarray ? (values as Float32Array).subarray(r * this.d, (r + 1) * this.d) : Array.prototype.slice.call(values, r * this.d, (r + 1) * this.d),
        this.dtype,
        host.subarray(r * this.rowStride * b, (r * this.rowStride + this.d) * b),
      );
    }
    this.buffer.write(host, { offset: this.offset * b, stream: opts.stream });
  }

  /** Downloads the rows (after earlier work on the stream) as float32, row-major without padding. */
  readSync(opts: { stream?: Stream } = {}): Float32Array {
    const b = this.bytesPerElement, d = this.d, rows = this.rows;
    const host = new Uint8Array(spanElements(rows, d, this.rowStride) * b);
    this.buffer.read(host, { offset: this.offset * b, stream: opts.stream });
    if (this.contiguous) return decode(host, this.dtype) as Float32Array;
    const out = new Float32Array(rows * d);
    for (let r = 0; r < rows; r++) {
      decode(host.subarray(r * this.rowStride * b, (r * this.rowStride + d) * b), this.dtype, out.subarray(r * d, (r + 1) * d));
    }
    return out;
  }

  /** Like readSync, but waits for the GPU without blocking the event loop. */
  async toArray(opts: { stream?: Stream } = {}): Promise<Float32Array> {
    const stream = opts.stream ?? this.device.stream;
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
export function emptyTensor(device: Device, shape: readonly number[], opts: TensorOptions = {}): Tensor {
  const s = checkShape(shape);
  const dtype = opts.dtype ?? "f32";
  if (!isDType(dtype)) throw new ArgumentError("dtype", `"f32", "f16" or "bf16"`, dtype);
  const d = s[s.length - 1];
  const rowStride = opts.rowStride ?? d;
  if (!Number.isSafeInteger(rowStride) || rowStride < d) {
    throw new ArgumentError("rowStride", `an integer ≥ the last dimension (${d}): the last dimension must be contiguous`, rowStride);
  }
  const rows = s.slice(0, -1).reduce((a, n) => a * n, 1);
  const bytes = spanElements(rows, d, rowStride) * dtypeBytes(dtype);
  const buf = device.alloc(bytes);
  try {
    return new Tensor(buf, s, { dtype, rowStride, owns: true });
  } catch (e) {
    buf.close();
    throw e;
  }
}

/** Allocates a tensor on `device` and uploads `values` (row-major, rows × d, no padding). */
export function tensorFrom(device: Device, values: ArrayLike<number>, shape: readonly number[], opts: TensorOptions = {}): Tensor {
  const s = checkShape(shape);
  const numel = s.reduce((a, n) => a * n, 1);
  if (!values || typeof values.length !== "number" || values.length !== numel) {
    throw new ArgumentError("values", `${numel} numbers for shape [${s}]`, values?.length ?? values);
  }
  const t = emptyTensor(device, s, opts);
  try {
    t.write(values, { stream: opts.stream });
  } catch (e) {
    t.close();
    throw e;
  }
  return t;
}
