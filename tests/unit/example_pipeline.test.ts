/**
 * examples/pipeline.ts: results against the float64 reference (CPU backend here, CUDA on a GPU host), and
 * on CUDA the overlap read from event timestamps.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpuNormForward, Device } from "../../mod.ts";
import { runPipeline } from "../../examples/pipeline.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

function data(rows: number, d: number, chunks: number) {
  const input = randoms(chunks * rows * d, 11, -3, 3);
  // Per-row offsets, so that a chunk or row landing in the wrong place cannot go unnoticed.
  for (let r = 0; r < chunks * rows; r++) for (let j = 0; j < d; j++) input[r * d + j] += r % 13;
  return { input, weight: randoms(d, 12, 0.5, 1.5), bias: randoms(d, 13) };
}

function maxError(
  out: Float32Array,
  input: Float32Array,
  weight: Float32Array,
  bias: Float32Array,
  rows: number,
  d: number,
): number {
  const ref = cpuNormForward({ kind: "layer", rows, d, x: input, xStride: d, weight, bias, eps: 1e-5 });
  let worst = 0;
  for (let i = 0; i < out.length; i++) worst = Math.max(worst, Math.abs(out[i] - ref.y[i]));
  return worst;
}

test("pipeline on the CPU backend: every chunk lands in its place, equal to the reference", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 3, d = 40, chunks = 5; // odd counts: both slots, and a last chunk alone
  const { input, weight, bias } = data(rows, d, chunks);
  const { output, times } = runPipeline(dev, input, weight, bias, { rows, d, chunks, repeats: 2 });
  assert.equal(output.length, rows * d * chunks);
  assert.ok(maxError(output, input, weight, bias, chunks * rows, d) < 1e-5);
  assert.equal(times.uploadMs.length, chunks);
  assert.equal(times.uploadBeforePreviousDone.length, chunks - 1);
  assert.throws(() => runPipeline(dev, input.subarray(1), weight, bias, { rows, d, chunks }), RangeError);
});

gpuTest("pipeline on CUDA: correct, and uploads overlap compute (event timestamps: total < sum of parts)", () => {
  using dev = Device.open({ backend: "cuda" });
  const rows = 512, d = 4096, chunks = 8; // 8 MiB f32 per chunk
  const { input, weight, bias } = data(rows, d, chunks);
  runPipeline(dev, input.subarray(0, 2 * rows * d), weight, bias, { rows, d, chunks: 2 }); // warm-up
  const { output, times } = runPipeline(dev, input, weight, bias, { rows, d, chunks, repeats: 16 });
  const err = maxError(output, input, weight, bias, chunks * rows, d);
  const sum = (a: number[]) => a.reduce((s, v) => s + v, 0);
  console.log(
    `# pipeline: total ${times.totalMs.toFixed(3)} ms vs parts ${times.sumMs.toFixed(3)} ms ` +
      `(uploads ${sum(times.uploadMs).toFixed(3)}, compute ${sum(times.computeMs).toFixed(3)}; ` +
      `ratio ${(times.totalMs / times.sumMs).toFixed(2)}); uploads started before the previous chunk was done: ` +
      `${times.uploadBeforePreviousDone.filter(Boolean).length}/${chunks - 1}; max abs error ${err.toExponential(2)}`,
  );
  assert.ok(err < 1e-4, `max abs error ${err}`);
  assert.ok(times.totalMs < times.sumMs, `no overlap: total ${times.totalMs} ms ≥ parts ${times.sumMs} ms`);
  assert.ok(
    times.uploadBeforePreviousDone.some(Boolean),
    "some upload ran while the previous chunk was being processed",
  );
});
