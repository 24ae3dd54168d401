/**
 * Host cost of one launch of a prepared kernel from TypeScript: the same kernel, arguments, stream and
 * timing method as bench/launch_c.c (so the two numbers compare): scale_f32 on 256 floats, grid 1,
 * block 256; 1000 warm-up launches; 10 000 launches each timed alone with a nanosecond clock; the stream
 * synchronized every 256 launches outside the timed region.
 *
 *   deno run -A bench/launch.ts      bun bench/launch.ts
 */
import process from "node:process";
import { launch, LaunchConfig, kernelImage } from "../gpu.ts";
import { openCuda } from "./open_cuda.ts";

const WARMUP = 1000, N = 10_000, SYNC_EVERY = 256;
const runtime = "Deno" in globalThis ? "deno" : "bun";

using dev = openCuda("bench/launch.ts");
using mod = dev.loadModule(await kernelImage(dev));
const k = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
using x = dev.alloc(1024), y = dev.alloc(1024);
using stream = dev.createStream();
const cfg = new LaunchConfig({ grid: [1], block: [256] });

for (let i = 0; i < WARMUP; i++) {
  launch(stream, cfg, k, x, y, 2, 256);
  if ((i + 1) % SYNC_EVERY === 0) stream.synchronize();
}
stream.synchronize();

const t = new Float64Array(N);
for (let i = 0; i < N; i++) {
  const t0 = process.hrtime.bigint();
  launch(stream, cfg, k, x, y, 2, 256);
  t[i] = Number(process.hrtime.bigint() - t0) / 1000;
  if ((i + 1) % SYNC_EVERY === 0) stream.synchronize();
}
stream.synchronize();
t.sort();
const pct = (p: number): number => t[Math.min(N - 1, Math.floor((p / 100) * N))];

// Launch + synchronize, 1000 times.
const s = new Float64Array(1000);
for (let i = 0; i < s.length; i++) {
  const t0 = process.hrtime.bigint();
  launch(stream, cfg, k, x, y, 2, 256);
  stream.synchronize();
  s[i] = Number(process.hrtime.bigint() - t0) / 1000;
}
s.sort();

// An empty hrtime pair, to show what the clock itself costs.
const c = new Float64Array(N);
for (let i = 0; i < N; i++) {
  const t0 = process.hrtime.bigint();
  c[i] = Number(process.hrtime.bigint() - t0) / 1000;
}
c.sort();

console.log(
  `launch_ts runtime=${runtime} median_us=${pct(50).toFixed(3)} p10_us=${pct(10).toFixed(3)} p90_us=${pct(90).toFixed(3)} ` +
    `launch_sync_median_us=${s[500].toFixed(3)} clock_overhead_median_us=${c[N / 2].toFixed(3)}`,
);
