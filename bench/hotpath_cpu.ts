/**
 * Host (JS) cost of the norm hot path without a GPU: layerNorm / rmsNorm with `out`, bf16, through the real GPU
 * code path of ops/norm.ts (validation, plan cache, prepared kernel, argument block, Kernel.launch) against a
 * FAKE CUDA driver whose launch does nothing. What it measures is what JS adds on top of cuLaunchKernel (on
 * the H200 the bare launch from JS is ~3.8 µs, like C's): N = 200 000 calls per case, the best of 5 rounds,
 * in ns per call. A micro-benchmark, not a test: numbers depend on the machine.
 *
 *   deno run -A bench/hotpath_cpu.ts [--n 200000] [--json out.json]       bun bench/hotpath_cpu.ts ...
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { layerNorm, rmsNorm, type Tensor } from "../mod.ts";
import type { Stream } from "../gpu.ts";
import { fakeCudaDevice } from "../tests/fixtures/fake_cuda.ts";


/** n seeded values in [lo, hi). */
function randoms(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * (hi - lo);
  return out;
}

if (import.meta.main) {
  const runtime = "Deno" in globalThis ? "deno" : "bun";
  const arg = (name: string): string | undefined => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const N = Number(arg("--n") ?? 200_000), ROUNDS = 5;
  const CASES = [[8, 4096], [1, 8192]];
  const { dev, made } = await fakeCudaDevice((dev) => ({
    stream: dev.createStream(),
    tensors: CASES.map(([rows, d]) => ({
      rows,
      d,
      x: dev.tensor(randoms(rows * d, 1, -2, 2), [rows, d], { dtype: "bf16" }),
      w: dev.tensor(randoms(d, 2, 0.5, 1.5), [d], { dtype: "bf16" }),
      w2: dev.tensor(randoms(d, 4, 0.5, 1.5), [d], { dtype: "bf16" }),
      layers: Array.from({ length: 32 }, (_, i) => dev.tensor(randoms(d, 10 + i, 0.5, 1.5), [d], { dtype: "bf16" })),
      b: dev.tensor(randoms(d, 3), [d], { dtype: "bf16" }),
      y: dev.empty([rows, d], { dtype: "bf16" }),
    })),
  }), { strict: false });
  const stream: Stream = made.stream;
  const results: { op: string; rows: number; d: number; ns_per_call: number; rounds_ns: number[] }[] = [];
  for (const { rows, d, x, w, w2, b, y, layers } of made.tensors) {
    let flip = false, layer = 0;
    const toggle = (): boolean => (flip = !flip);
    const ops: [string, () => Tensor][] = [
      ["rmsNorm", () => rmsNorm(x, { weight: w, out: y, stream })],
      ["layerNorm", () => layerNorm(x, { weight: w, bias: b, out: y, stream })],
      // Two weights taking turns (two norms of a layer): every call differs from the previous one; each repeats
      // the last call with its weight (ops/norm.ts keeps one per weight; with only the last call remembered these
      // were validated in full: 450-550 ns per call under Bun, 650-730 under Deno).
      ["rmsNorm-alternating-weight", () => rmsNorm(x, { weight: toggle() ? w : w2, out: y, stream })],
      ["layerNorm-alternating-weight", () => layerNorm(x, { weight: toggle() ? w : w2, bias: b, out: y, stream })],
      // A 32-layer model's norms, one weight per layer, in turn.
      ["rmsNorm-32-layer-weights", () => rmsNorm(x, { weight: layers[layer = (layer + 1) & 31], out: y, stream })],
    ];
    for (const [name, op] of ops) {
      for (let i = 0; i < 20_000; i++) op(); // warm-up: kernel, plan, JIT
      const rounds: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const t0 = performance.now();
        for (let i = 0; i < N; i++) op();
        rounds.push(((performance.now() - t0) * 1e6) / N);
      }
      const best = Math.min(...rounds);
      results.push({ op: name, rows, d, ns_per_call: best, rounds_ns: rounds.map((v) => Math.round(v)) });
      console.log(
        `hotpath_cpu runtime=${runtime} op=${name} rows=${rows} d=${d} ns_per_call=${best.toFixed(0)} ` +
          `rounds=[${rounds.map((v) => v.toFixed(0)).join(", ")}] n=${N}`,
      );
    }
    for (const t of [x, w, w2, b, y]) t.close();
  }
  // The same loop with a bare prepared-kernel launch would be the floor; what the op adds is the difference.
  const json = arg("--json");
  if (json) writeFileSync(json, JSON.stringify({ runtime, n: N, results }, null, 2));
  dev.close();
}
