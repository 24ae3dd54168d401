/**
 * Small-batch latency of the norms: rows ∈ {1, 8, 64} × D ∈ {2048, 4096, 8192}, bf16 (x, y, γ, β), rmsNorm
 * and layerNorm, through the public ops with `out` (the hot path), on one non-blocking stream:
 *
 * - eager_host_us: host time of one call (median of N, each timed alone; the stream is synchronized every
 *   256 calls outside the timed region, as in bench/launch.ts and bench/latency_c.c). It includes one reading
 *   of the clock, which costs far more from JS than from C (process.hrtime.bigint: 0.1–0.3 µs, clock_gettime
 *   in C: tens of ns), so also:
 * - eager_batch_us: host time per call of batches of BATCH calls timed as one interval (median over batches):
 *   the clock's cost divided by BATCH; clock_us: the median of an empty interval, for reference;
 * - eager_device_us: device time per op of N back-to-back calls (events around them, divided by N);
 * - eager_sync_us: one call plus Stream.synchronize (median): the end-to-end latency of a lone op;
 * - graph_host_us / graph_device_us: a captured graph of 100 calls replayed, host time of exec.launch()
 *   and device time of a replay, both divided by 100 (amortized per op).
 *
 * --cases FILE writes each case's launch (kernel, grid, block, shared, tpr, nv, prefetch, dependent) for bench/latency_c,
 * so that the C program makes exactly the same launches over the same fatbin.
 * --pdl off turns programmatic dependent launch off (setDependentLaunch; on by default on sm_90), to measure
 * what it gains: run once with each and compare.
 *
 *   deno run -A bench/latency.ts [--json out.json] [--cases cases.txt] [--pdl on|off]      bun bench/latency.ts ...
 *   deno run -A bench/latency.ts --compare latency-deno.json latency-c.json     (the table, from saved runs)
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { setDependentLaunch, loadKernels } from "../mod.ts";
import { openCuda } from "./open_cuda.ts";
import { gridCases } from "./latency_grid.ts";
import { planNorm } from "../ops/plan.ts";

const N = 2000, SYNC_EVERY = 256, N_SYNC = 300, GRAPH_OPS = 100, REPLAYS = 200, BATCH = 16; // SYNC_EVERY % BATCH == 0
const runtime = "Deno" in globalThis ? "deno" : "bun";
const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};

const median = (a: Float64Array | number[]): number => {
  const s = Float64Array.from(a).sort();
  return s[Math.floor(s.length / 2)];
};
const nowUs = (): number => Number(process.hrtime.bigint()) / 1000;

// --compare ts.json c.json: print TS against C per case (the targets: eager within 1.1× of C,
// graph replay ≤ 3 µs per op amortized) and exit.
const compare = process.argv.indexOf("--compare");
if (compare > 0) {
  const { readFileSync } = await import("node:fs");
  type Row = {
    kind: string; rows: number; d: number; eager_host_us: number; eager_batch_us?: number; eager_device_us: number; eager_sync_us: number;
    graph_host_us: number; graph_device_us: number;
  };
  const load = (f: string): { runtime: string; results: Row[] } => JSON.parse(readFileSync(f, "utf8"));
  const ts = load(process.argv[compare + 1]), c = load(process.argv[compare + 2]);
  const f = (v: number, p = 2): string => v.toFixed(p).padStart(7);
  console.log(
    `kind  rows     d | ${ts.runtime} host  C host  ratio | batched: ${ts.runtime}   C  ratio | ${ts.runtime}+sync  C+sync | graph ${ts.runtime} host/dev µs/op | graph C host/dev`,
  );
  for (const t of ts.results) {
    const k = c.results.find((r) => r.kind === t.kind && r.rows === t.rows && r.d === t.d);
    if (!k) continue;
    console.log(
      `${t.kind.padEnd(5)} ${String(t.rows).padStart(4)} ${String(t.d).padStart(5)} | ${f(t.eager_host_us)} ${f(k.eager_host_us)} ${f(t.eager_host_us / k.eager_host_us)} |` +
        ` ${f(t.eager_batch_us ?? NaN)} ${f(k.eager_batch_us ?? NaN)} ${f((t.eager_batch_us ?? NaN) / (k.eager_batch_us ?? NaN))} |` +
        ` ${f(t.eager_sync_us)} ${f(k.eager_sync_us)} | ${f(t.graph_host_us, 3)} ${f(t.graph_device_us)} | ${f(k.graph_host_us, 3)} ${f(k.graph_device_us)}`,
    );
  }
  process.exit(0);
}

using dev = openCuda("bench/latency.ts");
await loadKernels(dev);
const pdlArg = arg("--pdl") ?? "on";
if (pdlArg !== "on" && pdlArg !== "off") throw new Error(`--pdl on|off, not ${pdlArg}`);
const dependent = setDependentLaunch(dev, pdlArg === "on");
console.log(`# ${runtime}, programmatic dependent launch ${dependent ? "on" : "off"}`);
using stream = dev.createStream();
using start = dev.createEvent(), end = dev.createEvent();
const results: Record<string, unknown>[] = [];
const cases: string[] = [];

for (const { kind, d, rows, op } of gridCases(dev)) {
  for (let i = 0; i < 500; i++) op(stream); // warm-up: module, plan cache, clocks
  stream.synchronize();

  const host = new Float64Array(N);
  for (let i = 0; i < N; i++) {
    const t0 = nowUs();
    op(stream);
    host[i] = nowUs() - t0;
    if ((i + 1) % SYNC_EVERY === 0) stream.synchronize();
  }
  stream.synchronize();
  const batch = new Float64Array(Math.floor(N / BATCH));
  for (let i = 0; i < batch.length; i++) {
    const t0 = nowUs();
    for (let j = 0; j < BATCH; j++) op(stream);
    batch[i] = (nowUs() - t0) / BATCH;
    if (((i + 1) * BATCH) % SYNC_EVERY === 0) stream.synchronize();
  }
  stream.synchronize();
  const clock = new Float64Array(1000);
  for (let i = 0; i < clock.length; i++) {
    const t0 = nowUs();
    clock[i] = nowUs() - t0;
  }

  start.record(stream);
  for (let i = 0; i < N; i++) op(stream);
  end.record(stream);
  end.synchronize();
  const eagerDevice = (end.elapsedSince(start) * 1000) / N;

  const sync = new Float64Array(N_SYNC);
  for (let i = 0; i < N_SYNC; i++) {
    const t0 = nowUs();
    op(stream);
    stream.synchronize();
    sync[i] = nowUs() - t0;
  }

  using graph = stream.capture(() => {
    for (let i = 0; i < GRAPH_OPS; i++) op(stream);
  });
  using exec = graph.instantiate();
  exec.launch(stream);
  stream.synchronize();
  const gHost = new Float64Array(REPLAYS);
  for (let i = 0; i < REPLAYS; i++) {
    const t0 = nowUs();
    exec.launch(stream);
    gHost[i] = nowUs() - t0;
    if ((i + 1) % 4 === 0) stream.synchronize(); // 400 queued launches at most: a full queue would block the timed call
  }
  stream.synchronize();
  start.record(stream);
  for (let i = 0; i < REPLAYS; i++) exec.launch(stream);
  end.record(stream);
  end.synchronize();
  const graphDevice = (end.elapsedSince(start) * 1000) / (REPLAYS * GRAPH_OPS);

  const r = {
    runtime, kind, rows, d, dtype: "bf16", dependent_launch: dependent,
    eager_host_us: median(host),
    eager_batch_us: median(batch),
    clock_us: median(clock),
    eager_device_us: eagerDevice,
    eager_sync_us: median(sync),
    graph_host_us: median(gHost) / GRAPH_OPS,
    graph_device_us: graphDevice,
  };
  results.push(r);
  console.log(
    `${runtime} ${kind.padEnd(5)} rows=${String(rows).padStart(2)} d=${d}: eager host ${r.eager_host_us.toFixed(2)} µs ` +
      `(batches of ${BATCH}: ${r.eager_batch_us.toFixed(2)} µs/call, clock ${r.clock_us.toFixed(3)} µs), ` +
      `device ${eagerDevice.toFixed(2)} µs/op, +sync ${r.eager_sync_us.toFixed(2)} µs; graph host ${r.graph_host_us.toFixed(3)} µs/op, ` +
      `device ${graphDevice.toFixed(2)} µs/op`,
  );

  const p = planNorm(
    { kind, rows, d, inputDtype: "bf16", outputDtype: "bf16", paramDtype: "bf16" },
    { maxGridX: dev.info.maxGridDim[0], maxThreadsPerBlock: dev.info.maxThreadsPerBlock, warpSize: dev.info.warpSize, ccMajor: dev.info.computeCapability[0], multiprocessors: dev.info.multiprocessors },
  );
  if (!("plan" in p)) throw new Error(p.unsupported);
  const q = p.plan;
  cases.push([kind, rows, d, q.kernel, q.grid[0], q.block[0], q.sharedBytes, q.cluster, q.tpr, q.nv, q.prefetch, dependent ? 1 : 0].join(" "));
}

const json = arg("--json");
if (json) writeFileSync(json, JSON.stringify({ runtime, device: dev.name, results }, null, 1));
const casesFile = arg("--cases");
if (casesFile) writeFileSync(casesFile, cases.join("\n") + "\n");
