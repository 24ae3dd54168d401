/**
 * Diagnostics: tensorStats, check mode, histogram, and the sanity check at
 * Device.open(). Non-finite counts and abs-max are exact quantities, so the GPU's (kernels/diag.cuh) must equal
 * the host's computed from the same stored values (readSync widens f16/bf16 exactly).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ArgumentError,
  type CheckReport,
  Device,
  type DType,
  histogram,
  layerNorm,
  rmsNorm,
  sanityCheck,
  SanityCheckError,
  tensorStats, loadKernels } from "../../mod.ts";
import { DIAG_SCRATCH, partialAt, statsOfValues } from "../../ops/diag.ts";
import { roundTo } from "../../runtime/dtype.ts";
import { setSanityCheck } from "../../runtime/device.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

/** Random values with NaN, +Inf and -Inf planted at a few places (rows × d, row-major). */
function withNonFinite(rows: number, d: number, seed: number, scale = 3): Float32Array {
  const v = randoms(rows * d, seed, -scale, scale);
  for (let i = 7; i < v.length; i += 997) v[i] = [NaN, Infinity, -Infinity][i % 3];
  return v;
}

function cpu(check?: boolean | ((r: CheckReport) => void)): Device {
  return Device.open({ backend: "cpu", sanityCheck: false, check });
}

test("tensorStats on the CPU: non-finite count and abs-max of the finite values, strided rows", () => {
  using dev = cpu();
  const v = withNonFinite(5, 1000, 1);
  using x = dev.tensor(v, [5, 1000], { rowStride: 1003 });
  const s = tensorStats(x);
  const planted = v.filter((a) => !Number.isFinite(a)).length;
  assert.ok(planted >= 5);
  assert.deepEqual(s, { count: 5000, nonFinite: planted, absMax: Math.max(...v.filter(Number.isFinite).map(Math.abs)) });
  assert.deepEqual(statsOfValues([]), { count: 0, nonFinite: 0, absMax: 0 });
  assert.throws(() => tensorStats(new Float32Array(3) as never), (e: unknown) => e instanceof ArgumentError && e.argument === "tensor");
});

test("check mode (Device.open({ check })): one report per call with input/output stats; in place sees the input before", () => {
  const reports: CheckReport[] = [];
  using dev = cpu((r) => reports.push(r));
  const v = withNonFinite(4, 1000, 2);
  using x = dev.tensor(v, [4, 1000]);
  using y = layerNorm(x);
  assert.equal(reports.length, 1);
  const r = reports[0];
  assert.equal(r.op, "layerNorm");
  assert.deepEqual(r.input, statsOfValues(v));
  assert.deepEqual(r.output, statsOfValues(y.readSync()));
  assert.ok(r.output.nonFinite >= 1000, "rows with a NaN/Inf come out all NaN");
  assert.ok(r.warnings.some((w) => /input: \d+ non-finite/.test(w)));
  assert.equal(dev.lastCheck, r);
  // In place: the input stats are those of x before it was overwritten.
  const clean = randoms(4000, 3, -50, 50);
  using z = dev.tensor(clean, [4, 1000]);
  rmsNorm(z, { out: z });
  assert.deepEqual(reports[1].input, statsOfValues(clean));
  assert.ok(reports[1].output.absMax < 5 && reports[1].input.absMax > 45);
  assert.deepEqual(reports[1].warnings, []);
  // check: false silences one call.
  layerNorm(z, { check: false }).close();
  assert.equal(reports.length, 2);
});

test("per-call check: true on a device without check mode; f16 near overflow is flagged", () => {
  using dev = cpu();
  using x = dev.tensor(randoms(64, 4, -1, 1).map((v, i) => (i === 5 ? 61_000 : v)), [2, 32], { dtype: "f16" });
  layerNorm(x).close();
  assert.equal(dev.lastCheck, undefined, "check mode is off by default");
  layerNorm(x, { check: true }).close();
  const r = dev.lastCheck!;
  assert.equal(r.input.absMax, roundTo(61_000, "f16"), "61000 rounded to f16");
  assert.ok(r.warnings.some((w) => /near the f16 maximum/.test(w)), r.warnings.join("; "));
});

