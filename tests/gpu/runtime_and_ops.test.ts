/**
 * GPU tests: the runtime and the norms on a real CUDA device. Skipped, with the reason printed and in each
 * test's name, when there is none (CI). Run on the GPU host by scripts/gpu-check.sh under Deno and Bun.
 */
import assert from "node:assert/strict";
import { cpuNormForward, Device, GpuError, layerNorm, loadKernels, rmsNorm } from "../../mod.ts";
import {
  ArgumentError,
  imageChoice,
  kernelImage,
  launch,
  LaunchConfig,
  NORM_BWD_KERNELS,
  NORM_KERNELS,
} from "../../gpu.ts";
import * as ptxPackage from "../../packages/ptx/mod.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";
import { scaleComputes } from "../fixtures/scale_check.ts";

const MiB = 1 << 20;
const NAN_BITS = 0x7fc00000;
const SCALE_ARGS = ["ptr", "ptr", "f32", "i64"] as const;

gpuTest("device: name, compute capability, SMs, memory, limits", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const i = dev.info;
  console.log(
    `# ${i.name} ${i.arch} SMs=${i.multiprocessors} mem=${(i.totalMemory / 2 ** 30).toFixed(1)} GiB ` +
      `smemOptin=${i.maxSharedPerBlockOptin} L2=${i.l2CacheBytes}`,
  );
  assert.equal(dev.backend, "cuda");
  assert.ok(i.name.length > 0);
  assert.ok(i.computeCapability[0] >= 8, "sm_80 or newer");
  assert.equal(i.arch, `sm_${i.computeCapability[0]}${i.computeCapability[1]}`);
  assert.ok(i.multiprocessors > 0 && i.totalMemory > 2 ** 30 && i.warpSize === 32);
  assert.ok(i.maxSharedPerBlockOptin > i.maxSharedPerBlock);
  assert.equal(Device.open().backend, "cuda", "auto picks CUDA when a device exists");
});

gpuTest("memory: write/read round trip with offsets, fill, fill32, device-to-device copy", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using buf = dev.alloc(4 * MiB);
  const src = new Uint8Array(randoms(MiB / 4, 1).buffer); // 1 MiB of random bytes
  buf.write(src, { offset: 12345 });
  const back = new Uint8Array(MiB);
  buf.read(back, { offset: 12345 });
  assert.deepEqual(back, src);
  buf.fill(0xab);
  const b8 = new Uint8Array(100);
  buf.read(b8, { offset: 77 });
  assert.ok(b8.every((v) => v === 0xab));
  buf.fill32(NAN_BITS);
  const f = new Float32Array(64);
  buf.read(f);
  assert.ok(f.every(Number.isNaN));
  using other = dev.alloc(MiB);
  other.write(src);
  buf.copyFrom(other, { offset: 4096 });
  const c = new Uint8Array(MiB);
  buf.read(c, { offset: 4096 });
  assert.deepEqual(c, src);
  assert.throws(() => buf.read(new Uint8Array(16), { offset: 4 * MiB - 8 }), ArgumentError);
});

gpuTest("modules: this GPU's images (kernelImage) hold every kernel of NORM_KERNELS and NORM_BWD_KERNELS", async () => {
  using dev = Device.open({ backend: "cuda" });
  console.log(
    `# ${dev.info.name}: compute capability ${dev.info.computeCapability.join(".")}, image ${imageChoice(dev).target}`,
  );
  for (const [kind, names] of [["norm", NORM_KERNELS], ["backward", NORM_BWD_KERNELS]] as const) {
    using mod = dev.loadModule(await kernelImage(dev, { images: ptxPackage, kind }));
    for (const name of names) {
      const k = mod.kernel(name, []);
      assert.ok(k.maxThreadsPerBlock >= 256, `${name}: max threads ${k.maxThreadsPerBlock}`);
      assert.equal(k.attribute("staticSharedBytes") >= 0, true);
    }
  }
});

