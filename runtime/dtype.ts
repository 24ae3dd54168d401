/**
 * Element types, exact scalar conversions and bulk little-endian encode/decode.
 *
 * f16 and bf16 rounding is done from the full float64 value in one step:
 * going through Math.fround first would round twice and can land on a tie
 * that the original value was not on.
 *
 * The 1-byte dtypes hold quantized norm outputs. Their conversion from a number is the GPU's SATFINITE one:
 * round to nearest even (subnormals included), beyond the largest finite value or ±Infinity → ±max, NaN → NaN
 * (fp8) or 0 (int8).
 */

/** A float element type a norm computes in: 32-bit float, IEEE half ("f16") or bfloat16 ("bf16"). */
export type FloatDType = "f32" | "f16" | "bf16";

/**
 * A 1-byte element type of quantized outputs: OCP FP8 E4M3 (bias 7, max 448, no infinities), FP8 E5M2 (bias 15,
 * max 57344) or a two's complement int8.
 */
export type QuantDType = "fp8e4m3" | "fp8e5m2" | "int8";

/** An element type a tensor holds values in. */
export type DType = FloatDType | QuantDType;

/** The float dtypes (those a norm takes), in the order f32, f16, bf16. */
export const DTYPES: readonly FloatDType[] = Object.freeze(["f32", "f16", "bf16"]);

/** The 1-byte quantized dtypes, in the order fp8e4m3, fp8e5m2, int8. */
export const QUANT_DTYPES: readonly QuantDType[] = Object.freeze(["fp8e4m3", "fp8e5m2", "int8"]);

/** Bytes per element. */
export function dtypeBytes(dtype: DType): number {
  switch (dtype) {
    case "f32":
      return 4;
    case "f16":
    case "bf16":
      return 2;
    case "fp8e4m3":
    case "fp8e5m2":
    case "int8":
      return 1;
  }
  throw new TypeError(`unknown dtype: ${String(dtype)}`);
}

/** One of DTYPES: a float dtype, the kind a norm's input, parameters and float output take. */
export function isDType(v: unknown): v is FloatDType {
  return v === "f32" || v === "f16" || v === "bf16";
}

/** One of QUANT_DTYPES. */
export function isQuantDType(v: unknown): v is QuantDType {
  return v === "fp8e4m3" || v === "fp8e5m2" || v === "int8";
}

/** Any dtype a tensor can hold: a float or a quantized one. */
export function isTensorDType(v: unknown): v is DType {
  return isDType(v) || isQuantDType(v);
}

// Scratch views for reading float64 bit fields without allocating.
const F64 = new Float64Array(1);
const U32 = new Uint32Array(F64.buffer);
const LITTLE_ENDIAN: boolean = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const HI = LITTLE_ENDIAN ? 1 : 0;
const LO = LITTLE_ENDIAN ? 0 : 1;

/** Exact 2^k for |k| <= 1022, built from bits so no libm rounding is involved. */
function pow2(k: number): number {
  U32[HI] = (k + 1023) << 20;
  U32[LO] = 0;
  return F64[0];
}

/** Binary format description: p = stored mantissa bits, emin/emax = normal exponent range. */
interface Fmt {
  p: number;
  emin: number;
  emax: number;
  infBits: number;
  signBit: number;
}
const F16: Fmt = { p: 10, emin: -14, emax: 15, infBits: 0x7c00, signBit: 0x8000 };
const BF16: Fmt = { p: 7, emin: -126, emax: 127, infBits: 0x7f80, signBit: 0x8000 };

/** Round a float64 to the nearest value of `f`, ties to even, returning its bits. */
function roundBits(x: number, f: Fmt): number {
  F64[0] = x;
  const hi = U32[HI];
  const sign = hi >>> 31 ? f.signBit : 0;
  const bexp = (hi >>> 20) & 0x7ff;
  if (bexp === 0x7ff) {
    if (x !== x) {
      // Quiet NaN; keep the top payload bits so payloads survive where they fit.
      const payload = (hi & 0xfffff) >>> (20 - f.p);
      return sign | f.infBits | (1 << (f.p - 1)) | payload;
    }
    return sign | f.infBits;
  }
  const a = x < 0 ? -x : x;
  // f64 subnormals are far below half the smallest target subnormal; clamping
  // their exponent to emin below still rounds them to zero correctly.
  const e = bexp - 1023;
  if (e > f.emax) return sign | f.infBits;
  const eEff = e < f.emin ? f.emin : e;
  // q = a / quantum is exact (power-of-two scaling without over/underflow).
  const q = a * pow2(f.p - eEff);
  let n = Math.floor(q);
  const r = q - n; // exact: q and floor(q) share their high bits
  if (r > 0.5 || (r === 0.5 && (n & 1) === 1)) n += 1;
  // (eEff - emin) << p plus n covers subnormals, normals and a mantissa carry.
  const bits = (eEff - f.emin) * (1 << f.p) + n;
  return sign | (bits >= f.infBits ? f.infBits : bits);
}

