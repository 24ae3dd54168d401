/**
 * Tensor: a dtype, a shape and rows in a DeviceBuffer. The last dimension is contiguous; the leading
 * dimensions are flattened into rows that start `rowStride` elements apart (rowStride ≥ last dim), or, for a view
 * with a stride per leading dimension (view()), into at most two levels of rows (RowLevels), so a row-strided view
 * or the heads of a fused QKV buffer are described without a copy.
 */
import type { Device } from "./device.ts";
import { decode, type DType, dtypeBytes, encode, isTensorDType } from "./dtype.ts";
import { ArgumentError, DisposedError, UnsupportedError } from "./errors.ts";
import { DeviceBuffer } from "./memory.ts";
import { Stream } from "./stream.ts";
import { checkOptionKeys, optionKeys, refuseUnknownKeys, STREAM_KEYS } from "./options.ts";

/** Options of device.tensor() and device.empty(). */
export interface TensorOptions {
  /** Element type on the device (default "f32"). Values are rounded to it (nearest-even). */
  dtype?: DType;
  /** Elements between consecutive row starts (default: the last dimension). */
  rowStride?: number;
  /** Stream for the upload (default: the device's). */
  stream?: Stream;
  /**
   * `true`: the values are the element bits themselves, uploaded without conversion (a Uint16Array for f16/bf16;
   * a Uint32Array or Float32Array for f32; a Uint8Array for fp8e4m3/fp8e5m2; an Int8Array or Uint8Array for int8).
   * `false`: they are numbers, rounded to the dtype. A Uint16Array for a 16-bit dtype, or a Uint8Array for a
   * 1-byte dtype, is ambiguous and must say which (an ArgumentError otherwise).
   */
  bits?: boolean;
}

/**
 * The typed array holding raw element bits of a dtype (Tensor.toBits): Float32Array for f32, Uint16Array for
 * f16/bf16, Uint8Array for fp8e4m3/fp8e5m2, Int8Array for int8 (its elements are the stored integers).
 */
export type BitsArray = Uint16Array | Float32Array | Uint8Array | Int8Array;

const DTYPE_NAMES = `"f32", "f16", "bf16", "fp8e4m3", "fp8e5m2" or "int8"`;

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

const TENSOR_KEYS = optionKeys(...(["dtype", "rowStride", "stream", "bits"] satisfies (keyof TensorOptions)[]));
const VIEW_KEYS = optionKeys("dtype", "rowStride", "strides", "offset", "byteOffset", "owns");
const SUBVIEW_KEYS = optionKeys("strides", "offset");
const WRITE_KEYS = optionKeys("stream", "bits");

/** The options of a call that takes none but an optional stream, read once: `{ stream? }` or nothing. */
export function readStreamOption(opts: unknown, device: Device): Stream | undefined {
  if (checkOptionKeys(opts, STREAM_KEYS) === undefined) return undefined;
  const stream = (opts as { stream?: unknown }).stream;
  if (stream === undefined) return undefined;
  if (!Stream.isStream(stream) || stream.device !== device) {
    throw new ArgumentError("stream", `a Stream of ${device.id}`, stream);
  }
  return stream;
}

/** TensorOptions read once, each option checked. */
function readTensorOptions(
  opts: unknown,
): { dtype: DType; rowStride: unknown; stream: unknown; bits: boolean | undefined } {
  if (opts === undefined) return { dtype: "f32", rowStride: undefined, stream: undefined, bits: undefined };
  checkOptionKeys(opts, TENSOR_KEYS);
  const o = opts as TensorOptions;
  const dtype = o.dtype ?? "f32", rowStride = o.rowStride, stream = o.stream, bits = o.bits;
  if (!isTensorDType(dtype)) throw new ArgumentError("dtype", DTYPE_NAMES, dtype);
  if (bits !== undefined && typeof bits !== "boolean") throw new ArgumentError("bits", "a boolean", bits);
  return { dtype, rowStride, stream, bits };
}

