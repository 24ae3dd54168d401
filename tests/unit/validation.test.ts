/**
 * Issue 7: every bad input is refused before anything is allocated, launched or written, with a typed error
 * that names the argument. One test per case. Each refused call runs under `refused()`, which poisons every
 * tensor involved first and checks afterwards that no byte changed and that the device owns no new resource.
 * The CPU backend runs the op-level cases in CI; the Kernel/launch cases need a GPU (gpuTest).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { ArgumentError, Device, DisposedError, layerNorm, rmsNorm, Tensor, loadKernels } from "../../mod.ts";
import { kernelImage, launch, LaunchConfig } from "../../gpu.ts";
import { MAX_D } from "../../ops/validate.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

const POISON = 0x7fc0dead; // a NaN with a recognizable payload

function cpu(): Device {
  return Device.open({ backend: "cpu", sanityCheck: false });
}

function bytesOf(t: Tensor): Uint8Array {
  const b = new Uint8Array(t.buffer.byteLength);
  t.buffer.read(b);
  return b;
}

/**
 * Runs `call`, which must throw `cls` naming `argument` (ArgumentError.argument, or in DisposedError's text).
 * `watched` tensors are poisoned first (except inputs, which keep their values) and must be unchanged after;
 * the device must own exactly what it owned before (nothing allocated).
 */