/** Decode the bits of a format with `f`'s layout to a float64. */
function fromBits(h: number, f: Fmt): number {
  const sign = h & f.signBit ? -1 : 1;
  const mant = h & ((1 << f.p) - 1);
  const bexp = (h & 0x7fff) >>> f.p;
  const expMax = f.infBits >>> f.p;
  if (bexp === expMax) {
    if (mant === 0) return sign * Infinity;
    // Rebuild the NaN with its sign and payload (engines may still canonicalise).
    U32[HI] = (h & f.signBit ? 0x80000000 : 0) | 0x7ff00000 | (mant << (20 - f.p)) | 0x80000;
    U32[LO] = 0;
    return F64[0];
  }
  if (bexp === 0) return sign * mant * pow2(f.emin - f.p);
  return sign * ((1 << f.p) + mant) * pow2(bexp - 1 + f.emin - f.p);
}

// Fast paths: round to f32 with a typed-array store, then round the f32 bits.
// That double rounding is only wrong when the f32 value sits exactly on a
// midpoint of the narrower format, so midpoints (and NaN/Inf, subnormals,
// overflow) take the exact float64 path instead.
const S_F32 = new Float32Array(1);
const S_U32 = new Uint32Array(S_F32.buffer);

export function toF16Bits(x: number): number {
  S_F32[0] = x;
  const u = S_U32[0];
  const a = u & 0x7fffffff;
  // Normal f16 range [2^-14, 65520) and low 13 bits not exactly half.
  if (a >= 0x38800000 && a < 0x477ff000 && (a & 0x1fff) !== 0x1000) {
    return ((u >>> 16) & 0x8000) | ((a - 0x38000000 + 0xfff + ((a >>> 13) & 1)) >>> 13);
  }
  return roundBits(x, F16);
}

export function fromF16Bits(h: number): number {
  return fromBits(h & 0xffff, F16);
}

export function toBf16Bits(x: number): number {
  S_F32[0] = x;
  const u = S_U32[0];
  if ((u & 0x7f800000) !== 0x7f800000 && (u & 0xffff) !== 0x8000) {
    return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
  }
  return roundBits(x, BF16);
}

export function fromBf16Bits(h: number): number {
  return fromBits(h & 0xffff, BF16);
}

// ---- 1-byte dtypes ----------------------------------------------------------

/** An FP8 layout: p mantissa bits, emin the lowest normal exponent, the largest finite value and the NaN byte. */
interface Fp8 {
  p: number;
  emin: number;
  emax: number;
  max: number;
  maxBits: number;
  nanBits: number;
}
const E4M3: Fp8 = { p: 3, emin: -6, emax: 8, max: 448, maxBits: 0x7e, nanBits: 0x7f };
const E5M2: Fp8 = { p: 2, emin: -14, emax: 15, max: 57344, maxBits: 0x7b, nanBits: 0x7e };

/** The byte of x in `f`: RNE, SATFINITE (beyond max and ±Infinity → ±max), NaN → the NaN byte with x's sign. */
function fp8Bits(x: number, f: Fp8): number {
  F64[0] = x;
  const hi = U32[HI];
  const sign = hi >>> 31 ? 0x80 : 0;
  if (x !== x) return sign | f.nanBits;
  const a = x < 0 ? -x : x;
  if (a >= f.max) return sign | f.maxBits;
  const e = ((hi >>> 20) & 0x7ff) - 1023;
  const eEff = e < f.emin ? f.emin : e;
  const q = a * pow2(f.p - eEff); // exact: a power-of-two scaling
  let n = Math.floor(q);
  const r = q - n;
  if (r > 0.5 || (r === 0.5 && (n & 1) === 1)) n += 1;
  // Below max the carry of a rounding up stops at maxBits at most.
  return sign | ((eEff - f.emin) * (1 << f.p) + n);
}

/** The value of an FP8 byte (NaN keeps its sign where the engine does not canonicalise it). */
function fp8Value(b: number, f: Fp8, hasInf: boolean): number {
  const sign = b & 0x80 ? -1 : 1;
  const mant = b & ((1 << f.p) - 1);
  const bexp = (b & 0x7f) >>> f.p;
  const expMax = 0x7f >>> f.p;
  if (hasInf ? bexp === expMax : (b & 0x7f) === 0x7f) {
    if (hasInf && mant === 0) return sign * Infinity;
    U32[HI] = (b & 0x80 ? 0x80000000 : 0) | 0x7ff80000;
    U32[LO] = 0;
    return F64[0];
  }
  if (bexp === 0) return sign * mant * pow2(f.emin - f.p);
  return sign * ((1 << f.p) + mant) * pow2(bexp - 1 + f.emin - f.p);
}

