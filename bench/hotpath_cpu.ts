/**
 * Host (JS) cost of the norm hot path without a GPU: layerNorm / rmsNorm with `out`, bf16, through the real GPU
 * code path of ops/norm.ts (validation, plan cache, prepared kernel, argument block, Kernel.launch) against a
 * FAKE CUDA driver whose launch does nothing. What it measures is what JS adds on top of cuLaunchKernel (on
 * the H200 the bare launch from JS is ~3.8 µs, like C's): N = 200 000 calls per case, the best of 5 rounds,
 * in ns per call. A micro-benchmark, not a test: numbers depend on the machine.
 *
 *   deno run -A bench/hotpath_cpu.ts [--n 200000] [--json out.json]       bun bench/hotpath_cpu.ts ...
 *
 * fakeCudaDevice() is also used by tests/hotpath.test.ts: a CPU device (host buffers, CPU streams) that says
 * it is CUDA on an H200-like device and whose driver records launches (and fails on any other call).
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import { Device, layerNorm, rmsNorm, type Tensor } from "../mod.ts";
import { DisposedError, Module, Stream } from "../gpu.ts";
import type { DeviceInfo, Driver } from "../runtime/driver.ts";

/** DeviceInfo of an H200 as the CUDA driver reports it. */
export const FAKE_H200: DeviceInfo = {
  ordinal: 0,
  name: "fake NVIDIA H200",
  arch: "sm_90",
  computeCapability: [9, 0],
  multiprocessors: 132,
  totalMemory: 150_000_000_000,
  warpSize: 32,
  maxThreadsPerBlock: 1024,
  maxBlockDim: [1024, 1024, 64],
  maxGridDim: [2 ** 31 - 1, 65535, 65535],
  maxSharedPerBlock: 49152,
  maxSharedPerBlockOptin: 232448,
  l2CacheBytes: 62_914_560,
};

/** One recorded launch: the kernel handle, grid/block/shared, stream handle and the parameter-array address. */
export interface FakeLaunch {
  fn: bigint;
  /** The kernel's name (as given to moduleFunction). */
  kernel: string;
  grid: [number, number, number];
  block: [number, number, number];
  shared: number;
  stream: bigint;
  params: bigint;
  cluster: number;
  /** Programmatic dependent launch asked for (launchEx). */
  dependent: boolean;
  /** What opts.snapshot read from the parameter array at launch time (the block is rewritten by later launches). */
  args?: unknown;
}

/**
 * A CPU device that takes the GPU path of the ops: backend "cuda", H200 limits, and a fake driver for module
 * loading, kernel attributes and launches (`record: true` keeps each launch in `launches`; else launch does
 * nothing). Tensors, buffers and streams are CPU ones (ptr = 0n + offset bytes, stream handle 0n), made by
 * `setup` before the device turns "CUDA" (the fake allocates nothing).
 */
export function fakeCudaDevice<T>(
  setup: (dev: Device) => T,
  opts: { record?: boolean; strict?: boolean; snapshot?: (params: bigint) => unknown; info?: DeviceInfo } = {},
): { dev: Device; made: T; launches: FakeLaunch[]; driver: Driver } {
  const dev = Device.open({ backend: "cpu", sanityCheck: false });
  dev.stream; // the default stream, made while the device is still a CPU one
  const made = setup(dev); // tensors and streams: CPU ones, made before the fake goes in
  const launches: FakeLaunch[] = [];
  const record = opts.record ?? false, snapshot = opts.snapshot;
  let nextHandle = 0x1000n;
  const kernelNames = new Map<bigint, string>();
  const fake: Partial<Driver> = {
    backend: "cuda",
    streamCreate: () => ++nextHandle, // e.g. a fresh default stream after the old one was closed
    streamDestroy: () => {},
    moduleLoad: () => ++nextHandle,
    moduleUnload: () => {},
    moduleFunction: (_module, name) => {
      kernelNames.set(++nextHandle, name);
      return nextHandle;
    },
    kernelAttribute: (_fn, a) => (a === "maxThreadsPerBlock" ? 1024 : a === "maxDynamicSharedBytes" ? 49152 : 0),
    setKernelMaxDynamicShared: () => {},
    allowNonPortableClusters: () => {},
    // Resident clusters as if one CTA fitted per SM (one cluster fewer for a vector-only `*full` kernel, so that tests
    // tell the two variants' grids apart): what Kernel.activeClusters hands through.
    activeClusters: (fn, _threads, _shared, cluster) =>
      Math.floor((opts.info ?? FAKE_H200).multiprocessors / cluster) - (kernelNames.get(fn)?.includes("full_") ? 1 : 0),
    launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params) {
      fake.launchEx!(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 1, false);
    },
    launchEx(fn, gx, gy, gz, bx, by, bz, shared, stream, params, cluster, dependent) {
      if (record) launches.push({ fn, kernel: kernelNames.get(fn)!, grid: [gx, gy, gz], block: [bx, by, bz], shared, stream, params, cluster, dependent, args: snapshot?.(params) });
    },
  };
  // strict (default): any other driver call fails loudly; the benchmark uses the plain object (no Proxy trap per call).
  const driver = opts.strict === false ? fake as Driver : new Proxy(fake as Driver, {
    get(t, k) {
      if (k in t) return t[k as keyof Driver];
      throw new Error(`fake CUDA driver: unexpected call ${String(k)}`);
    },
  });
  Object.defineProperty(dev, "backend", { value: "cuda" });
  Object.defineProperty(dev, "info", { value: opts.info ?? FAKE_H200 });
  // Like the real getter: refuses once the device is closed, then "activates" (here: nothing to do).
  Object.defineProperty(dev, "activeDriver", {
    get: () => {
      if (dev.closed) throw new DisposedError("Device(cuda:0)");
      return driver;
    },
  });
  // The real loadModule and createStream release through the (absent) context: these release through the fake.
  Object.defineProperty(dev, "loadModule", {
    value: (image: Uint8Array) => {
      const h = driver.moduleLoad(image);
      return new Module(dev, h, () => driver.moduleUnload(h));
    },
  });
  Object.defineProperty(dev, "createStream", {
    value: () => {
      const h = driver.streamCreate();
      return new Stream(dev, h, () => driver.streamDestroy(h));
    },
  });
  return { dev, made, launches, driver };
}

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
  const { dev, made } = fakeCudaDevice((dev) => ({
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
      // the last call with its weight (ops/norm.ts keeps one per weight; before 2026-12-03 only the last call, and
      // these were validated in full: 450-550 ns per call under Bun, 650-730 under Deno).
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