function refused(
  dev: Device,
  cls: typeof ArgumentError | typeof DisposedError,
  argument: string,
  call: () => unknown,
  watched: { poison?: Tensor[]; keep?: Tensor[] } = {},
): void {
  for (const t of watched.poison ?? []) {
    if (t.buffer.byteLength % 4 === 0) t.buffer.fill32(POISON);
    else t.buffer.fill(0xa5);
  }
  void dev.stream; // the default stream is created on first use: create it before counting resources
  const all = [...(watched.poison ?? []), ...(watched.keep ?? [])];
  const before = all.map(bytesOf);
  const live = dev.owner.liveCount;
  assert.throws(call, (e: unknown) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e}`);
    if (e instanceof ArgumentError) assert.equal(e.argument, argument, e.message);
    else assert.ok((e as DisposedError).what.includes(argument), `"${(e as Error).message}" names ${argument}`);
    return true;
  });
  all.forEach((t, i) => assert.deepEqual(bytesOf(t), before[i], "nothing was written"));
  assert.equal(dev.owner.liveCount, live, "nothing was allocated");
}

/** x [4, 8] with random values, an `out` of the same shape, weight/bias [8]. */
function setup(dev: Device) {
  const x = dev.tensor(randoms(32, 1), [4, 8]);
  const out = dev.empty([4, 8]);
  const w = dev.tensor(randoms(8, 2), [8]);
  const b = dev.tensor(randoms(8, 3), [8]);
  return { x, out, w, b };
}

test("weight or bias whose length is not D → ArgumentError(weight|bias)", () => {
  using dev = cpu();
  const { x, out, w } = setup(dev);
  using w7 = dev.tensor(randoms(7, 4), [7]);
  using b9 = dev.tensor(randoms(9, 5), [9]);
  using w2d = dev.tensor(randoms(16, 6), [2, 8]); // 16 elements, two rows
  refused(dev, ArgumentError, "weight", () => layerNorm(x, { weight: w7, out }), { poison: [out], keep: [x] });
  refused(dev, ArgumentError, "bias", () => layerNorm(x, { weight: w, bias: b9, out }), { poison: [out], keep: [x] });
  refused(dev, ArgumentError, "weight", () => rmsNorm(x, { weight: w2d, out }), { poison: [out], keep: [x] });
});

test("unsupported dtype: outDtype, tensor dtype, and a weight of a third dtype are refused", () => {
  using dev = cpu();
  const { x, out } = setup(dev);
  refused(dev, ArgumentError, "outDtype", () => layerNorm(x, { outDtype: "f64" as never }), { keep: [x] });
  refused(dev, ArgumentError, "dtype", () => dev.tensor([1, 2], [2], { dtype: "i8" as never }));
  refused(dev, ArgumentError, "dtype", () => dev.empty([2, 2], { dtype: "float32" as never }));
  using h = dev.tensor(randoms(32, 7), [4, 8], { dtype: "bf16" });
  using hout = dev.empty([4, 8], { dtype: "bf16" });
  using wf16 = dev.tensor(randoms(8, 8), [8], { dtype: "f16" });
  refused(dev, ArgumentError, "weight.dtype", () => layerNorm(h, { weight: wf16, out: hout }), { poison: [hout], keep: [h] });
  void out;
});

test("tensors or a stream from another device → ArgumentError naming which", () => {
  using dev = cpu(), other = cpu();
  const { x, out } = setup(dev);
  using w2 = other.tensor(randoms(8, 9), [8]);
  using out2 = other.empty([4, 8]);
  using s2 = other.createStream();
  refused(dev, ArgumentError, "weight", () => layerNorm(x, { weight: w2, out }), { poison: [out], keep: [x, w2] });
  refused(dev, ArgumentError, "bias", () => layerNorm(x, { bias: w2, out }), { poison: [out], keep: [x] });
  refused(dev, ArgumentError, "out", () => layerNorm(x, { out: out2 }), { poison: [out2], keep: [x] });
  refused(dev, ArgumentError, "stream", () => rmsNorm(x, { out, stream: s2 }), { poison: [out], keep: [x] });
});

test("out of the wrong shape or dtype → ArgumentError(out | out.dtype)", () => {
  using dev = cpu();
  const { x } = setup(dev);
  using o1 = dev.empty([4, 9]);
  using o2 = dev.empty([32]);
  using o3 = dev.empty([2, 2, 8]); // same numel, other shape
  using o4 = dev.empty([4, 8], { dtype: "f16" });
  for (const o of [o1, o2, o3]) refused(dev, ArgumentError, "out", () => layerNorm(x, { out: o }), { poison: [o], keep: [x] });
  refused(dev, ArgumentError, "out.dtype", () => layerNorm(x, { out: o4, outDtype: "f32" }), { poison: [o4], keep: [x] });
});

test("out partially overlapping x, weight or bias → ArgumentError(out); exact aliasing of x is in place and allowed", () => {
  using dev = cpu();
  using buf = dev.alloc(4 * 64);
  const xs = randoms(32, 10);
  const x = new Tensor(buf, [4, 8]);
  x.write(xs);
  const shifted = new Tensor(buf, [4, 8], { offset: 4 }); // overlaps x's second half and beyond
  refused(dev, ArgumentError, "out", () => layerNorm(x, { out: shifted }), { keep: [x] });
  // Same start, other stride: overlapping, not the same elements.
  const strided = new Tensor(buf, [4, 8], { rowStride: 9 });
  refused(dev, ArgumentError, "out", () => layerNorm(x, { out: strided }), { keep: [x] });
  // The same bytes viewed as f16: not in place (other dtype), and overlapping.
  const asHalf = new Tensor(buf, [4, 8], { dtype: "f16" });
  refused(dev, ArgumentError, "out", () => layerNorm(x, { out: asHalf }), { keep: [x] });
  // out over the weight or the bias (one row: same shape as the parameter's span).
  using pbuf = dev.alloc(4 * 16);
  const w = new Tensor(pbuf, [8]);
  const b = new Tensor(pbuf, [8], { offset: 8 });
  w.write(randoms(8, 11));
  b.write(randoms(8, 12));
  using x1 = dev.tensor(randoms(8, 13), [1, 8]);
  refused(dev, ArgumentError, "out", () => layerNorm(x1, { weight: w, bias: b, out: new Tensor(pbuf, [1, 8]) }), { keep: [x1, w] });
  refused(dev, ArgumentError, "out", () => layerNorm(x1, { weight: w, bias: b, out: new Tensor(pbuf, [1, 8], { offset: 6 }) }), { keep: [x1] });
  // Exact alias (another Tensor object over the same bytes): allowed, and equals the out-of-place result.
  using ref = layerNorm(dev.tensor(xs, [4, 8]));
  const alias = new Tensor(buf, [4, 8]);
  const y = layerNorm(x, { out: alias });
  assert.equal(y, alias);
  assert.deepEqual(x.readSync(), ref.readSync());
});

test("eps ≤ 0, NaN, ±Infinity or not a number → ArgumentError(eps)", () => {
  using dev = cpu();
  const { x, out } = setup(dev);
  for (const eps of [0, -1e-5, -0, NaN, Infinity, -Infinity, "1e-5", null]) {
    refused(dev, ArgumentError, "eps", () => layerNorm(x, { eps: eps as number, out }), { poison: [out], keep: [x] });
    refused(dev, ArgumentError, "eps", () => rmsNorm(x, { eps: eps as number, out }), { poison: [out], keep: [x] });
  }
});

test("D = 0 → ArgumentError(x)", () => {
  using dev = cpu();
  using x = dev.empty([4, 0]);
  refused(dev, ArgumentError, "x", () => layerNorm(x));
  refused(dev, ArgumentError, "x", () => rmsNorm(x));
});

test(`D above the supported maximum (${MAX_D}) → ArgumentError(x)`, () => {
  using dev = cpu();
  using x = dev.empty([1, MAX_D + 1]);
  using out = dev.empty([1, MAX_D + 1]);
  refused(dev, ArgumentError, "x", () => layerNorm(x, { out }), { poison: [out] });
});

test("rank 0 (shape []) → ArgumentError(shape); a non-tensor x → ArgumentError(x)", () => {
  using dev = cpu();
  using buf = dev.alloc(16);
  refused(dev, ArgumentError, "shape", () => dev.tensor([1], []));
  refused(dev, ArgumentError, "shape", () => dev.empty([]));
  refused(dev, ArgumentError, "shape", () => new Tensor(buf, []));
  refused(dev, ArgumentError, "x", () => layerNorm(5 as never));
  refused(dev, ArgumentError, "x", () => rmsNorm(new Float32Array(8) as never));
});

test("a row stride that breaks the contiguous last dimension → ArgumentError(rowStride)", () => {
  using dev = cpu();
  using buf = dev.alloc(4 * 64);
  refused(dev, ArgumentError, "rowStride", () => dev.empty([4, 8], { rowStride: 7 }));
  refused(dev, ArgumentError, "rowStride", () => dev.tensor(randoms(32, 14), [4, 8], { rowStride: 1 }));
  refused(dev, ArgumentError, "rowStride", () => new Tensor(buf, [4, 8], { rowStride: 4 }));
  refused(dev, ArgumentError, "rowStride", () => new Tensor(buf, [4, 8], { rowStride: 8.5 }));
});

test("a disposed tensor, buffer or stream → DisposedError naming it", () => {
  using dev = cpu();
  const { x, out, w } = setup(dev);
  const gone = dev.tensor(randoms(32, 15), [4, 8]);
  gone.close();
  refused(dev, DisposedError, "x", () => layerNorm(gone, { out }), { poison: [out] });
  w.close();
  refused(dev, DisposedError, "weight", () => layerNorm(x, { weight: w, out }), { poison: [out], keep: [x] });
  // A tensor over a buffer that was closed since.
  const buf = dev.alloc(4 * 32);
  const view = new Tensor(buf, [4, 8]);
  buf.close();
  refused(dev, DisposedError, "x", () => rmsNorm(view, { out }), { poison: [out] });
  const closedOut = dev.empty([4, 8]);
  closedOut.close();
  refused(dev, DisposedError, "out", () => layerNorm(x, { out: closedOut }), { keep: [x] });
  const s = dev.createStream();
  s.close();
  refused(dev, DisposedError, "stream", () => layerNorm(x, { out, stream: s }), { poison: [out], keep: [x] });
});

test("a tensor of a closed device → DisposedError naming its device", () => {
  using dev = cpu();
  const { out } = setup(dev);
  const other = cpu();
  const x2 = other.tensor(randoms(32, 16), [4, 8]);
  other.close();
  refused(dev, DisposedError, "x's device", () => layerNorm(x2));
  using x = dev.tensor(randoms(32, 17), [4, 8]);
  const w2 = cpu();
  const wt = w2.tensor(randoms(8, 18), [8]);
  w2.close();
  refused(dev, DisposedError, "weight's device", () => layerNorm(x, { weight: wt, out }), { poison: [out], keep: [x] });
  assert.throws(() => other.tensor([1], [1]), DisposedError);
});

test("a non-integer, negative, NaN or unsafe shape → ArgumentError(shape[i])", () => {
  using dev = cpu();
  refused(dev, ArgumentError, "shape[0]", () => dev.empty([2.5, 4]));
  refused(dev, ArgumentError, "shape[0]", () => dev.empty([-1, 4]));
  refused(dev, ArgumentError, "shape[1]", () => dev.empty([4, NaN]));
  refused(dev, ArgumentError, "shape[1]", () => dev.tensor([1, 2], [1, "2" as never]));
  refused(dev, ArgumentError, "shape[0]", () => dev.empty([2 ** 53, 1]));
  refused(dev, ArgumentError, "shape", () => dev.empty("4,8" as never));
});

test("check option that is not a boolean → ArgumentError(check); Device.open options are checked", () => {
  using dev = cpu();
  const { x, out } = setup(dev);
  refused(dev, ArgumentError, "check", () => layerNorm(x, { out, check: "yes" as never }), { poison: [out], keep: [x] });
  assert.throws(() => Device.open({ backend: "cpu", check: 1 as never }), (e: unknown) => e instanceof ArgumentError && e.argument === "check");
  assert.throws(() => Device.open({ backend: "cpu", sanityCheck: "no" as never }), (e: unknown) => e instanceof ArgumentError && e.argument === "sanityCheck");
});

test("launch configuration: zero, fractional or > 3 dims → ArgumentError; limits checked against the device", () => {
  using dev = cpu();
  const bad = (argument: string, opts: object) =>
    assert.throws(() => new LaunchConfig(opts as never), (e: unknown) => e instanceof ArgumentError && e.argument === argument);
  bad("grid", { grid: [0], block: [32] });
  bad("grid", { grid: [1, 1, 1, 1], block: [32] });
  bad("block", { grid: [1], block: [1.5] });
  bad("sharedBytes", { grid: [1], block: [32], sharedBytes: -1 });
  bad("cluster", { grid: [32], block: [32], cluster: 17 });
  bad("grid[0]", { grid: [3], block: [32], cluster: 2 });
  // The CPU "device" allows one thread in one block: the same check a GPU launch runs first.
  const cfg = new LaunchConfig({ grid: [2], block: [1] });
  assert.throws(() => cfg.validateFor(dev), (e: unknown) => e instanceof ArgumentError && e.argument === "grid[0]");
  const cfg2 = new LaunchConfig({ grid: [1], block: [1, 2] });
  assert.throws(() => cfg2.validateFor(dev), (e: unknown) => e instanceof ArgumentError && e.argument === "block[1]");
});

// ---- GPU-only: the Kernel layer (a Kernel needs a loaded module) ----

const SCALE_ARGS = ["ptr", "ptr", "f32", "i64"] as const;

/** On the GPU: y poisoned, the refused launch queues nothing, y unchanged after a synchronize. */
function refusedLaunch(dev: Device, y: { read(d: Uint8Array): void }, argument: string, call: () => void): void {
  const before = new Uint8Array(4096);
  y.read(before);
  assert.throws(call, (e: unknown) => e instanceof ArgumentError && e.argument === argument, argument);
  dev.synchronize();
  const after = new Uint8Array(4096);
  y.read(after);
  assert.deepEqual(after, before, "nothing was written");
}

gpuTest("grid or block beyond the device's limits → ArgumentError(grid[i] | block[i] | block | sharedBytes), nothing launched", async () => {
  using dev = Device.open({ backend: "cuda", sanityCheck: false });
  await loadKernels(dev);
  using mod = dev.loadModule(await kernelImage(dev));
  const k = mod.kernel("scale_f32", SCALE_ARGS);
  using x = dev.alloc(4096), y = dev.alloc(4096);
  x.fill(0x3f);
  y.fill32(POISON);
  const i = dev.info;
  const run = (cfg: object) => () => launch(dev.stream, new LaunchConfig(cfg as never), k, x, y, 2, 1024);
  refusedLaunch(dev, y, "grid[0]", run({ grid: [i.maxGridDim[0] + 1], block: [32] }));
  refusedLaunch(dev, y, "grid[1]", run({ grid: [1, i.maxGridDim[1] + 1], block: [32] }));
  refusedLaunch(dev, y, "block[0]", run({ grid: [1], block: [i.maxBlockDim[0] + 1] }));
  refusedLaunch(dev, y, "block[2]", run({ grid: [1], block: [1, 1, i.maxBlockDim[2] + 1] }));
  refusedLaunch(dev, y, "block", run({ grid: [1], block: [32, 32, 2] })); // 2048 threads > 1024
  refusedLaunch(dev, y, "sharedBytes", run({ grid: [1], block: [32], sharedBytes: i.maxSharedPerBlockOptin + 1 }));
});

gpuTest("wrong argument count or type passed to a Kernel → ArgumentError naming the kernel's arguments, nothing launched", async () => {
  using dev = Device.open({ backend: "cuda", sanityCheck: false });
  await loadKernels(dev);
  using mod = dev.loadModule(await kernelImage(dev));
  const k = mod.kernel("scale_f32", SCALE_ARGS);
  using x = dev.alloc(4096), y = dev.alloc(4096);
  y.fill32(POISON);
  const cfg = new LaunchConfig({ grid: [4], block: [256] });
  refusedLaunch(dev, y, "arguments of scale_f32", () => launch(dev.stream, cfg, k, x, y, 2));
  refusedLaunch(dev, y, "arguments of scale_f32", () => launch(dev.stream, cfg, k, x, y, 2, 1024, 5));
  refusedLaunch(dev, y, "scale_f32 argument 1", () => launch(dev.stream, cfg, k, x, "y" as never, 2, 1024));
  refusedLaunch(dev, y, "scale_f32 argument 2", () => launch(dev.stream, cfg, k, x, y, 2n as never, 1024));
  refusedLaunch(dev, y, "scale_f32 argument 3", () => launch(dev.stream, cfg, k, x, y, 2, 1.5));
  refusedLaunch(dev, y, "scale_f32 argument 0", () => launch(dev.stream, cfg, k, {} as never, y, 2, 1024));
  assert.throws(() => mod.kernel("scale_f32", ["ptr", "f16" as never]), (e: unknown) => e instanceof ArgumentError && e.argument === "argTypes[1]");
});

gpuTest("GPU ops refuse the same bad inputs before launching (out overlap, eps, other device's stream)", async () => {
  using dev = Device.open({ backend: "cuda", sanityCheck: false });
  await loadKernels(dev);
  using x = dev.tensor(randoms(4 * 1024, 19), [4, 1024]);
  using out = dev.empty([4, 1024]);
  using w = dev.tensor(randoms(1000, 20), [1000]);
  using cpuDev = cpu();
  using s = cpuDev.createStream();
  refused(dev, ArgumentError, "weight", () => layerNorm(x, { weight: w, out }), { poison: [out], keep: [x] });
  refused(dev, ArgumentError, "eps", () => layerNorm(x, { eps: NaN, out }), { poison: [out], keep: [x] });
  refused(dev, ArgumentError, "stream", () => layerNorm(x, { out, stream: s }), { poison: [out], keep: [x] });
  const shifted = new Tensor(x.buffer, [3, 1024], { offset: 512 });
  using x3 = new Tensor(x.buffer, [3, 1024]);
  refused(dev, ArgumentError, "out", () => layerNorm(x3, { out: shifted }), { keep: [x] });
});