gpuTest(
  "modules: this GPU's own image loads; scale_f32 computes y = 2x (the PTX: tests/gpu/ptx_jit.test.ts)",
  async () => {
    using dev = Device.open({ backend: "cuda" });
    scaleComputes(dev, "own image", await kernelImage(dev));
  },
);

gpuTest("a kernel of a closed module refuses attribute/occupancy/launch with DisposedError", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const mod = dev.loadModule(await kernelImage(dev));
  const k = mod.kernel("scale_f32", SCALE_ARGS);
  mod.close();
  assert.throws(() => k.attribute("registers"), /closed/);
  assert.throws(() => k.occupancy(256), /closed/);
  using x = dev.alloc(1024);
  assert.throws(() => launch(dev.stream, new LaunchConfig({ grid: [1], block: [32] }), k, x, x, 2, 1), /closed/);
});

gpuTest("launch checks: limits, argument count and types are rejected before the driver sees them", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using mod = dev.loadModule(await kernelImage(dev));
  const k = mod.kernel("scale_f32", SCALE_ARGS);
  using x = dev.alloc(1024);
  assert.throws(() => launch(dev.stream, new LaunchConfig({ grid: [1], block: [2048] }), k, x, x, 2, 1), /block/);
  assert.throws(
    () => launch(dev.stream, new LaunchConfig({ grid: [2 ** 31], block: [32] }), k, x, x, 2, 1),
    /grid\[0\]/,
  );
  assert.throws(
    () => launch(dev.stream, new LaunchConfig({ grid: [1], block: [32], sharedBytes: 10 * MiB }), k, x, x, 2, 1),
    /sharedBytes/,
  );
  assert.throws(() => launch(dev.stream, new LaunchConfig({ grid: [1], block: [32] }), k, x, x, 2), /4 values/);
  assert.throws(
    () => launch(dev.stream, new LaunchConfig({ grid: [1], block: [32] }), k, x, "y" as never, 2, 1),
    ArgumentError,
  );
  assert.throws(
    () => mod.kernel("no_such_kernel", []),
    (e: unknown) => e instanceof GpuError && e.codeName === "CUDA_ERROR_NOT_FOUND",
  );
  // More than 48 KiB of dynamic shared memory: the kernel's limit is raised, the launch works.
  const big = dev.info.maxSharedPerBlockOptin;
  launch(dev.stream, new LaunchConfig({ grid: [1], block: [256], sharedBytes: big }), k, x, x, 1, 16);
  dev.stream.synchronize();
});

gpuTest("two streams: B waits on an event recorded on A and sees A's result", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using mod = dev.loadModule(await kernelImage(dev));
  const k = mod.kernel("scale_f32", SCALE_ARGS);
  using a = dev.createStream(), b = dev.createStream();
  using done = dev.createEvent({ timing: false });
  const n = 32 * MiB; // 128 MiB of floats: A's work takes long enough that a missing wait would show
  using x = dev.alloc(n * 4), y = dev.alloc(n * 4), z = dev.alloc(n * 4);
  x.fill32(0x3f800000, { stream: a }); // 1.0f
  y.fill32(NAN_BITS, { stream: a });
  z.fill32(NAN_BITS, { stream: b });
  b.synchronize();
  const cfg = new LaunchConfig({ grid: [1024], block: [256] });
  for (let i = 0; i < 8; i++) launch(a, cfg, k, i === 0 ? x : y, y, i === 0 ? 3 : 1, n);
  done.record(a);
  b.waitEvent(done);
  z.copyFrom(y, { stream: b });
  const out = new Float32Array(n);
  z.read(out, { stream: b });
  for (let i = 0; i < n; i += 4099) if (out[i] !== 3) assert.fail(`z[${i}] = ${out[i]}`);
  assert.equal(out[n - 1], 3);
  assert.ok(a.query() && b.query());
});

