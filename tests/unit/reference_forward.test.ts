import { mulberry32 } from "../fixtures/random.ts";
import { test } from "node:test";
import assert from "node:assert/strict";
import { type CpuNormInput, normForward } from "../../ops/cpu.ts";

function assertClose(got: ArrayLike<number>, want: ArrayLike<number>, rel: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const tol = rel * Math.max(1, Math.abs(want[i]));
    assert.ok(Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: ${got[i]} vs ${want[i]}`);
  }
}

const base = { xStride: 4, rows: 1, d: 4, eps: 0 } as const;

test("layer norm of [1,2,3,4] by hand (biased variance 1.25)", () => {
  const out = normForward({ ...base, kind: "layer", x: [1, 2, 3, 4] });
  const s = Math.sqrt(1.25);
  assertClose(out.y, [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s], 1e-15, "y");
  assert.deepEqual([...out.mean], [2.5]);
  assertClose(out.rstd, [1 / s], 1e-15, "rstd");
  const withEps = normForward({ ...base, kind: "layer", x: [1, 2, 3, 4], eps: 1e-5 });
  assertClose(withEps.rstd, [1 / Math.sqrt(1.25 + 1e-5)], 1e-15, "rstd eps inside sqrt");
});

test("PyTorch semantics: variance divides by d, not d-1", () => {
  // Unbiased variance would give +-1/sqrt(2); F.layer_norm gives exactly +-1.
  const out = normForward({ kind: "layer", rows: 1, d: 2, xStride: 2, x: [0, 2], eps: 0 });
  assert.deepEqual([...out.y], [-1, 1]);
  assert.deepEqual([...out.rstd], [1]);
});

test("rms norm of [1,2,3,4] by hand, bias ignored, mean reported as 0", () => {
  const out = normForward({ ...base, kind: "rms", x: [1, 2, 3, 4], eps: 1e-6, bias: [9, 9, 9, 9] });
  const rs = 1 / Math.sqrt(7.5 + 1e-6);
  assertClose(out.y, [rs, 2 * rs, 3 * rs, 4 * rs], 1e-15, "y");
  assert.deepEqual([...out.mean], [0]);
  assertClose(out.rstd, [rs], 1e-15, "rstd");
});

test("weight and bias, and zero-centred weight means scale = 1 + w", () => {
  const x = [1, 2, 3, 4];
  const w = [0.5, -1, 2, 0];
  const b = [1, 0, -1, 0.25];
  const s = Math.sqrt(1.25);
  const norm = [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s];
  const out = normForward({ ...base, kind: "layer", x, weight: w, bias: b });
  assertClose(out.y, norm.map((v, j) => v * w[j] + b[j]), 1e-15, "layer w,b");
  const zc = normForward({ ...base, kind: "layer", x, weight: w, bias: b, zeroCenteredWeight: true });
  assertClose(zc.y, norm.map((v, j) => v * (1 + w[j]) + b[j]), 1e-15, "layer zc");
  const rms = normForward({ ...base, kind: "rms", x, weight: w, zeroCenteredWeight: true });
  const rs = 1 / Math.sqrt(7.5);
  assertClose(rms.y, x.map((v, j) => v * rs * (1 + w[j])), 1e-15, "rms zc");
  const noW = normForward({ ...base, kind: "rms", x, zeroCenteredWeight: true });
  assertClose(noW.y, x.map((v) => v * rs), 1e-15, "zc without weight scales by 1");
});

test("strided rows with an offset read only their own elements", () => {
  const rows = 3;
  const d = 5;
  const stride = 8;
  const offset = 3;
  // Padding is NaN: reading any of it would poison a row.
  const buf = new Float64Array(offset + (rows - 1) * stride + d + 2).fill(NaN);
  const dense: number[] = [];
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < d; j++) {
      const v = Math.sin(r * 7 + j * 3) * (r + 1);
      buf[offset + r * stride + j] = v;
      dense.push(v);
    }
  }
  for (const kind of ["layer", "rms"] as const) {
    const weight = [1, 2, 3, 4, 5];
    const bias = [0.1, 0.2, 0.3, 0.4, 0.5];
    const strided = normForward({ kind, rows, d, x: buf, xOffset: offset, xStride: stride, eps: 1e-5, weight, bias });
    const contiguous = normForward({ kind, rows, d, x: dense, xStride: d, eps: 1e-5, weight, bias });
    assert.deepEqual(strided, contiguous, kind);
    assert.ok(strided.y.every(Number.isFinite), kind);
  }
});

test("a NaN poisons only its own row", () => {
  const x = [1, 2, 3, 4, 5, NaN, 7, 8, -1, 0, 1, 2];
  const clean = [1, 2, 3, 4, 5, 6, 7, 8, -1, 0, 1, 2];
  for (const kind of ["layer", "rms"] as const) {
    const input: CpuNormInput = { kind, rows: 3, d: 4, xStride: 4, x, eps: 1e-5, weight: [1, 1, 2, 2] };
    const out = normForward(input);
    const ref = normForward({ ...input, x: clean });
    for (let j = 0; j < 4; j++) assert.ok(Number.isNaN(out.y[4 + j]), `${kind} y[1,${j}]`);
    assert.ok(Number.isNaN(out.rstd[1]), `${kind} rstd[1]`);
    assert.deepEqual([...out.y.slice(0, 4), ...out.y.slice(8)], [...ref.y.slice(0, 4), ...ref.y.slice(8)], kind);
    assert.deepEqual([out.rstd[0], out.rstd[2]], [ref.rstd[0], ref.rstd[2]]);
  }
});

test("constant row: y is 0 and rstd is 1/sqrt(eps); rows = 0 gives empty outputs", () => {
  const out = normForward({ kind: "layer", rows: 1, d: 3, xStride: 3, x: [7, 7, 7], eps: 1e-5 });
  assert.deepEqual([...out.y], [0, 0, 0]);
  assert.equal(out.rstd[0], 1 / Math.sqrt(1e-5));
  const empty = normForward({ kind: "rms", rows: 0, d: 3, xStride: 3, x: [], eps: 1e-5 });
  assert.equal(empty.y.length + empty.mean.length + empty.rstd.length, 0);
});

test("short inputs throw a RangeError naming the argument", () => {
  const x = new Float64Array(10);
  assert.throws(() => normForward({ kind: "layer", rows: 3, d: 4, xStride: 4, x, eps: 0 }), /^RangeError: x:/);
  assert.throws(
    () => normForward({ kind: "rms", rows: 2, d: 4, xStride: 4, xOffset: 3, x, eps: 0 }),
    /^RangeError: x:/,
  );
  assert.throws(() => normForward({ kind: "rms", rows: 1, d: 4, xStride: 4, xOffset: -1, x, eps: 0 }), RangeError);
  assert.throws(() => normForward({ kind: "rms", rows: 2, d: 4, xStride: 4, x, eps: 0, weight: [1] }), /weight/);
  assert.throws(() => normForward({ kind: "layer", rows: 2, d: 4, xStride: 4, x, eps: 0, bias: [1] }), /bias/);
  // Exactly long enough (last row ends at the last element) is fine.
  normForward({ kind: "layer", rows: 2, d: 4, xStride: 6, x, eps: 0 });
});

/** Textbook single-pass float32 LayerNorm statistics: E[x^2] - E[x]^2. */
function naiveF32Rstd(x: ArrayLike<number>, off: number, d: number, eps: number): number {
  const f = Math.fround;
  let s = 0;
  let s2 = 0;
  for (let j = 0; j < d; j++) {
    const v = f(x[off + j]);
    s = f(s + v);
    s2 = f(s2 + f(v * v));
  }
  const mean = f(s / d);
  const variance = f(f(s2 / d) - f(mean * mean));
  return f(1 / f(Math.sqrt(f(variance + f(eps)))));
}

/** Deterministic PRNG (mulberry32) and a Box-Muller normal on top of it. */
function rng(seed: number): () => number {
  return mulberry32(seed);
}
function normal(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

test("stability: mean 1e4, std ~1e-2, exactly known statistics", () => {
  // x = 1e4 + k * 2^-8 with k cycling -3,-1,1,3: mean is exactly 1e4 and the
  // biased variance exactly 5 * 2^-16. Every x is exact in f32 too, so the
  // naive failure below is the algorithm's, not the input's.
  const d = 1024;
  const eps = 1e-5;
  const ks = [-3, -1, 1, 3];
  const x = Array.from({ length: d }, (_, j) => 1e4 + ks[j % 4] * 2 ** -8);
  assert.ok(x.every((v) => Math.fround(v) === v));
  const rstdExact = 1 / Math.sqrt(5 * 2 ** -16 + eps);
  const out = normForward({ kind: "layer", rows: 1, d, xStride: d, x, eps });
  assert.equal(out.mean[0], 1e4);
  assertClose(out.rstd, [rstdExact], 1e-14, "rstd");
  assertClose(out.y, x.map((_, j) => ks[j % 4] * 2 ** -8 * rstdExact), 1e-14, "y");
  const naive = naiveF32Rstd(x, 0, d, eps);
  const naiveErr = Math.abs(naive - rstdExact) / rstdExact;
  assert.ok(!(naiveErr < 0.5), `naive E[x^2]-E[x]^2 should fail badly, rel err ${naiveErr}`);
});

test("stability: random rows at mean 1e4, std 1e-2 against exact BigInt statistics", () => {
  // x = 1e4 + n * 2^-20 with integer n, so sums of n and n^2 are exact in BigInt.
  const rand = rng(42);
  const rows = 8;
  const d = 4096;
  const eps = 1e-6;
  const q = 2 ** -20;
  const ns = Array.from({ length: rows * d }, () => Math.round(normal(rand) * 1e-2 / q));
  const x = new Float64Array(ns.map((n) => 1e4 + n * q));
  const out = normForward({ kind: "layer", rows, d, xStride: d, x, eps });
  let worstOurs = 0;
  let bestNaive = Infinity;
  for (let r = 0; r < rows; r++) {
    let S = 0n;
    let Q = 0n;
    for (let j = 0; j < d; j++) {
      const n = BigInt(ns[r * d + j]);
      S += n;
      Q += n * n;
    }
    const D = BigInt(d);
    const variance = (Number(D * Q - S * S) / (d * d)) * q * q; // one rounding
    const rstd = 1 / Math.sqrt(variance + eps);
    const meanExact = 1e4 + (Number(S) / d) * q;
    assert.ok(Math.abs(out.mean[r] - meanExact) <= 1e4 * 2 ** -52, `mean row ${r}`);
    worstOurs = Math.max(worstOurs, Math.abs(out.rstd[r] - rstd) / rstd);
    for (let j = 0; j < d; j++) {
      const y = (Number(D * BigInt(ns[r * d + j]) - S) / d) * q * rstd;
      worstOurs = Math.max(worstOurs, Math.abs(out.y[r * d + j] - y) / Math.max(1, Math.abs(y)));
    }
    const naive = naiveF32Rstd(x, r * d, d, eps);
    const e = Math.abs(naive - rstd) / rstd;
    bestNaive = Math.min(bestNaive, Number.isNaN(e) ? Infinity : e);
  }
  assert.ok(worstOurs < 1e-10, `normForward rel err ${worstOurs}`);
  assert.ok(bestNaive > 0.5, `naive float32 rel err only ${bestNaive}`);
});

test("property: each LayerNorm output row has mean ~0 and variance var/(var+eps)", () => {
  const rand = rng(3);
  const eps = 1e-3;
  for (let t = 0; t < 200; t++) {
    const d = 1 + Math.floor(rand() * 300);
    const scale = 10 ** (rand() * 6 - 3);
    const shift = (rand() - 0.5) * 10 ** (rand() * 5);
    const x = Array.from({ length: d }, () => shift + normal(rand) * scale);
    const { y, mean } = normForward({ kind: "layer", rows: 1, d, xStride: d, x, eps });
    let v = 0;
    for (const xi of x) v += (xi - mean[0]) ** 2;
    v /= d;
    let my = 0;
    for (const yi of y) my += yi;
    my /= d;
    let vy = 0;
    for (const yi of y) vy += (yi - my) ** 2;
    vy /= d;
    assert.ok(Math.abs(my) < 1e-9, `mean(y) = ${my} (d=${d}, scale=${scale}, shift=${shift})`);
    const want = v / (v + eps);
    assert.ok(Math.abs(vy - want) <= 1e-9 * Math.max(want, 1e-3), `var(y) = ${vy}, want ${want}`);
  }
});
