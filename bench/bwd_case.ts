/**
 * One case of the backward benchmarks (bench/bwd_plans.ts, bench/bwd_staged_ab.ts): about 1 GiB of x + dy + dx of
 * `rows` × `d`, x filled by repeating a 4M-element tile of `value(i)`, dy a copy of x, weight and bias with fixed
 * patterns, and dweight/dbias to write; all released together.
 */
import type { Device, DType, Tensor } from "../mod.ts";

const MIN_BYTES = 2 ** 30;

export interface BwdCase extends Disposable {
  rows: number;
  x: Tensor; dy: Tensor; dx: Tensor; w: Tensor; bias: Tensor; dw: Tensor; db: Tensor;
  /** Bytes one backward call moves: x and dy read, dx written, the statistics, weight (and bias) and their gradients. */
  bytes(kind: "layer" | "rms"): number;
}

export function bwdCase(dev: Device, d: number, dt: DType, value: (i: number) => number): BwdCase {
  const b = dt === "f32" ? 4 : 2;
  const rows = Math.ceil(MIN_BYTES / (3 * d * b));
  const made: Tensor[] = [];
  const keep = (t: Tensor) => (made.push(t), t);
  try {
    const n = Math.min(rows * d, 2 ** 22);
    using tile = dev.tensor(Float32Array.from({ length: n }, (_, i) => value(i)), [n], { dtype: dt });
    const x = keep(dev.empty([rows, d], { dtype: dt }));
    for (let off = 0; off < x.buffer.byteLength; off += tile.buffer.byteLength) {
      x.buffer.copyFrom(tile.buffer, { offset: off, bytes: Math.min(tile.buffer.byteLength, x.buffer.byteLength - off) });
    }
    const dy = keep(dev.empty([rows, d], { dtype: dt }));
    dy.buffer.copyFrom(x.buffer);
    return {
      rows, x, dy,
      dx: keep(dev.empty([rows, d], { dtype: dt })),
      w: keep(dev.tensor(Float32Array.from({ length: d }, (_, i) => 1 + (i % 7) / 8), [d], { dtype: dt })),
      bias: keep(dev.tensor(Float32Array.from({ length: d }, (_, i) => (i % 5) / 8), [d], { dtype: dt })),
      dw: keep(dev.empty([d], { dtype: dt })),
      db: keep(dev.empty([d], { dtype: dt })),
      bytes: (kind) => 3 * rows * d * b + rows * 4 * (kind === "layer" ? 2 : 1) + d * b * (kind === "layer" ? 3 : 2),
      [Symbol.dispose]: () => made.forEach((t) => t.close()),
    };
  } catch (e) {
    made.forEach((t) => t.close());
    throw e;
  }
}

/** A seeded linear congruential generator of values in [-2, 2) (the benchmarks' random data). */
export function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
}