gpuTest("pinned memory: async copies round-trip exactly; events time them", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const bytes = 64 * MiB;
  using src = dev.pinned(bytes), dst = dev.pinned(bytes);
  using buf = dev.alloc(bytes);
  using s = dev.createStream();
  new Float32Array(src.bytes.buffer, src.bytes.byteOffset, bytes / 4).set(randoms(bytes / 4, 3));
  dst.bytes.fill(0xff);
  using t0 = dev.createEvent(), t1 = dev.createEvent(), t2 = dev.createEvent();
  t0.record(s);
  buf.writeAsync(src, { stream: s });
  t1.record(s);
  buf.readAsync(dst, { stream: s });
  t2.record(s);
  s.synchronize();
  assert.deepEqual(dst.bytes, src.bytes);
  const up = t1.elapsedSince(t0), down = t2.elapsedSince(t1);
  console.log(
    `# pinned 64 MiB: H2D ${(bytes / up / 1e6).toFixed(1)} GB/s, D2H ${(bytes / down / 1e6).toFixed(1)} GB/s`,
  );
  assert.ok(up > 0 && down > 0);
  // Partial copies with offsets.
  buf.writeAsync(src, { stream: s, pinnedOffset: 100, offset: 8, bytes: 1000 });
  buf.readAsync(dst, { stream: s, offset: 8, pinnedOffset: 5000, bytes: 1000 });
  s.synchronize();
  assert.deepEqual(dst.bytes.subarray(5000, 6000), src.bytes.subarray(100, 1100));
});

gpuTest("out of memory raises GpuError CUDA_ERROR_OUT_OF_MEMORY, and the next allocation works", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  assert.throws(
    () => dev.alloc(dev.info.totalMemory * 2),
    (e: unknown) => e instanceof GpuError && e.codeName === "CUDA_ERROR_OUT_OF_MEMORY" && e.call === "cuMemAlloc_v2",
  );
  using ok = dev.alloc(64 * MiB);
  ok.fill(1);
  dev.synchronize();
});

gpuTest("10 000 allocate/free cycles with `using` leave free memory within 1 MiB of the start", () => {
  using dev = Device.open({ backend: "cuda", sanityCheck: false }); // the check would leave the norm module loaded
  dev.synchronize();
  const before = dev.memoryInfo().free;
  for (let i = 0; i < 10_000; i++) {
    using b = dev.alloc(1 + ((i * 7919) % (4 * MiB)));
    if (i % 1000 === 0) b.fill(0);
  }
  dev.synchronize();
  const after = dev.memoryInfo().free;
  console.log(`# free before ${before} after ${after} delta ${before - after} bytes`);
  assert.ok(Math.abs(before - after) <= MiB, `free memory moved by ${before - after} bytes`);
  assert.equal(dev.owner.liveCount, 1, "only the default stream is still live");
});

gpuTest("closing the device releases what it created; a new device works", async () => {
  const dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const buf = dev.alloc(MiB);
  const s = dev.createStream();
  dev.close();
  assert.ok(buf.closed && s.closed);
  buf.close(); // no double free, no throw
  dev.close();
  using again = Device.open({ backend: "cuda" });
  await loadKernels(again);
  using b2 = again.alloc(MiB);
  b2.fill(3);
  again.synchronize();
});

// ---- the norms against the float64 reference ----

