/**
 * Issue 7, leaks: 10 000 create/dispose cycles of each native resource kind (device buffers, pinned host memory,
 * streams, events, modules, and tensors through the norm op) must bring the device's free memory, the process's
 * resident set and the device's live-resource count back to where they were.
 *
 * Tolerances (stated once): device free memory within 2 MiB (the driver's allocation granularity) and host RSS
 * growth at most 64 MiB (JS garbage that has not been collected yet; one leaked 64 KiB pinned buffer per cycle
 * would be 625 MiB, one leaked stream or module per cycle shows in device memory or the live count).
 * A warm-up of 200 cycles first, so one-time costs (driver pools, JIT-free module loader, caches) are in the baseline.
 */
import assert from "node:assert/strict";
import process from "node:process";
import { Device, layerNorm, loadKernels } from "../../mod.ts";
import { gpuTest } from "../fixtures/helpers.ts";
import { tinyFatbin } from "../fixtures/tiny_module.ts";

const MiB = 1 << 20;
const CYCLES = 10_000, WARMUP = 200;
const DEVICE_TOLERANCE = 2 * MiB, RSS_TOLERANCE = 64 * MiB;

/** Collects garbage where the runtime lets a test do it (Bun always; Deno/V8 only with --expose-gc). */
function collect(): void {
  const g = globalThis as { Bun?: { gc(sync: boolean): void }; gc?: () => void };
  if (g.Bun) g.Bun.gc(true);
  else g.gc?.();
}

gpuTest(`leaks: ${CYCLES} create/dispose cycles of each resource kind leave device memory, host RSS and live count at baseline`, async () => {
  using dev = Device.open({ backend: "cuda", sanityCheck: false });
  await loadKernels(dev);
  const image = tinyFatbin();
  using x = dev.tensor(Float32Array.from({ length: 8 * 512 }, (_, i) => Math.sin(i)), [8, 512]);
  const kinds: [string, (i: number) => void][] = [
    ["device buffer", (i) => {
      using b = dev.alloc(4096 * (1 + (i % 64))); // 4 KiB to 256 KiB
      if (i % 500 === 0) b.fill(1);
    }],
    ["pinned buffer", (i) => {
      using p = dev.pinned(64 * 1024);
      p.bytes[i % 1024] = 1; // touch it: the pages are resident
    }],
    ["stream", () => {
      using s = dev.createStream();
      void s.handle;
    }],
    ["event", (i) => {
      using e = dev.createEvent({ timing: i % 2 === 0 });
      e.record(dev.stream);
    }],
    ["module", () => {
      using m = dev.loadModule(image);
      m.kernel("nk_tiny", ["ptr", "i32"]);
    }],
    ["tensor (layerNorm output)", () => {
      using _y = layerNorm(x); // disposed at the end of the block: the cycle under test
    }],
  ];
  const rows: string[] = [];
  for (const [name, cycle] of kinds) {
    for (let i = 0; i < WARMUP; i++) cycle(i);
    dev.synchronize();
    collect();
    const free0 = dev.memoryInfo().free, rss0 = process.memoryUsage().rss, live0 = dev.owner.liveCount;
    const t0 = performance.now();
    for (let i = 0; i < CYCLES; i++) cycle(i);
    dev.synchronize();
    collect();
    const free1 = dev.memoryInfo().free, rss1 = process.memoryUsage().rss, live1 = dev.owner.liveCount;
    const ms = performance.now() - t0;
    rows.push(`# ${name.padEnd(26)} ${(ms / CYCLES * 1000).toFixed(1).padStart(7)} µs/cycle  device free Δ ${free0 - free1} B  RSS Δ ${((rss1 - rss0) / MiB).toFixed(1)} MiB  live ${live0}→${live1}`);
    assert.equal(live1, live0, `${name}: live resources`);
    assert.ok(Math.abs(free0 - free1) <= DEVICE_TOLERANCE, `${name}: device free memory moved by ${free0 - free1} bytes`);
    assert.ok(rss1 - rss0 <= RSS_TOLERANCE, `${name}: RSS grew by ${((rss1 - rss0) / MiB).toFixed(1)} MiB`);
  }
  console.log(rows.join("\n"));
});
