/**
 * The benchmarks' random data (never zeros): a tile of 2^22 uniform values in [-2, 2) from a seeded LCG, uploaded
 * once per dtype and copied over large tensors on the device (bench/bench.ts, lab/kernel_ab/fwd_ab.ts).
 */
import type { Device, DType, Tensor } from "../mod.ts";
import { encode } from "../runtime/dtype.ts";

/** 2^22 values in [-2, 2) from seed `seed`. */
export function randomTile(seed: number): Float32Array {
  let s = seed;
  const rand = (): number => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 4 - 2;
  return Float32Array.from({ length: 2 ** 22 }, rand);
}

/** Fills a (large) tensor's buffer with `tile` in the tensor's dtype, tile after tile, by device copies. */
export function fillFromTile(x: Tensor, tile: Float32Array): void {
  const bytes = encode(tile, x.dtype);
  using t = x.device.alloc(bytes.byteLength);
  t.write(bytes);
  for (let off = 0; off < x.buffer.byteLength; off += bytes.byteLength) {
    x.buffer.copyFrom(t, { offset: off, bytes: Math.min(bytes.byteLength, x.buffer.byteLength - off) });
  }
}

/**
 * One experiment case's tensors on `dev`: x (`rows` rows of d, from `tile`), y and a reference output of the same
 * shape, and γ = 1 + v/8, β = v from the tile, all in `dtype` (lab/kernel_ab/fwd_ab.ts). Disposing
 * the result frees them all (and anything made before a throw is freed too).
 */
export function caseTensors(dev: Device, tile: Float32Array, d: number, dtype: DType, rows: number) {
  using held = new DisposableStack();
  const x = held.use(dev.empty([rows, d], { dtype })), y = held.use(dev.empty([rows, d], { dtype }));
  const ref = held.use(dev.empty([rows, d], { dtype }));
  fillFromTile(x, tile);
  const w = held.use(dev.tensor(tile.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype }));
  const bias = held.use(dev.tensor(tile.subarray(d, 2 * d), [d], { dtype }));
  const owned = held.move();
  return { x, y, ref, w, bias, [Symbol.dispose]: () => owned.dispose() };
}