function fp8Table(f: Fp8, hasInf: boolean): Float32Array {
  const t = new Float32Array(256);
  for (let b = 0; b < 256; b++) t[b] = fp8Value(b, f, hasInf);
  return t;
}
// Every FP8 value is exact in f32; 256 entries each.
const E4M3_VALUES = fp8Table(E4M3, false);
const E5M2_VALUES = fp8Table(E5M2, true);

/** x as an int8: round half to even, clamped to [-128, 127], NaN → 0. */
function int8Value(x: number): number {
  if (x !== x) return 0;
  if (x >= 127) return 127;
  if (x <= -128) return -128;
  let n = Math.floor(x);
  const r = x - n;
  if (r > 0.5 || (r === 0.5 && (n & 1) !== 0)) n += 1;
  return n;
}

/**
 * The byte (0..255) of x converted to a 1-byte dtype the way the GPU kernels convert (cvt.rn.satfinite): fp8 round
 * to nearest even, |x| beyond the largest finite value or infinite → ±max, NaN → NaN (0x7f for e4m3, 0x7e for e5m2,
 * | 0x80 when x's sign bit is set); int8 round half to even, clamped to [-128, 127], NaN → 0 (two's complement byte).
 */
export function toQuantBits(x: number, dtype: QuantDType): number {
  switch (dtype) {
    case "fp8e4m3":
      return fp8Bits(x, E4M3);
    case "fp8e5m2":
      return fp8Bits(x, E5M2);
    case "int8":
      return int8Value(x) & 0xff;
  }
  throw new TypeError(`unknown quantized dtype: ${String(dtype)}`);
}

/** The exact value of a 1-byte dtype's byte (its low 8 bits); e5m2 0x7c/0xfc are ±Infinity. */
export function fromQuantBits(b: number, dtype: QuantDType): number {
  const byte = b & 0xff;
  switch (dtype) {
    case "fp8e4m3":
      return E4M3_VALUES[byte];
    case "fp8e5m2":
      return E5M2_VALUES[byte];
    case "int8":
      return (byte << 24) >> 24;
  }
  throw new TypeError(`unknown quantized dtype: ${String(dtype)}`);
}

/** The largest finite value of a 1-byte dtype: 448 (fp8e4m3), 57344 (fp8e5m2), 127 (int8). */
export function quantMax(dtype: QuantDType): number {
  switch (dtype) {
    case "fp8e4m3":
      return E4M3.max;
    case "fp8e5m2":
      return E5M2.max;
    case "int8":
      return 127;
  }
  throw new TypeError(`unknown quantized dtype: ${String(dtype)}`);
}

/** The float64 value of x rounded (RNE) to `dtype`; for a 1-byte dtype, converted as toQuantBits does. */
export function roundTo(x: number, dtype: DType): number {
  switch (dtype) {
    case "f32":
      return Math.fround(x);
    case "f16":
      return fromBits(roundBits(x, F16), F16);
    case "bf16":
      return fromBits(roundBits(x, BF16), BF16);
    case "fp8e4m3":
    case "fp8e5m2":
    case "int8":
      return fromQuantBits(toQuantBits(x, dtype), dtype);
  }
  throw new TypeError(`unknown dtype: ${String(dtype)}`);
}

const F32_FMT = { p: 23, emin: -126, emax: 127 };
const ULP_FMT = { f32: F32_FMT, f16: F16, bf16: BF16, fp8e4m3: E4M3, fp8e5m2: E5M2, int8: null };

/** Spacing of `dtype` values at |x| (subnormal spacing below the normal range; 1 for int8). */
export function ulpOf(x: number, dtype: DType): number {
  if (x !== x) return NaN;
  const a = Math.abs(x);
  if (a === Infinity) return Infinity;
  const f = ULP_FMT[dtype];
  if (f === undefined) throw new TypeError(`unknown dtype: ${String(dtype)}`);
  if (f === null) return 1;
  let e = f.emin;
  if (a >= pow2(f.emin)) {
    F64[0] = a;
    e = Math.min(((U32[HI] >>> 20) & 0x7ff) - 1023, f.emax);
  }
  return pow2(e - f.p);
}

// ---- bulk encode/decode --------------------------------------------------

/** A Uint16Array over `bytes` when it can alias them (aligned, little-endian host). */
function u16View(bytes: Uint8Array, n: number): Uint16Array | null {
  return LITTLE_ENDIAN && bytes.byteOffset % 2 === 0 ? new Uint16Array(bytes.buffer, bytes.byteOffset, n) : null;
}

