/** Seeded random numbers for tests (mulberry32): reproducible failures, never all zeros. */
import { type DType, roundTo } from "../runtime/dtype.ts";

/** A generator of uniform numbers in [0, 1) from a 32-bit seed. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n uniform numbers in [lo, hi) as float32. */
export function randoms(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const next = mulberry32(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + next() * (hi - lo);
  return out;
}

/**
 * `xs` rounded to `dtype` (what a device tensor of that dtype holds), as float64. A plain loop: under Deno,
 * Float64Array.from with a map function took 4x as long (1.6 s for 6.5 M values), which made the GPU dtype
 * matrix outlast its run.
 */
export function roundedTo(xs: ArrayLike<number>, dtype: DType): Float64Array {
  const out = new Float64Array(xs.length);
  for (let i = 0; i < xs.length; i++) out[i] = roundTo(xs[i], dtype);
  return out;
}
