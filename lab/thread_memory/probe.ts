/**
 * Where the free device memory goes when Workers open and close Devices on a context this thread keeps alive:
 * free memory after each step — this thread's open, its own loadKernels and norms (the same shapes the workers
 * run), then two rounds of workers (tests/fixtures/norm_worker.ts). A one-time drop that the second round does
 * not repeat is context state grown on first use, not a per-Device leak.
 *
 *   deno run -A --no-check lab/thread_memory/probe.ts   |   bun lab/thread_memory/probe.ts
 */
import { Device, layerNorm, loadKernels, rmsNorm } from "../../mod.ts";
import type { NormJob, NormJobResult } from "../../tests/fixtures/norm_worker.ts";

const here = Device.open({ backend: "cuda", sanityCheck: false });
let last = here.memoryInfo().free;
function mark(step: string) {
  const free = here.memoryInfo().free;
  console.log(`${step.padEnd(44)} free ${free}  change ${free - last}`);
  last = free;
}
mark("open");

function round(n: number, iterations: number): Promise<NormJobResult[]> {
  return Promise.all(Array.from({ length: n }, (_, i) =>
    new Promise<NormJobResult>((resolve, reject) => {
      const w = new Worker(new URL("../../tests/fixtures/norm_worker.ts", import.meta.url).href, { type: "module" });
      w.onmessage = (e: MessageEvent<NormJobResult>) => {
        if (e.data.ready) return w.postMessage({ id: i + 1, backend: "cuda", iterations } satisfies NormJob);
        w.terminate();
        e.data.error ? reject(new Error(e.data.error)) : resolve(e.data);
      };
      w.onerror = (e) => reject(new Error(e.message));
    })));
}

const g = globalThis as { Deno?: { args: string[] }; process?: { argv: string[] } };
const mode = g.Deno?.args[0] ?? g.process?.argv[2] ?? "warm";
if (mode === "warm") {
  await loadKernels(here);
  mark("loadKernels here");
  for (const d of [64, 256, 1000, 4096]) {
    for (const dtype of ["f32", "bf16", "f16"] as const) {
      using x = here.tensor(new Float32Array(13 * d).map((_, i) => Math.sin(i)), [13, d], { dtype });
      using w = here.tensor(new Float32Array(d).fill(1), [d]), b = here.tensor(new Float32Array(d).fill(0), [d]);
      using y1 = layerNorm(x, { weight: w, bias: b });
      using y2 = rmsNorm(x, { weight: w });
      y1.readSync(), y2.readSync();
    }
  }
  mark("norms here (every worker shape)");
}
await round(3, 4);
mark("workers round 1 (3 workers)");
await round(3, 4);
mark("workers round 2 (3 workers)");
await round(1, 1);
mark("workers round 3 (1 worker)");
here.close();