test("diag scratch layout: the first pass writes each segment where nk_diag_final's block reads it (check-mode output stats)", () => {
  // A host model of the two passes over the scratch: the first pass writes `blocks` partials of segment s at
  // partialAt(s, blocks); nk_diag_final's block s reads counts/maxes[s*n .. s*n+n) with n = blocks
  // (kernels/diag.cuh). With a MAX_BLOCKS segment stride, block 1 read the unwritten tail of segment 0 and
  // check mode would report {nonFinite: 0, absMax: 0} for an all-NaN output.
  const { bytes, maxesAt, resultAt, maxBlocks, segments } = DIAG_SCRATCH;
  for (const blocks of [1, 2, 189, 1000, maxBlocks]) {
    const mem = new ArrayBuffer(bytes);
    const counts = new BigUint64Array(mem, 0, maxesAt / 8), maxes = new Float32Array(mem, maxesAt, (resultAt - maxesAt) / 4);
    const written: [number, number][] = [];
    for (let s = 0; s < segments; s++) {
      const at = partialAt(s, blocks);
      assert.ok(at.counts % 8 === 0 && at.maxes % 4 === 0, "aligned");
      assert.ok(at.counts + blocks * 8 <= maxesAt && at.maxes + blocks * 4 <= resultAt, `segment ${s} of ${blocks} fits`);
      for (let b = 0; b < blocks; b++) {
        counts[at.counts / 8 + b] = BigInt(1 + s * 1000 + (b % 3)); // distinct per segment
        maxes[(at.maxes - maxesAt) / 4 + b] = s * 100 + (b % 7);
        written.push([at.counts / 8 + b, (at.maxes - maxesAt) / 4 + b]);
      }
    }
    assert.equal(new Set(written.map((w) => w[0])).size, written.length, "no two partials share a count slot");
    for (let s = 0; s < segments; s++) {
      let cnt = 0n, mx = 0;
      for (let i = 0; i < blocks; i++) { // nk_diag_final_impl, block s
        cnt += counts[s * blocks + i];
        mx = Math.max(mx, maxes[s * blocks + i]);
      }
      let want = 0n;
      for (let b = 0; b < blocks; b++) want += BigInt(1 + s * 1000 + (b % 3));
      assert.equal(cnt, want, `blocks ${blocks}: segment ${s} count`);
      assert.equal(mx, s * 100 + Math.min(6, blocks - 1), `blocks ${blocks}: segment ${s} max`);
    }
  }
});

test("histogram: counts per bin, below/above/non-finite, edges; bad bins/range refused", () => {
  using dev = cpu();
  using t = dev.tensor([-5, -4, -1.5, 0, 0.5, 3.9, 4, 7, NaN, Infinity], [10]);
  const h = histogram(t, { bins: 4, range: [-4, 4] });
  assert.deepEqual(h.edges, [-4, -2, 0, 2, 4]);
  assert.deepEqual(h.counts, [1, 1, 2, 2]); // -4 | -1.5 | 0, 0.5 | 3.9, 4 (the top edge is in the last bin)
  assert.deepEqual([h.below, h.above, h.nonFinite, h.count], [1, 1, 2, 10]);
  assert.equal(h.counts.reduce((a, b) => a + b) + h.below + h.above + h.nonFinite, h.count);
  assert.throws(() => histogram(t, { bins: 0 }), (e: unknown) => e instanceof ArgumentError && e.argument === "bins");
  assert.throws(() => histogram(t, { range: [1, 1] }), (e: unknown) => e instanceof ArgumentError && e.argument === "range");
  // After LayerNorm, N(0,1)-like data sits inside [-4, 4].
  using x = dev.tensor(randoms(4096, 5, -1, 1), [4, 1024]);
  using y = layerNorm(x);
  const hy = histogram(y);
  assert.equal(hy.below + hy.above + hy.nonFinite, 0);
});

