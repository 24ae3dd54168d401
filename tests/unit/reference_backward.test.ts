// The float64 backward reference (ops/cpu_bwd.ts) against central finite differences of the float64
// forward (ops/cpu.ts): the GPU backward is tested against this reference, so it must be right itself.
import { test } from "node:test";
import assert from "node:assert/strict";
import { normForward, type NormKind } from "../../ops/cpu.ts";
import { normBackward } from "../../ops/cpu_bwd.ts";
import { randoms } from "../fixtures/random.ts";

/** L = Σ dy · y(x, w, b): its gradient is exactly what the backward returns. */
function loss(
  kind: NormKind,
  x: Float64Array,
  w: Float64Array,
  b: Float64Array,
  dy: Float64Array,
  rows: number,
  d: number,
): number {
  const y = normForward({ kind, rows, d, x, xStride: d, weight: w, bias: b, eps: 1e-5 }).y;
  let s = 0;
  for (let i = 0; i < y.length; i++) s += y[i] * dy[i];
  return s;
}

function fd(f: () => number, v: Float64Array, i: number, h: number): number {
  const keep = v[i];
  v[i] = keep + h;
  const up = f();
  v[i] = keep - h;
  const down = f();
  v[i] = keep;
  return (up - down) / (2 * h);
}

for (const kind of ["layer", "rms"] as const) {
  for (const [rows, d] of [[3, 1], [2, 5], [4, 17]] as const) {
    test(`${kind} backward = finite differences (rows ${rows}, d ${d})`, () => {
      const seed = rows * 100 + d + (kind === "rms" ? 7 : 0);
      const x = Float64Array.from(randoms(rows * d, seed, -2, 2));
      const dy = Float64Array.from(randoms(rows * d, seed + 1, -1, 1));
      const w = Float64Array.from(randoms(d, seed + 2, 0.5, 1.5));
      const b = Float64Array.from(randoms(d, seed + 3, -0.5, 0.5));
      const got = normBackward({ kind, rows, d, x, xStride: d, dy, dyStride: d, weight: w, eps: 1e-5 });
      const f = () => loss(kind, x, w, b, dy, rows, d);
      const h = 1e-5;
      // Central differences in float64 with h = 1e-5: truncation ~h² and rounding ~1e-16/h, so 1e-7
      // absolute (the gradients here are O(1)) separates a right formula from a wrong one by orders.
      const tol = 1e-7;
      for (let i = 0; i < rows * d; i++) {
        const want = fd(f, x, i, h);
        assert.ok(Math.abs(got.dx[i] - want) <= tol, `dx[${i}]: ${got.dx[i]} vs ${want}`);
      }
      for (let j = 0; j < d; j++) {
        const ww = fd(f, w, j, h);
        assert.ok(Math.abs(got.dweight[j] - ww) <= tol, `dweight[${j}]: ${got.dweight[j]} vs ${ww}`);
        const wb = kind === "layer" ? fd(f, b, j, h) : 0;
        assert.ok(Math.abs(got.dbias[j] - wb) <= tol, `dbias[${j}]: ${got.dbias[j]} vs ${wb}`);
      }
      // d = 1 LayerNorm: y = b, so dx = 0 and dweight = 0 exactly.
      if (kind === "layer" && d === 1) { for (const v of got.dx) assert.equal(Math.abs(v), 0); }
    });
  }
}

test("given statistics are used as given; absent ones are recomputed from eps", () => {
  const rows = 2, d = 8;
  const x = Float64Array.from(randoms(rows * d, 5, -1, 1)), dy = Float64Array.from(randoms(rows * d, 6, -1, 1));
  const f = normForward({ kind: "layer", rows, d, x, xStride: d, eps: 1e-5 });
  const a = normBackward({ kind: "layer", rows, d, x, xStride: d, dy, dyStride: d, mean: f.mean, rstd: f.rstd });
  const b = normBackward({ kind: "layer", rows, d, x, xStride: d, dy, dyStride: d, eps: 1e-5 });
  assert.deepEqual([...a.dx], [...b.dx]);
  const c = normBackward({ kind: "layer", rows, d, x, xStride: d, dy, dyStride: d, mean: f.mean, rstd: [1, 1] });
  assert.notDeepEqual([...a.dx], [...c.dx]);
  assert.throws(() => normBackward({ kind: "rms", rows, d, x, xStride: d, dy, dyStride: d }), /eps/);
});

test("strided rows read only their d elements", () => {
  const rows = 3, d = 4, s = 7;
  const x = Float64Array.from(randoms(rows * s, 8, -1, 1)), dy = Float64Array.from(randoms(rows * s, 9, -1, 1));
  const packedX = new Float64Array(rows * d), packedDy = new Float64Array(rows * d);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < d; j++) packedX[r * d + j] = x[r * s + j], packedDy[r * d + j] = dy[r * s + j];
  }
  const a = normBackward({ kind: "rms", rows, d, x, xStride: s, dy, dyStride: s, eps: 1e-6 });
  const b = normBackward({ kind: "rms", rows, d, x: packedX, xStride: d, dy: packedDy, dyStride: d, eps: 1e-6 });
  assert.deepEqual([...a.dx], [...b.dx]);
  assert.deepEqual([...a.dweight], [...b.dweight]);
});
