/**
 * Copy/compute overlap: chunk i+1 is uploaded from pinned memory on a copy stream while chunk i is
 * normalized (and its result downloaded) on a compute stream. Events join the two: the compute stream
 * waits for each upload, and the copy stream waits before reusing one of the two device slots until the
 * compute stream is done with it. Event timestamps then show the overlap: the whole run takes less than
 * the sum of its parts.
 *
 *   deno run --allow-ffi --allow-env --allow-read examples/pipeline.ts
 *   bun examples/pipeline.ts
 */
import { cpuNormForward, Device, layerNorm, type Tensor, loadKernels } from "../mod.ts";
import type { Event } from "../gpu.ts";

export interface PipelineOptions {
  rows: number;
  d: number;
  chunks: number;
  /** Times each chunk is normalized (the same result): a stand-in for the rest of a model's work per chunk. */
  repeats?: number;
  eps?: number;
}

/** Milliseconds from device events (host times on the CPU backend, where nothing overlaps). */
export interface PipelineTimes {
  /** From the first upload's start to the last download's end. */
  totalMs: number;
  /** Per chunk: its upload on the copy stream. */
  uploadMs: number[];
  /** Per chunk: normalization and download on the compute stream (after its upload arrived). */
  computeMs: number[];
  /** Σ uploadMs + Σ computeMs: what the run would take with nothing overlapped. */
  sumMs: number;
  /** Per chunk i ≥ 1: whether its upload started before chunk i − 1's compute ended (true overlap). */
  uploadBeforePreviousDone: boolean[];
}

/** Normalizes `input` (chunks × rows × d, f32) chunk by chunk; returns the output and the event timings. */
export function runPipeline(
  dev: Device,
  input: Float32Array,
  weight: Float32Array,
  bias: Float32Array,
  opts: PipelineOptions,
): { output: Float32Array; times: PipelineTimes } {
  const { rows, d, chunks } = opts;
  const repeats = opts.repeats ?? 1, eps = opts.eps ?? 1e-5;
  const n = rows * d, bytes = n * 4;
  if (input.length !== n * chunks) throw new RangeError(`input: ${n * chunks} values expected, got ${input.length}`);

  using pinIn = dev.pinned(bytes * chunks);
  using pinOut = dev.pinned(bytes * chunks);
  // In a real pipeline the producer writes straight into pinned memory; here the data is copied in once.
  new Float32Array(pinIn.bytes.buffer, pinIn.bytes.byteOffset, n * chunks).set(input);
  using copy = dev.createStream();
  using compute = dev.createStream();
  using w = dev.tensor(weight, [d]);
  using b = dev.tensor(bias, [d]);
  const owned: { close(): void }[] = [];
  const keep = <T extends { close(): void }>(o: T): T => (owned.push(o), o);
  try {
    // Two device slots: chunk i uses slot i % 2, so chunk i + 1 can arrive while chunk i is worked on.
    const xs: Tensor[] = [keep(dev.empty([rows, d])), keep(dev.empty([rows, d]))];
    const ys: Tensor[] = [keep(dev.empty([rows, d])), keep(dev.empty([rows, d]))];
    const events = (): Event[] => Array.from({ length: chunks }, () => keep(dev.createEvent()));
    const uploadStart = events(), uploaded = events(), computeStart = events(), computed = events();

    for (let i = 0; i < chunks; i++) {
      const slot = i % 2;
      // The slot's previous chunk (i − 2) must be fully read and downloaded before it is overwritten.
      if (i >= 2) copy.waitEvent(computed[i - 2]);
      uploadStart[i].record(copy);
      xs[slot].buffer.writeAsync(pinIn, { pinnedOffset: i * bytes, bytes, stream: copy });
      uploaded[i].record(copy);

      compute.waitEvent(uploaded[i]);
      computeStart[i].record(compute);
      for (let r = 0; r < repeats; r++) layerNorm(xs[slot], { weight: w, bias: b, eps, out: ys[slot], stream: compute });
      ys[slot].buffer.readAsync(pinOut, { pinnedOffset: i * bytes, bytes, stream: compute });
      computed[i].record(compute);
    }
    // The compute stream waited for every upload, so once it is done everything is.
    compute.synchronize();

    const uploadMs = uploaded.map((e, i) => e.elapsedSince(uploadStart[i]));
    const computeMs = computed.map((e, i) => e.elapsedSince(computeStart[i]));
    const sum = (a: number[]): number => a.reduce((s, v) => s + v, 0);
    const times: PipelineTimes = {
      totalMs: computed[chunks - 1].elapsedSince(uploadStart[0]),
      uploadMs,
      computeMs,
      sumMs: sum(uploadMs) + sum(computeMs),
      uploadBeforePreviousDone: Array.from({ length: chunks - 1 }, (_, k) =>
        uploadStart[k + 1].elapsedSince(uploadStart[0]) < computed[k].elapsedSince(uploadStart[0])),
    };
    const output = new Float32Array(pinOut.bytes.buffer, pinOut.bytes.byteOffset, n * chunks).slice();
    return { output, times };
  } finally {
    for (const o of owned.reverse()) o.close();
  }
}

if (import.meta.main) {
  const rows = 1024, d = 4096, chunks = 8;
  let seed = 7;
  const rand = (): number => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
  const input = Float32Array.from({ length: chunks * rows * d }, rand);
  const weight = Float32Array.from({ length: d }, () => 1 + rand() / 4);
  const bias = Float32Array.from({ length: d }, () => rand() / 4);
  using dev = Device.open();
  await loadKernels(dev);
  console.log(`backend: ${dev.backend} (${dev.name})`);
  runPipeline(dev, input.subarray(0, 2 * rows * d), weight, bias, { rows, d, chunks: 2 }); // warm-up
  const { output, times } = runPipeline(dev, input, weight, bias, { rows, d, chunks, repeats: 8 });
  const ref = cpuNormForward({ kind: "layer", rows: chunks * rows, d, x: input, xStride: d, weight, bias, eps: 1e-5 });
  let err = 0;
  for (let i = 0; i < output.length; i++) err = Math.max(err, Math.abs(output[i] - ref.y[i]));
  const f = (v: number): string => v.toFixed(3);
  console.log(`${chunks} chunks of ${rows}×${d} f32: total ${f(times.totalMs)} ms, parts ${f(times.sumMs)} ms ` +
    `(uploads ${f(times.uploadMs.reduce((a, b) => a + b))}, compute ${f(times.computeMs.reduce((a, b) => a + b))}), ` +
    `overlap saved ${f(times.sumMs - times.totalMs)} ms; max abs error ${err.toExponential(2)}`);
}