test("sanityCheck: passes on the CPU backend, cheaply; Device.open runs the registered check unless sanityCheck: false", () => {
  using dev = cpu();
  const t0 = performance.now();
  sanityCheck(dev);
  const ms = performance.now() - t0;
  assert.ok(ms < 200, `sanity check took ${ms} ms`);
  assert.equal(dev.owner.liveCount, 1, "it leaves nothing behind but the default stream");
  // The wiring: a failing check makes open() throw (and close what it opened); sanityCheck: false skips it.
  let ran = 0;
  setSanityCheck((d) => {
    ran++;
    throw new SanityCheckError("layerNorm", 3, 0, 0.5, d.backend);
  });
  try {
    assert.throws(() => Device.open({ backend: "cpu" }), (e: unknown) => e instanceof SanityCheckError && /element 3/.test(e.message));
    Device.open({ backend: "cpu", sanityCheck: false }).close();
    assert.equal(ran, 1);
  } finally {
    setSanityCheck(sanityCheck);
  }
  Device.open({ backend: "cpu" }).close(); // the real check again: passes
});

// ---- on the GPU: the diag kernels ----

gpuTest("tensorStats on CUDA equals the host's exactly: f32/f16/bf16, strided, small and large (grid-stride), with NaN/±Inf", async () => {
  using dev = Device.open({ backend: "cuda", sanityCheck: false });
  await loadKernels(dev);
  const cases: [number, number, number][] = [[1, 1, 0], [3, 7, 2], [33, 1000, 5], [3000, 4097, 3], [64, 65537, 0]];
  for (const dtype of ["f32", "f16", "bf16"] as DType[]) {
    for (const [rows, d, pad] of cases) {
      const v = withNonFinite(rows, d, rows + d, 100);
      using x = dev.tensor(v, [rows, d], { dtype, rowStride: d + pad });
      const want = statsOfValues(x.readSync());
      const got = tensorStats(x);
      assert.deepEqual(got, want, `${dtype} [${rows}, ${d}] stride ${d + pad}`);
      assert.deepEqual(tensorStats(x), got, "repeatable");
    }
  }
  using e = dev.tensor([], [0, 16]);
  assert.deepEqual(tensorStats(e), { count: 0, nonFinite: 0, absMax: 0 });
});

gpuTest("check mode on CUDA: reports equal the host's stats; in place reports x before; outputs identical to unchecked", async () => {
  const reports: CheckReport[] = [];
  using dev = Device.open({ backend: "cuda", check: (r) => reports.push(r) });
  const rows = 257, d = 3000;
  const v = withNonFinite(rows, d, 7, 20);
  for (const dtype of ["f32", "bf16", "f16"] as DType[]) {
    using x = dev.tensor(v, [rows, d], { dtype });
    const xin = x.readSync();
    using y = layerNorm(x);
    const r = reports.at(-1)!;
    assert.deepEqual(r.input, statsOfValues(xin), dtype);
    assert.deepEqual(r.output, statsOfValues(y.readSync()), dtype);
    using y2 = layerNorm(x, { check: false });
    assert.deepEqual(new Uint8Array(y2.readSync().buffer), new Uint8Array(y.readSync().buffer), "check mode changes nothing");
    rmsNorm(x, { out: x });
    assert.deepEqual(reports.at(-1)!.input, statsOfValues(xin), `${dtype} in place`);
    assert.deepEqual(reports.at(-1)!.output, statsOfValues(x.readSync()));
  }
  assert.equal(reports.length, 6);
});

gpuTest("sanityCheck runs at Device.open on CUDA in well under a second", async () => {
  const t0 = performance.now();
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const ms = performance.now() - t0;
  const t1 = performance.now();
  sanityCheck(dev);
  const again = performance.now() - t1;
  console.log(`# Device.open with sanity check: ${ms.toFixed(1)} ms; check alone (module loaded): ${again.toFixed(2)} ms`);
  assert.ok(ms < 2000 && again < 50);
});