async function checkNorm(
  kind: "layer" | "rms",
  rows: number,
  d: number,
  opts: { stride?: number; affine?: boolean; inPlace?: boolean } = {},
): Promise<number> {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const stride = opts.stride ?? d;
  const xs = randoms(rows * d, rows * 31 + d, -3, 5);
  const ws = opts.affine ? randoms(d, d + 1, 0.5, 1.5) : undefined;
  const bs = opts.affine && kind === "layer" ? randoms(d, d + 2, -1, 1) : undefined;
  using x = dev.tensor(xs, [rows, d], { rowStride: stride });
  using w = ws ? dev.tensor(ws, [d]) : undefined;
  using b = bs ? dev.tensor(bs, [d]) : undefined;
  using out = opts.inPlace ? undefined : dev.empty([rows, d], { rowStride: stride + 1 });
  out?.buffer.fill32(NAN_BITS); // poisoned: an unwritten element fails
  const eps = kind === "layer" ? 1e-5 : 1e-6;
  const target = opts.inPlace ? x : out!;
  const r = kind === "layer"
    ? layerNorm(x, { weight: w, bias: b, eps, out: target, stats: true })
    : rmsNorm(x, { weight: w, eps, out: target, stats: true });
  const y = r.y.readSync(), mean = r.mean.readSync(), rstd = r.rstd.readSync();
  r.mean.close();
  r.rstd.close();
  const ref = cpuNormForward({ kind, rows, d, x: xs, xStride: d, weight: ws, bias: bs, eps });
  let worst = 0;
  for (let i = 0; i < rows * d; i++) {
    const err = Math.abs(y[i] - ref.y[i]) / (1 + Math.abs(ref.y[i]));
    if (!(err <= 1e-5)) assert.fail(`${kind} rows=${rows} d=${d}: y[${i}] = ${y[i]}, float64 ${ref.y[i]}`);
    worst = Math.max(worst, err);
  }
  for (let r = 0; r < rows; r++) {
    assert.ok(Math.abs(rstd[r] - ref.rstd[r]) <= 1e-5 * ref.rstd[r], `rstd[${r}]`);
    if (kind === "layer") {
      assert.ok(Math.abs(mean[r] - ref.mean[r]) <= 1e-6 * (1 + Math.abs(ref.mean[r])), `mean[${r}]`);
    }
  }
  return worst;
}

gpuTest(
  "layerNorm f32 on CUDA matches float64 within 1e-5·(1+|y|): odd and large D, strides, affine, in place",
  async () => {
    const cases: [number, number, object][] = [
      [1, 1, {}],
      [7, 3, { affine: true }],
      [33, 127, { stride: 131 }],
      [100, 1000, { affine: true }],
      [64, 1024, { inPlace: true, affine: true }],
      [9, 4097, { stride: 4100, affine: true }],
      [3, 65537, {}],
      [1, 262144, { affine: true }],
      [20_000, 128, { affine: true }],
    ];
    for (const [rows, d, o] of cases) {
      const worst = await checkNorm("layer", rows, d, o);
      console.log(`# layerNorm rows=${rows} d=${d} ${JSON.stringify(o)} worst rel err ${worst.toExponential(2)}`);
    }
  },
);

gpuTest("rmsNorm f32 on CUDA matches float64 within 1e-5·(1+|y|)", async () => {
  for (
    const [rows, d, o] of [[5, 1, {}], [17, 1000, { affine: true }], [8, 8192, { stride: 8200, affine: true }]] as const
  ) {
    await checkNorm("rms", rows, d, o);
  }
});

gpuTest(
  "a NaN in a row makes that row NaN and leaves the others untouched; results are bitwise repeatable",
  async () => {
    using dev = Device.open({ backend: "cuda" });
    await loadKernels(dev);
    const rows = 64, d = 1000;
    const xs = randoms(rows * d, 9);
    xs[5 * d + 17] = NaN;
    using x = dev.tensor(xs, [rows, d]);
    const first = layerNorm(x).readSync();
    for (let r = 0; r < rows; r++) {
      const row = first.subarray(r * d, (r + 1) * d);
      if (r === 5) assert.ok(row.every(Number.isNaN), "row 5 all NaN");
      else assert.ok(row.every(Number.isFinite), `row ${r} finite`);
    }
    for (let i = 0; i < 20; i++) {
      using y = layerNorm(x);
      assert.deepEqual(new Uint32Array(y.readSync().buffer), new Uint32Array(first.buffer));
    }
  },
);

gpuTest("empty batch launches nothing; a weight of a third dtype is refused before launch", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using e = dev.tensor([], [0, 16]);
  using y = layerNorm(e);
  assert.deepEqual(y.shape, [0, 16]);
  using h = dev.tensor(randoms(16, 4), [1, 16], { dtype: "bf16" });
  using w = dev.tensor(randoms(16, 5), [16], { dtype: "f16" });
  assert.throws(() => layerNorm(h, { weight: w }), ArgumentError);
});