function f32View(bytes: Uint8Array, n: number): Float32Array | null {
  return LITTLE_ENDIAN && bytes.byteOffset % 4 === 0 ? new Float32Array(bytes.buffer, bytes.byteOffset, n) : null;
}

function dataView(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Encode `values` as little-endian `dtype` elements (count * dtypeBytes bytes). */
export function encode(values: ArrayLike<number>, dtype: DType, out?: Uint8Array): Uint8Array {
  const n = values.length;
  const nb = n * dtypeBytes(dtype);
  if (out !== undefined && out.length < nb) {
    throw new RangeError(`out: need ${nb} bytes for ${n} ${dtype} values, got ${out.length}`);
  }
  const dst = out === undefined ? new Uint8Array(nb) : out.length === nb ? out : out.subarray(0, nb);
  if (dtype === "f32") {
    const view = f32View(dst, n);
    if (view !== null) {
      view.set(values); // typed-array store rounds to nearest-even, like Math.fround
    } else {
      const dv = dataView(dst);
      for (let i = 0; i < n; i++) dv.setFloat32(i * 4, values[i], true);
    }
    return dst;
  }
  if (isQuantDType(dtype)) {
    for (let i = 0; i < n; i++) dst[i] = toQuantBits(values[i], dtype);
    return dst;
  }
  const conv = dtype === "f16" ? toF16Bits : toBf16Bits;
  const view = u16View(dst, n);
  if (view !== null) {
    for (let i = 0; i < n; i++) view[i] = conv(values[i]);
  } else {
    const dv = dataView(dst);
    for (let i = 0; i < n; i++) dv.setUint16(i * 2, conv(values[i]), true);
  }
  return dst;
}

// f16 -> f32 lookup table (256 KiB), built on first use: every f16 is exact in f32.
let f16Table: Float32Array | null = null;
function f16ToF32Table(): Float32Array {
  if (f16Table === null) {
    const t = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) t[h] = fromBits(h, F16);
    f16Table = t;
  }
  return f16Table;
}

// bf16 is the top half of an f32, so widening is a 16-bit shift.
const BF_F32 = new Float32Array(1);
const BF_U32 = new Uint32Array(BF_F32.buffer);

/**
 * Decode little-endian `dtype` elements. Returns a Float32Array unless `out`
 * is given, in which case the first count elements of `out` are returned.
 */
export function decode(
  bytes: Uint8Array,
  dtype: DType,
  out?: Float32Array | Float64Array,
): Float32Array | Float64Array {
  const w = dtypeBytes(dtype);
  if (bytes.length % w !== 0) {
    throw new RangeError(`bytes: length ${bytes.length} is not a multiple of ${w} (${dtype})`);
  }
  const n = bytes.length / w;
  if (out !== undefined && out.length < n) {
    throw new RangeError(`out: need ${n} elements, got ${out.length}`);
  }
  const dst = out === undefined ? new Float32Array(n) : out.length === n ? out : out.subarray(0, n);
  if (dtype === "f32") {
    const view = f32View(bytes, n);
    if (view !== null) {
      dst.set(view);
    } else {
      const dv = dataView(bytes);
      for (let i = 0; i < n; i++) dst[i] = dv.getFloat32(i * 4, true);
    }
    return dst;
  }
  if (dtype === "int8") {
    const i8 = new Int8Array(bytes.buffer, bytes.byteOffset, n);
    for (let i = 0; i < n; i++) dst[i] = i8[i];
    return dst;
  }
  if (dtype === "fp8e4m3" || dtype === "fp8e5m2") {
    const t = dtype === "fp8e4m3" ? E4M3_VALUES : E5M2_VALUES;
    for (let i = 0; i < n; i++) dst[i] = t[bytes[i]];
    return dst;
  }
  const view = u16View(bytes, n);
  const dv = view === null ? dataView(bytes) : null;
  if (dtype === "f16") {
    const t = f16ToF32Table();
    if (view !== null) { for (let i = 0; i < n; i++) dst[i] = t[view[i]]; }
    else for (let i = 0; i < n; i++) dst[i] = t[dv!.getUint16(i * 2, true)];
    return dst;
  }
  if (dst instanceof Float32Array) {
    const d32 = new Uint32Array(dst.buffer, dst.byteOffset, n);
    if (view !== null) { for (let i = 0; i < n; i++) d32[i] = view[i] << 16; }
    else for (let i = 0; i < n; i++) d32[i] = dv!.getUint16(i * 2, true) << 16;
    return dst;
  }
  for (let i = 0; i < n; i++) {
    BF_U32[0] = (view !== null ? view[i] : dv!.getUint16(i * 2, true)) << 16;
    dst[i] = BF_F32[0];
  }
  return dst;
}