/** Which typed arrays hold raw element bits of each dtype, for `bits: true`. */
const BITS_TYPES: Readonly<Record<DType, { holds: (v: unknown) => boolean; names: string }>> = {
  f32: { holds: (v) => v instanceof Uint32Array || v instanceof Float32Array, names: "a Uint32Array or Float32Array" },
  f16: { holds: (v) => v instanceof Uint16Array, names: "a Uint16Array" },
  bf16: { holds: (v) => v instanceof Uint16Array, names: "a Uint16Array" },
  fp8e4m3: { holds: (v) => v instanceof Uint8Array, names: "a Uint8Array" },
  fp8e5m2: { holds: (v) => v instanceof Uint8Array, names: "a Uint8Array" },
  int8: { holds: (v) => v instanceof Int8Array || v instanceof Uint8Array, names: "an Int8Array or Uint8Array" },
};

/** Raw element bits of `dtype` checked, as bytes (a view, no copy): the typed arrays of BITS_TYPES. */
function checkBits(values: unknown, dtype: DType): Uint8Array {
  const { holds, names } = BITS_TYPES[dtype];
  if (!holds(values)) throw new ArgumentError("values", `${dtype} bits: ${names} (bits: true)`, values);
  const v = values as Uint16Array | Uint32Array | Float32Array | Uint8Array | Int8Array;
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

/**
 * A Uint16Array given as values for a 16-bit dtype, or a Uint8Array for a 1-byte one, without `bits` saying
 * whether it holds numbers or bits. (An Int8Array for int8 means the same either way.)
 */
function refuseAmbiguous(values: unknown, dtype: DType, bits: boolean | undefined): void {
  if (bits !== undefined) return;
  const w = dtypeBytes(dtype);
  const kind = w === 2 && values instanceof Uint16Array
    ? "Uint16Array"
    : w === 1 && values instanceof Uint8Array
    ? "Uint8Array"
    : null;
  if (kind === null) return;
  throw new ArgumentError(
    "bits",
    `true (the ${kind} holds ${dtype} bits) or false (it holds integer values to round to ${dtype})`,
    `not given, for a ${kind} as values of a ${w * 8}-bit dtype`,
  );
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
  if (
    ArrayBuffer.isView(values) && !(values instanceof DataView) && !(values instanceof BigInt64Array) &&
    !(values instanceof BigUint64Array)
  ) {
    return values as unknown as ArrayLike<number>;
  }
  throw new ArgumentError(argument, "numbers: an Array of numbers or a typed array such as Float32Array", values);
}

const EXACT = 2 ** 52;

/**
 * The bytes a tensor of `shape` (rows of the last dimension `rowStride` elements apart, from element `offset`)
 * spans, exactly: refused (naming `argument`, with the exact count) past Number.MAX_SAFE_INTEGER elements or bytes.
 */
export function tensorBytes(
  shape: readonly number[],
  rowStride: number,
  offset: number,
  dtype: DType,
  argument = "shape",
): number {
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
  if (numel > max || r > max) {
    throw new ArgumentError(argument, "at most 2^53 − 1 elements", `shape [${shape}]: ${numel} elements`);
  }
  if (exact > max) {
    throw new ArgumentError(
      argument,
      "a tensor of at most 2^53 − 1 bytes",
      `shape [${shape}] ${dtype}: ${exact} bytes`,
    );
  }
  return Number(exact);
}

/**
 * Where a tensor's rows are: row r = i0 · n1 + i1 (i0 < n0, i1 < n1) starts i0 · s0 + i1 · s1 elements after the
 * first. Rows one stride apart are n0 = 1, s0 = 0, n1 = rows, s1 = rowStride.
 */
export interface RowLevels {
  /** Outer rows. */
  readonly n0: number;
  /** Elements between outer rows. */
  readonly s0: number;
  /** Inner rows per outer row (e.g. heads). */
  readonly n1: number;
  /** Elements between inner rows. */
  readonly s1: number;
}

/** Elements from the first row's start to row `r`'s start (0 ≤ r < n0 · n1). */
export function rowOffset(l: RowLevels, r: number): number {
  return l.n0 <= 1 ? r * l.s1 : Math.floor(r / l.n1) * l.s0 + (r % l.n1) * l.s1;
}

/** Elements from the first row's start to the end of the last row (0 for no elements). */
export function levelSpan(l: RowLevels, d: number): number {
  return l.n0 === 0 || l.n1 === 0 || d === 0 ? 0 : (l.n0 - 1) * l.s0 + (l.n1 - 1) * l.s1 + d;
}

/**
 * The row levels of `shape` with element `strides` (one per dimension, the last 1): leading dimensions of size 1
 * dropped, neighbours merged where the outer stride is the inner extent; refused when more than two levels remain,
 * or when rows may overlap (the levels neither nest nor are transposed: see below).
 */
export function levelsOf(shape: readonly number[], strides: unknown): RowLevels {
  const n = shape.length, d = shape[n - 1];
  if (!Array.isArray(strides) || strides.length !== n) {
    throw new ArgumentError("strides", `an array of ${n} element strides, one per dimension of [${shape}]`, strides);
  }
  for (const [i, v] of strides.entries()) {
    if (!Number.isSafeInteger(v) || v < 0) throw new ArgumentError(`strides[${i}]`, "an integer ≥ 0", v);
  }
  if (strides[n - 1] !== 1 && d > 1) {
    throw new ArgumentError(`strides[${n - 1}]`, "1: the last dimension must be contiguous", strides[n - 1]);
  }
  const levels: [number, number][] = []; // [size, stride], outermost first
  for (let i = n - 2; i >= 0; i--) {
    if (shape[i] === 1) continue;
    const inner = levels[0];
    if (inner !== undefined && strides[i] === inner[0] * inner[1]) inner[0] *= shape[i];
    else levels.unshift([shape[i], strides[i]]);
  }
  const rows = shape.slice(0, -1).reduce((a, b) => a * b, 1);
  if (rows === 0) return { n0: 1, s0: 0, n1: 0, s1: d };
  if (levels.length > 2) {
    throw new UnsupportedError(
      `a view of shape [${shape}] with strides [${strides}] has ${levels.length} levels of rows; at most two are ` +
        `supported (e.g. [tokens, heads, headDim]): merge dimensions or copy`,
    );
  }
  const [outer, inner] = levels.length === 2 ? levels : [[1, 0] as [number, number], levels[0] ?? [1, d]];
  if (inner[0] > 1 && inner[1] < d) {
    throw new ArgumentError("strides", `rows that do not overlap: a row stride ≥ the last dimension (${d})`, strides);
  }
  const innerExtent = (inner[0] - 1) * inner[1] + d;
  // Disjoint rows either nest (each outer step past all the inner rows) or are transposed (each inner step past all the
  // outer rows: [tokens, heads, headDim] over a head-major [heads, tokens, headDim] buffer); the kernels take any
  // (s0, s1). Anything else interleaves, and rows may overlap.
  const transposed = outer[1] >= d && inner[1] >= (outer[0] - 1) * outer[1] + d;
  if (outer[0] > 1 && outer[1] < innerExtent && !transposed) {
    throw new ArgumentError(
      "strides",
      `levels of rows that nest (an outer stride ≥ ${innerExtent}, the inner rows' extent) or are transposed ` +
        `(an inner stride ≥ ${(outer[0] - 1) * outer[1] + d}, the outer rows' extent, and an outer stride ≥ ${d})`,
      strides,
    );
  }
  return { n0: outer[0], s0: outer[1], n1: inner[0], s1: inner[1] };
}

/** Elements the storage of `rows` rows of `d` elements, `rowStride` apart, spans. */
export function spanElements(rows: number, d: number, rowStride: number): number {
  return rows === 0 || d === 0 ? 0 : (rows - 1) * rowStride + d;
}

/**
 * A typed view of device memory: a dtype, a shape and rows in a DeviceBuffer. The last dimension (`d`) is
 * contiguous; the leading dimensions are flattened into `rows` that start `rowStride` elements apart, so a
 * row-strided view needs no copy. A tensor's fields never change; its values do (write(), an op's `out`).
 *
 * Made by `device.tensor(values, shape)`, `device.empty(shape)` or an op; those own their memory, which close()
 * (or `using`) frees. `new Tensor(buffer, shape, opts)` views memory it does not own unless `owns: true`, e.g. a
 * buffer from device.wrapPointer() or device.wrapHost(). Methods throw DisposedError once the tensor or its device
 * is closed, and ArgumentError for values or options that do not fit.
 *
 * @example
 * ```ts
 * import { Device } from "@normkit/normkit";
 * using dev = Device.open();
 * using x = dev.tensor([1, 2, 3, 4, 5, 6], [2, 3], { dtype: "bf16" });
 * x.rows;                        // 2
 * x.d;                           // 3
 * const values = x.readSync();   // Float32Array [1, 2, 3, 4, 5, 6]
 * const bits = x.readBitsSync(); // Uint16Array [0x3f80, 0x4000, …]: the bf16 bits
 * console.log(`${x}`);           // Tensor(bf16 [2, 3] on cpu:0)
 * ```
 */
export class Tensor implements Disposable {
  /** The device the memory is on. */
  readonly device: Device;
  /** The element type in memory; values are read back as float32. */
  readonly dtype: DType;
  /** The dimensions, outermost first (frozen). */
  readonly shape: readonly number[];
  /** Element offset of the first row in the buffer. */
  readonly offset: number;
  /** The memory the tensor views (shared by views of one allocation). */
  readonly buffer: DeviceBuffer;
  readonly #ownsBuffer: boolean;
  // Derived once: a tensor is an immutable view (frozen shape, readonly fields), and the hot path of the ops
  // reads these on every call.
  readonly #rows: number;
  readonly #d: number;
  readonly #bytesPerElement: number;
  readonly #levels: RowLevels;
  readonly #uniformRows: boolean;
  /** buffer.ptr + the offset in bytes, made on first use (a bigint: no BigInt maths per launch). */
  #ptr: bigint | undefined;

  /**
   * Wraps `buffer` (owned: closed with the tensor when `opts.owns`). Checks that the rows fit.
   *
   * @param buffer The memory: from device.alloc(), wrapPointer() or wrapHost().
   * @param shape The dimensions (at least one; integers ≥ 0).
   * @param opts.dtype Element type (default "f32").
   * @param opts.rowStride Elements between row starts (default: the last dimension; not less).
   * @param opts.strides Instead of rowStride: the element stride of every dimension (the last 1), for rows on up to
   *   two levels, e.g. the heads of a fused QKV buffer (see view()).
   * @param opts.offset Elements from the buffer's start to the first element (default 0).
   * @param opts.byteOffset The same in bytes (a multiple of the element size); not with `offset`.
   * @param opts.owns Close the buffer when the tensor is closed (default false).
   * @throws {ArgumentError} for a bad shape or option, or rows that do not fit in the buffer.
   */
  constructor(
    buffer: DeviceBuffer,
    shape: readonly number[],
    opts: {
      dtype?: DType;
      rowStride?: number;
      strides?: readonly number[];
      offset?: number;
      byteOffset?: number;
      owns?: boolean;
    } = {},
  ) {
    // A brand check, not instanceof: a Proxy or a look-alike object passes instanceof or duck typing and then fails
    // inside (private fields) with a bare TypeError.
    if (!DeviceBuffer.isBuffer(buffer)) {
      throw new ArgumentError("buffer", "a DeviceBuffer (device.alloc(), wrapPointer() or wrapHost())", buffer);
    }
    if (typeof opts !== "object" || opts === null) {
      throw new ArgumentError(
        "options",
        "an options object { dtype?, rowStride?, strides?, offset?, byteOffset?, owns? }",
        opts,
      );
    }
    refuseUnknownKeys(opts, VIEW_KEYS);
    this.shape = checkShape(shape);
    const dtype = opts.dtype ?? "f32";
    if (!isTensorDType(dtype)) throw new ArgumentError("dtype", DTYPE_NAMES, dtype);
    const d = this.shape[this.shape.length - 1];
    const strides = opts.strides, givenRowStride = opts.rowStride;
    if (strides !== undefined && givenRowStride !== undefined) {
      throw new ArgumentError("strides", "not given together with rowStride", strides);
    }
    const rowStride = givenRowStride ?? d;
    if (!Number.isSafeInteger(rowStride) || rowStride < d) {
      throw new ArgumentError(
        "rowStride",
        `an integer ≥ the last dimension (${d}): the last dimension must be contiguous`,
        rowStride,
      );
    }
    let rows = 1;
    for (let i = 0; i < this.shape.length - 1; i++) rows *= this.shape[i];
    const levels = strides === undefined ? { n0: 1, s0: 0, n1: rows, s1: rowStride } : levelsOf(this.shape, strides);
    const byteOffset = opts.byteOffset;
    if (byteOffset !== undefined && opts.offset !== undefined) {
      throw new ArgumentError("byteOffset", "not given together with offset", byteOffset);
    }
    if (
      byteOffset !== undefined &&
      (!Number.isSafeInteger(byteOffset) || byteOffset < 0 || byteOffset % dtypeBytes(dtype) !== 0)
    ) {
      throw new ArgumentError(
        "byteOffset",
        `an integer ≥ 0, a multiple of ${dtypeBytes(dtype)} (the ${dtype} element size)`,
        byteOffset,
      );
    }
    const offset = byteOffset !== undefined ? byteOffset / dtypeBytes(dtype) : opts.offset ?? 0;
    if (!Number.isSafeInteger(offset) || offset < 0) throw new ArgumentError("offset", "an integer ≥ 0", offset);
    this.device = buffer.device;
    this.dtype = dtype;
    this.#levels = levels;
    this.#uniformRows = levels.n0 <= 1 || levels.n1 <= 1 || levels.s0 === levels.n1 * levels.s1;
    this.offset = offset;
    this.buffer = buffer;
    const owns = opts.owns ?? false;
    if (typeof owns !== "boolean") throw new ArgumentError("owns", "a boolean", owns);
    this.#ownsBuffer = owns;
    const need = strides === undefined
      ? tensorBytes(this.shape, rowStride, offset, dtype)
      : (offset + levelSpan(levels, d)) * dtypeBytes(dtype);
    if (need > buffer.byteLength) {
      throw new ArgumentError(
        "buffer",
        `at least ${need} bytes for shape [${shape}] ${dtype}`,
        `${buffer.byteLength} bytes`,
      );
    }
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

  /** The number of elements (rows × d). */
  get numel(): number {
    return this.#rows * this.#d;
  }

  /** Bytes per element of the dtype (4, 2 or 1). */
  get bytesPerElement(): number {
    return this.#bytesPerElement;
  }

  /** True when rows are back to back. */
  get contiguous(): boolean {
    return this.rows <= 1 || (this.uniformRows && this.rowStride === this.d);
  }

  /** Where the rows are (two levels; see RowLevels). */
  get levels(): RowLevels {
    return this.#levels;
  }

  /** True when the rows are one stride (`rowStride`) apart: every tensor but some view()s of two levels. */
  get uniformRows(): boolean {
    return this.#uniformRows;
  }

  /**
   * Elements between consecutive row starts.
   * @throws {UnsupportedError} for a view whose rows are on two levels (uniformRows false): it has no one stride.
   */
  get rowStride(): number {
    const l = this.#levels;
    if (l.n0 <= 1) return l.s1;
    if (l.n1 <= 1) return l.s0;
    if (l.s0 === l.n1 * l.s1) return l.s1;
    throw new UnsupportedError(
      `${this} has rows on two levels (strides ${l.s0} and ${l.s1}), not one row stride: rmsNorm and layerNorm ` +
        `take it; copy it for other ops`,
    );
  }

  /** The element stride of each dimension (the last is 1). */
  get strides(): readonly number[] {
    const shape = this.shape, n = shape.length, out = new Array<number>(n).fill(0);
    out[n - 1] = 1;
    if (this.uniformRows) {
      let s = this.#rows <= 1 ? this.#d : this.rowStride;
      for (let i = n - 2; i >= 0; i--) (out[i] = s), (s *= shape[i]);
    } else {
      // Two levels: the dimensions whose product is n1 (innermost first) step by s1, the rest by s0.
      const l = this.#levels;
      let i = n - 2, s = l.s1, left = l.n1;
      for (; i >= 0 && left > 1; i--) (out[i] = s), (s *= shape[i]), (left /= shape[i]);
      for (s = l.s0; i >= 0; i--) (out[i] = s), (s *= shape[i]);
    }
    return Object.freeze(out);
  }

  /**
   * A view of this tensor's memory (not owned: closing it frees nothing): `shape` with element `strides` (one per
   * dimension, the last 1; default: contiguous), starting `offset` elements after this tensor's first element and
   * ending where its last row ends, or before. The rows may lie on two levels, nested (the query heads of a fused QKV
   * buffer) or transposed (`[tokens, heads, headDim]` over a head-major `[heads, tokens, headDim]` buffer).
   *
   * @throws {ArgumentError} for a bad shape, strides or offset, or a view past the end of this tensor's last row.
   * @throws {UnsupportedError} for rows on more than two levels.
   *
   * @example
   * ```ts
   * import { Device } from "@normkit/normkit";
   * using dev = Device.open();
   * const tokens = 4, hq = 4, hkv = 2, hd = 8, width = (hq + 2 * hkv) * hd;
   * using qkv = dev.tensor(new Float32Array(tokens * width).fill(1), [tokens, width], { dtype: "bf16" });
   * const q = qkv.view([tokens, hq, hd], { strides: [width, hd, 1] });                // the query heads
   * const k = qkv.view([tokens, hkv, hd], { strides: [width, hd, 1], offset: hq * hd }); // the key heads
   * using cache = dev.empty([hkv, tokens, hd], { dtype: "bf16" });                   // head-major
   * const byToken = cache.view([tokens, hkv, hd], { strides: [hd, tokens * hd, 1] });  // rows in token order
   * ```
   */
  view(shape: readonly number[], opts?: { strides?: readonly number[]; offset?: number }): Tensor {
    checkOptionKeys(opts, SUBVIEW_KEYS);
    const s = checkShape(shape);
    const offset = opts?.offset ?? 0, strides = opts?.strides;
    const span = this.#span;
    if (!Number.isSafeInteger(offset) || offset < 0 || offset > span) {
      throw new ArgumentError("offset", `an integer from 0 to ${span} (this tensor's elements)`, offset);
    }
    this.#checkOpen();
    const v = new Tensor(this.buffer, s, {
      dtype: this.dtype,
      offset: this.offset + offset,
      ...(strides === undefined ? {} : { strides }),
    });
    // A view of this tensor's memory: its rows end where this tensor's last row ends, or before.
    if (offset + v.#span > span) {
      throw new ArgumentError(
        "shape",
        `a view within this tensor's ${span} elements from its first (offset ${offset} + span ${v.#span})`,
        `shape [${s}]${strides === undefined ? "" : ` with strides [${strides}]`}`,
      );
    }
    return v;
  }

  /** Element offset (from this.offset) of row `r`'s first element. */
  #rowStart(r: number): number {
    return rowOffset(this.#levels, r);
  }

  /** Elements from the first row's start to the end of the last row. */
  get #span(): number {
    return levelSpan(this.#levels, this.#d);
  }

  /** DisposedError naming this tensor (not its buffer), with the buffer's reason, once its memory is closed. */
  #checkOpen(): void {
    const why = this.buffer.closedBecause();
    if (why !== undefined) throw new DisposedError(`${this.#describe()}${why}`);
  }

  /** Device address of the first element (for kernel arguments). */
  get ptr(): bigint {
    const base = this.buffer.ptr; // throws DisposedError once the buffer is closed, every time
    return this.#ptr ??= base + BigInt(this.offset * this.#bytesPerElement);
  }

  /** True once the memory is closed (this tensor's close(), the buffer's owner, or the device). */
  get closed(): boolean {
    return this.buffer.closed;
  }

  /**
   * Uploads `values` (rows × d, row-major, no padding) into this tensor's rows, converting to its dtype; with
   * `bits: true`, raw element bits uploaded as they are (see TensorOptions.bits).
   */
  write(valuesIn: ArrayLike<number>, opts?: { stream?: Stream; bits?: boolean }): void {
    checkOptionKeys(opts, WRITE_KEYS);
    this.#checkOpen();
    const bits = opts?.bits;
    if (bits !== undefined && typeof bits !== "boolean") throw new ArgumentError("bits", "a boolean", bits);
    const stream = readStreamOption(opts === undefined ? undefined : { stream: opts.stream }, this.device);
    refuseAmbiguous(valuesIn, this.dtype, bits);
    if (bits) return this.#writeBytes(checkBits(valuesIn, this.dtype), valuesIn.length, stream);
    const values = checkValues(valuesIn);
    if (values.length !== this.numel) {
      throw new ArgumentError("values", `${this.numel} elements for shape [${this.shape}]`, `${values.length}`);
    }
    const b = this.bytesPerElement;
    if (this.contiguous) {
      this.buffer.write(encode(values, this.dtype), { offset: this.offset * b, stream });
      return;
    }
    // Padded rows: lay the rows out with their strides, then one upload (gaps keep their current contents).
    const host = new Uint8Array(this.#span * b);
    this.buffer.read(host, { offset: this.offset * b, stream });
    for (let r = 0; r < this.rows; r++) {
      const at = this.#rowStart(r);
      encode(
        (values as Float32Array).subarray
          ? (values as Float32Array).subarray(r * this.d, (r + 1) * this.d)
          : Array.prototype.slice.call(values, r * this.d, (r + 1) * this.d),
        this.dtype,
        host.subarray(at * b, (at + this.d) * b),
      );
    }
    this.buffer.write(host, { offset: this.offset * b, stream });
  }

  /** Uploads packed element bytes (rows × d elements, `count` of them) into the rows, padding left as it is. */
  #writeBytes(src: Uint8Array, count: number, stream: Stream | undefined): void {
    if (count !== this.numel) {
      throw new ArgumentError("values", `${this.numel} elements for shape [${this.shape}]`, `${count}`);
    }
    const b = this.bytesPerElement, row = this.d * b;
    if (this.contiguous) return this.buffer.write(src, { offset: this.offset * b, stream });
    const host = new Uint8Array(this.#span * b);
    this.buffer.read(host, { offset: this.offset * b, stream });
    for (let r = 0; r < this.rows; r++) host.set(src.subarray(r * row, (r + 1) * row), this.#rowStart(r) * b);
    this.buffer.write(host, { offset: this.offset * b, stream });
  }

  /**
   * Downloads the raw element bits (after earlier work on the stream), row-major without padding: a Uint16Array
   * for f16/bf16, a Float32Array for f32 (its bytes are the device's exactly; `new Uint32Array(a.buffer)` shows
   * them as integers), a Uint8Array for fp8e4m3/fp8e5m2, an Int8Array for int8. Nothing is converted, so NaN
   * payloads, −0 and subnormals come back as they are.
   */
  readBitsSync(opts?: { stream?: Stream }): BitsArray {
    const stream = readStreamOption(opts, this.device);
    this.#checkOpen();
    const b = this.bytesPerElement, d = this.d, rows = this.rows, row = d * b;
    const host = new Uint8Array(this.#span * b);
    this.buffer.read(host, { offset: this.offset * b, stream });
    let packed = host;
    if (!this.contiguous) {
      packed = new Uint8Array(rows * row);
      for (let r = 0; r < rows; r++) {
        packed.set(host.subarray(this.#rowStart(r) * b, this.#rowStart(r) * b + row), r * row);
      }
    }
    if (b === 1) return this.dtype === "int8" ? new Int8Array(packed.buffer, 0, rows * d) : packed;
    return this.dtype === "f32"
      ? new Float32Array(packed.buffer, 0, rows * d)
      : new Uint16Array(packed.buffer, 0, rows * d);
  }

  /** Like readBitsSync, but waits for the GPU without blocking the event loop. */
  async toBits(opts?: { stream?: Stream }): Promise<BitsArray> {
    const stream = readStreamOption(opts, this.device) ?? this.device.stream;
    this.#checkOpen();
    while (!stream.query()) await new Promise((r) => setTimeout(r, 0));
    return this.readBitsSync({ stream });
  }

  /**
   * Downloads the rows (after earlier work on `opts.stream`, default: the device's) as float32, row-major
   * without padding. Blocks until the work has finished; toArray() waits without blocking the event loop.
   * Throws UnsupportedError while the stream captures a graph.
   */
  readSync(opts?: { stream?: Stream }): Float32Array {
    const stream = readStreamOption(opts, this.device);
    this.#checkOpen();
    const b = this.bytesPerElement, d = this.d, rows = this.rows;
    const host = new Uint8Array(this.#span * b);
    this.buffer.read(host, { offset: this.offset * b, stream });
    if (this.contiguous) return decode(host, this.dtype) as Float32Array;
    const out = new Float32Array(rows * d);
    for (let r = 0; r < rows; r++) {
      const at = this.#rowStart(r);
      decode(
        host.subarray(at * b, (at + d) * b),
        this.dtype,
        out.subarray(r * d, (r + 1) * d),
      );
    }
    return out;
  }

  /**
   * Like readSync, but waits for the GPU without blocking the event loop.
   *
   * @example
   * ```ts
   * import { Device, layerNorm, loadKernels } from "@normkit/normkit";
   * using dev = Device.open();
   * await loadKernels(dev);
   * using x = dev.tensor(new Float32Array(4 * 256).map(() => Math.random()), [4, 256]);
   * using y = layerNorm(x);
   * const values = await y.toArray();
   * ```
   */
  async toArray(opts?: { stream?: Stream }): Promise<Float32Array> {
    const stream = readStreamOption(opts, this.device) ?? this.device.stream;
    this.#checkOpen();
    while (!stream.query()) await new Promise((r) => setTimeout(r, 0));
    return this.readSync({ stream });
  }

  /** A short description, e.g. "Tensor(bf16 [4, 8] on cuda:0)" (what console.log and String() print). */
  toString(): string {
    return this.#describe(this.closed ? ", closed" : "");
  }

  /** "Tensor(dtype [shape], strides on device<tail>)". */
  #describe(tail = ""): string {
    const where = this.device.id;
    const stride = this.contiguous
      ? ""
      : this.uniformRows
      ? `, rowStride ${this.rowStride}`
      : `, strides [${this.strides.join(", ")}]`;
    return `Tensor(${this.dtype} [${this.shape.join(", ")}]${stride} on ${where}${tail})`;
  }

  /** Deno's console.log / Deno.inspect: the short description, not the whole Device. */
  [Symbol.for("Deno.customInspect")](): string {
    return this.toString();
  }

  /** Node's and Bun's console.log / util.inspect: the short description, not the whole Device. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /**
   * Closes the buffer when this tensor owns it (tensors made by the device or by ops do); a view of memory it
   * does not own is left as it is. Safe to call more than once.
   */
  close(): void {
    if (this.#ownsBuffer) this.buffer.close();
  }

  /** close(), for `using` declarations. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** Allocates an uninitialized tensor on `device`. */
export function emptyTensor(device: Device, shape: readonly number[], opts?: TensorOptions): Tensor {
  return allocTensor(device, checkShape(shape), readTensorOptions(opts));
}

function allocTensor(
  device: Device,
  s: readonly number[],
  o: { dtype: DType; rowStride: unknown },
  stream?: Stream,
): Tensor {
  const d = s[s.length - 1];
  const rowStride = o.rowStride ?? d;
  if (!Number.isSafeInteger(rowStride) || (rowStride as number) < d) {
    throw new ArgumentError(
      "rowStride",
      `an integer ≥ the last dimension (${d}): the last dimension must be contiguous`,
      rowStride,
    );
  }
  const buf = device.alloc(tensorBytes(s, rowStride as number, 0, o.dtype));
  try {
    // The gaps between padded rows are zeroed once: every byte a read of the rows' span copies is then defined.
    if (rowStride !== d && buf.byteLength > 0) buf.fill(0, { stream });
    return new Tensor(buf, s, { dtype: o.dtype, rowStride: rowStride as number, owns: true });
  } catch (e) {
    buf.close();
    throw e;
  }
}

/** Allocates a tensor on `device` and uploads `values` (row-major, rows × d, no padding). */
export function tensorFrom(
  device: Device,
  valuesIn: ArrayLike<number>,
  shape: readonly number[],
  opts?: TensorOptions,
): Tensor {
  const o = readTensorOptions(opts);
  refuseAmbiguous(valuesIn, o.dtype, o.bits);
  const values = o.bits ? valuesIn : checkValues(valuesIn);
  if (o.bits) checkBits(valuesIn, o.dtype);
  const s = checkShape(shape);
  const stream = o.stream === undefined ? undefined : readStreamOption({ stream: o.stream }, device);
  tensorBytes(s, s[s.length - 1], 0, o.dtype); // refuses a size past 2^53 − 1, exactly
  const numel = s.reduce((a, n) => a * n, 1);
  if (values.length !== numel) {
    throw new ArgumentError("values", `${numel} numbers for shape [${s}]`, `${values.length} numbers`);
  }
  const t = allocTensor(device, s, o, stream);
  try {
    t.write(values, { stream, bits: o.bits ?? false });
  } catch (e) {
    t.close();
    throw e;
  }
  return t;
}
