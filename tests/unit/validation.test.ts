/**
 * Every bad input is refused before anything is allocated, launched or written, with a typed error
 * that names the argument. One test per case. Each refused call runs under `refused()`, which poisons every
 * tensor involved first and checks afterwards that no byte changed and that the device owns no new resource.
 * The CPU backend runs the op-level cases in CI; the Kernel/launch cases need a GPU (gpuTest).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ArgumentError,
  Device,
  DisposedError,
  LayerNorm,
  layerNorm,
  layerNormBackward,
  loadKernels,
  RMSNorm,
  rmsNorm,
  rmsNormBackward,
  Tensor,
} from "../../mod.ts";
import process from "node:process";
import { kernelImage, launch, LaunchConfig } from "../../gpu.ts";
import { MAX_D } from "../../ops/validate.ts";
import { NORM_KEYS } from "../../ops/norm.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";
import { fakeCudaDevice } from "../fixtures/fake_cuda.ts";
import { ffi } from "../../ffi/runtime.ts";

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
  refused(dev, ArgumentError, "weight.dtype", () => layerNorm(h, { weight: wf16, out: hout }), {
    poison: [hout],
    keep: [h],
  });
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
  for (const o of [o1, o2, o3]) {
    refused(dev, ArgumentError, "out", () => layerNorm(x, { out: o }), { poison: [o], keep: [x] });
  }
  refused(dev, ArgumentError, "out.dtype", () => layerNorm(x, { out: o4, outDtype: "f32" }), {
    poison: [o4],
    keep: [x],
  });
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
  refused(dev, ArgumentError, "out", () => layerNorm(x1, { weight: w, bias: b, out: new Tensor(pbuf, [1, 8]) }), {
    keep: [x1, w],
  });
  refused(
    dev,
    ArgumentError,
    "out",
    () => layerNorm(x1, { weight: w, bias: b, out: new Tensor(pbuf, [1, 8], { offset: 6 }) }),
    { keep: [x1] },
  );
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
  refused(dev, ArgumentError, "check", () => layerNorm(x, { out, check: "yes" as never }), {
    poison: [out],
    keep: [x],
  });
  assert.throws(
    () => Device.open({ backend: "cpu", check: 1 as never }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "check",
  );
  assert.throws(
    () => Device.open({ backend: "cpu", sanityCheck: "no" as never }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "sanityCheck",
  );
});

test("launch configuration: zero, fractional or > 3 dims → ArgumentError; limits checked against the device", () => {
  using dev = cpu();
  const bad = (argument: string, opts: object) =>
    assert.throws(
      () => new LaunchConfig(opts as never),
      (e: unknown) => e instanceof ArgumentError && e.argument === argument,
    );
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

gpuTest(
  "grid or block beyond the device's limits → ArgumentError(grid[i] | block[i] | block | sharedBytes), nothing launched",
  async () => {
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
  },
);

gpuTest(
  "wrong argument count or type passed to a Kernel → ArgumentError naming the kernel's arguments, nothing launched",
  async () => {
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
    assert.throws(
      () => mod.kernel("scale_f32", ["ptr", "f16" as never]),
      (e: unknown) => e instanceof ArgumentError && e.argument === "argTypes[1]",
    );
  },
);

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

// ---- Each test below fails without the check it is named after. ----

test("Module.load with a good weight and a bad bias → ArgumentError(bias), the weight unchanged", () => {
  using dev = cpu();
  using m = new LayerNorm(dev, 8);
  m.load({ weight: randoms(8, 4), bias: randoms(8, 5) });
  const before = m.state();
  for (const bias of [randoms(7, 6), ["1", 2, 3, 4, 5, 6, 7, 8], { int8: new Int8Array(8), scale: NaN }]) {
    assert.throws(
      () => m.load({ weight: randoms(8, 7), bias: bias as never }),
      (e: unknown) => e instanceof ArgumentError && /^bias/.test(e.argument),
    );
    assert.deepEqual(m.state(), before, "a refused load changes neither parameter");
  }
});

test("backward dx, dweight or dbias overlapping weight, mean or rstd → ArgumentError naming both", () => {
  using dev = cpu();
  const x = dev.tensor(randoms(32, 8), [4, 8]);
  const dy = dev.tensor(randoms(32, 9), [4, 8]);
  const inputs = () => ({
    w: dev.tensor(randoms(8, 10), [8]),
    mean: dev.tensor(randoms(4, 11), [4]),
    rstd: dev.tensor(randoms(4, 12).map((v) => 1 + Math.abs(v)), [4]),
  });
  for (const name of ["weight", "mean", "rstd"] as const) {
    // dx's last row and the input `name` share a buffer, and two elements: [2, 34) and [32, 32 + n).
    const buf = dev.alloc(4 * 48);
    const n = name === "weight" ? 8 : 4;
    const shared = new Tensor(buf, [n], { offset: 32 });
    const t = inputs();
    const args = { weight: t.w, mean: t.mean, rstd: t.rstd, [name === "weight" ? "weight" : name]: shared };
    shared.write(name === "weight" ? randoms(8, 13) : randoms(4, 13).map((v) => 1 + Math.abs(v)));
    const dx = new Tensor(buf, [4, 8], { offset: 2 });
    const call = () => layerNormBackward(dy, x, { mean: args.mean, rstd: args.rstd, weight: args.weight, dx });
    refused(dev, ArgumentError, "dx", call, { keep: [x, dy, shared] });
    assert.throws(call, new RegExp(`overlap with ${name}`));
    // dweight over the same input: refused too (the finalize writes it while nothing may still read it).
    const dwBuf = name === "weight" ? undefined : new Tensor(buf, [8], { offset: 28 });
    if (dwBuf) {
      refused(
        dev,
        ArgumentError,
        "dweight",
        () => layerNormBackward(dy, x, { mean: args.mean, rstd: args.rstd, weight: args.weight, dweight: dwBuf }),
        {
          keep: [shared],
        },
      );
    }
  }
  const t = inputs();
  const clear = dev.empty([4, 8]);
  assert.equal(
    layerNormBackward(dy, x, { mean: t.mean, rstd: t.rstd, weight: t.w, dx: clear }).dx,
    clear,
    "a dx clear of every input is accepted",
  );
});

test("eps whose f32 is 0 or Infinity (1e-50, 1e39), and every bad eps of a module → ArgumentError(eps)", () => {
  using dev = cpu();
  const { x, out, w } = setup(dev);
  for (const eps of [1e-50, 1e-46, 1e39, -1e-50, 3.5e38]) {
    refused(dev, ArgumentError, "eps", () => layerNorm(x, { eps, out }), { poison: [out], keep: [x] });
    refused(dev, ArgumentError, "eps", () => rmsNorm(x, { eps, weight: w, out }), { poison: [out], keep: [x, w] });
    refused(dev, ArgumentError, "eps", () => new LayerNorm(dev, 8, { eps }));
    refused(dev, ArgumentError, "eps", () => new RMSNorm(dev, 8, { eps }));
  }
  assert.throws(() => layerNorm(x, { eps: 1e-50 }), /f32/);
  // The smallest accepted: the least f32 subnormal, which the kernels get as itself.
  using y = layerNorm(x, { eps: 2 ** -149 });
  assert.ok(y.readSync().every(Number.isFinite));
});

test("a module whose d the kernels do not support → ArgumentError(d) at construction", () => {
  using dev = cpu();
  for (const d of [0, -1, 1.5, MAX_D + 1, 2 ** 40, NaN, "8"]) {
    refused(dev, ArgumentError, "d", () => new LayerNorm(dev, d as number));
    refused(dev, ArgumentError, "d", () => new RMSNorm(dev, d as number));
  }
  using ok = new RMSNorm(dev, MAX_D, { weight: false });
  assert.equal(ok.d, MAX_D);
});

/** An options object whose every property is a getter counting its reads (and answering `values[key]`). */
function countingOptions<T extends object>(values: T): { opts: T; reads: Map<string, number> } {
  const reads = new Map<string, number>();
  const opts = {} as T;
  for (const key of Object.keys(values)) {
    Object.defineProperty(opts, key, {
      enumerable: true,
      get: () => (reads.set(key, (reads.get(key) ?? 0) + 1), values[key as keyof T]),
    });
  }
  return { opts, reads };
}

function assertReadOnce(reads: Map<string, number>, keys: string[], what: string): void {
  for (const key of keys) assert.equal(reads.get(key), 1, `${what}: ${key} read ${reads.get(key) ?? 0} times`);
}

test("an options object with getters: each option read exactly once (norms, backwards, modules, tensors, Device.open)", () => {
  using dev = cpu();
  const { x, out, w, b } = setup(dev);
  const s = dev.createStream();
  const fwd = { weight: w, bias: b, eps: 1e-5, out, outDtype: "f32", stream: s, stats: false, check: false };
  for (let i = 0; i < 2; i++) { // a first call and a repeat
    const l = countingOptions(fwd);
    layerNorm(x, l.opts as never);
    assertReadOnce(l.reads, Object.keys(fwd), "layerNorm");
    const { bias: _, ...rmsOpts } = fwd;
    const r = countingOptions(rmsOpts);
    rmsNorm(x, r.opts as never);
    assertReadOnce(r.reads, Object.keys(rmsOpts), "rmsNorm");
  }
  const st = layerNorm(x, { weight: w, bias: b, stats: true });
  const dx = dev.empty([4, 8]), dw = dev.empty([8]), db = dev.empty([8]);
  const bwd = {
    mean: st.mean,
    rstd: st.rstd,
    weight: w,
    bias: b,
    dx,
    dweight: dw,
    dbias: db,
    accumulate: false,
    stream: s,
  };
  const lb = countingOptions(bwd);
  layerNormBackward(st.y, x, lb.opts);
  assertReadOnce(lb.reads, Object.keys(bwd), "layerNormBackward");
  const mo = { eps: 1e-5, weight: true, bias: true, zeroCentered: false };
  const m = countingOptions(mo);
  using mod = new LayerNorm(dev, 8, m.opts);
  assertReadOnce(m.reads, Object.keys(mo), "LayerNorm");
  const lv = countingOptions({ weight: randoms(8, 1), bias: randoms(8, 2) });
  mod.load(lv.opts);
  assertReadOnce(lv.reads, ["weight", "bias"], "load");
  const fo = countingOptions({ stream: s });
  using y = mod.forward(x, fo.opts);
  assertReadOnce(fo.reads, ["stream"], "forward");
  const to = { dtype: "f32" as const, rowStride: 8, stream: s };
  const t = countingOptions(to);
  using made = dev.tensor(randoms(32, 3), [4, 8], t.opts);
  assertReadOnce(t.reads, Object.keys(to), "dev.tensor");
  const oo = { backend: "cpu" as const, ordinal: 0, sanityCheck: false, check: false };
  const o = countingOptions(oo);
  Device.open(o.opts).close();
  assertReadOnce(o.reads, Object.keys(oo), "Device.open");
  void y, made;
});

test("an options object answering another weight or stream on a later read cannot reach the launch (fake CUDA)", async () => {
  // The weight pointer each launch was given (argument 2), read at launch time.
  const weightArg = (params: bigint) => {
    const slots = new BigUint64Array(ffi!.viewMemory(params, 3 * 8).slice(0));
    return new DataView(ffi!.viewMemory(slots[2], 8).slice(0)).getBigUint64(0, true);
  };
  const { dev, made: m, launches } = await fakeCudaDevice((d) => {
    // Views of one buffer: distinct device addresses (the fake's buffers all start at 0).
    const buf = d.alloc(4 * (16 + 64 + 16));
    const view = (offset: number, shape: number[]) => new Tensor(buf, shape, { offset });
    return {
      x: view(16, [4, 8]),
      y: view(48, [4, 8]),
      w1: view(80, [8]),
      w2: view(88, [8]),
      s1: d.createStream(),
      s2: d.createStream(),
    };
  }, { record: true, snapshot: weightArg });
  try {
    // Two reads answer w1, later ones w2; one read answers s1, later ones s2. Read more than once, the checks would
    // pass w1 on s1 and the repeat-call cache remember w2 on s2 for them.
    let weightReads = 0, streamReads = 0;
    const shifty = {
      get weight() {
        return ++weightReads <= 2 ? m.w1 : m.w2;
      },
      out: m.y,
      get stream() {
        return ++streamReads <= 1 ? m.s1 : m.s2;
      },
    };
    rmsNorm(m.x, shifty as never);
    // A plain call with w2 on s2 must launch with w2 on s2, not repeat a call validated for w1 on s1.
    rmsNorm(m.x, { weight: m.w2, out: m.y, stream: m.s2 });
    assert.equal(launches.length, 2);
    assert.deepEqual(launches.map((l) => l.stream), [m.s1.handle, m.s2.handle]);
    assert.deepEqual(launches.map((l) => l.args), [m.w1.ptr, m.w2.ptr]);
    assert.deepEqual([weightReads, streamReads], [1, 1]);
  } finally {
    dev.close();
  }
});

test("values that are not numbers → ArgumentError(values…): strings, undefined, objects, bigints", () => {
  using dev = cpu();
  const cases: [unknown, number[], string][] = [
    ["1234", [4], "values"],
    [["1", "x", undefined, {}], [4], "values[0]"],
    [[1, 2, undefined, 4], [4], "values[2]"],
    [[1, {}, 3, 4], [4], "values[1]"],
    [[1n], [1], "values[0]"],
    [new BigInt64Array(2), [2], "values"],
    [{ length: 2, 0: 1, 1: 2 }, [2], "values"],
    [null, [1], "values"],
  ];
  for (const [values, shape, argument] of cases) {
    refused(dev, ArgumentError, argument, () => dev.tensor(values as never, shape));
  }
  const t = dev.tensor([1, 2, 3, 4], [4]);
  refused(dev, ArgumentError, "values[1]", () => t.write([1, "2", 3, 4] as never), { keep: [t] });
  // NaN and Infinity are numbers, and stay (check mode is there to find them).
  using nan = dev.tensor([NaN, Infinity, -Infinity, 0], [4]);
  assert.deepEqual([...nan.readSync()], [NaN, Infinity, -Infinity, 0]);
});

test("int8 scales that are NaN, Infinity, negative, strings or overflow f32 → ArgumentError(weight.scale…)", () => {
  using dev = cpu();
  using m = new RMSNorm(dev, 4);
  m.load({ weight: randoms(4, 1) });
  const before = m.state();
  const int8 = new Int8Array([1, -2, 3, 127]);
  const cases: [unknown, string][] = [
    [[1, NaN, 1, 1], "weight.scale[1]"],
    [[Infinity, 1, 1, 1], "weight.scale[0]"],
    [[1, 1, -0.5, 1], "weight.scale[2]"],
    [[1, 1, 1, 1e39], "weight.scale[3]"],
    [[1, 1, 1, 3e36], "weight.scale[3]"], // 127 × 3e36 overflows f32
    ["1234", "weight.scale"],
    [["1", "1", "1", "1"], "weight.scale[0]"],
    [NaN, "weight.scale"],
    [-1, "weight.scale"],
    [1e37, "weight.scale"],
    [[1, 1, 1], "weight.scale"],
  ];
  for (const [scale, argument] of cases) {
    assert.throws(
      () => m.load({ weight: { int8, scale: scale as never } }),
      (e: unknown) => e instanceof ArgumentError && e.argument === argument,
      argument,
    );
    assert.deepEqual(m.state(), before);
  }
  for (const weight of [[1, 2, 3, 1e39], [1, 2, NaN, 4]]) {
    assert.throws(
      () => m.load({ weight }),
      (e: unknown) => e instanceof ArgumentError && /^weight\[\d\]$/.test(e.argument),
    );
  }
  m.load({ weight: { int8, scale: [0.5, 0.25, 0, 2] } });
  assert.deepEqual([...m.state().weight!], [0.5, -0.5, 0, 254]);
});

test("null options, a null or Proxy device, a Proxy tensor, a look-alike buffer → ArgumentError, not a raw TypeError", () => {
  using dev = cpu();
  const { x, out } = setup(dev);
  const is = (argument: string) => (e: unknown) => e instanceof ArgumentError && e.argument === argument;
  assert.throws(() => layerNorm(x, null as never), is("options"));
  assert.throws(() => rmsNorm(x, 7 as never), is("options"));
  assert.throws(() => layerNorm(new Proxy(x, {})), is("x"));
  assert.throws(() => layerNorm(x, { out: new Proxy(out, {}) }), is("out"));
  assert.throws(() => new RMSNorm(dev, 8, null as never), is("options"));
  assert.throws(() => new RMSNorm(null as never, 8), is("device"));
  assert.throws(() => new LayerNorm(new Proxy(dev, {}), 8), is("device"));
  using m = new RMSNorm(dev, 8);
  assert.throws(() => m.load(null as never), is("values"));
  assert.throws(() => m.load({ wieght: [1] } as never), is("values.wieght"));
  assert.throws(() => dev.tensor([1n] as never, [1]), is("values[0]"));
  assert.throws(() => new Tensor({} as never, [4]), is("buffer"));
  assert.throws(() => new Tensor({ byteLength: 16, device: dev } as never, [4]), is("buffer"));
  assert.throws(() => x.readSync(null as never), is("options"));
  assert.throws(() => x.readSync({ stream: "s" as never }), is("stream"));
});

test('options of the wrong type (stats: "no", accumulate: "true", a bias given to rmsNorm) → ArgumentError naming them', () => {
  using dev = cpu();
  const { x, out, w, b } = setup(dev);
  refused(dev, ArgumentError, "stats", () => layerNorm(x, { stats: "no" as never }), { keep: [x] });
  refused(dev, ArgumentError, "stats", () => rmsNorm(x, { stats: 0 as never, out }), { poison: [out], keep: [x] });
  refused(dev, ArgumentError, "bias", () => rmsNorm(x, { weight: w, bias: b, out } as never), {
    poison: [out],
    keep: [x, w, b],
  });
  const st = layerNorm(x, { weight: w, bias: b, stats: true });
  const dw = dev.tensor(randoms(8, 20), [8]), db = dev.tensor(randoms(8, 21), [8]);
  refused(
    dev,
    ArgumentError,
    "accumulate",
    () =>
      layerNormBackward(st.y, x, {
        mean: st.mean,
        rstd: st.rstd,
        weight: w,
        bias: b,
        dweight: dw,
        dbias: db,
        accumulate: "true" as never,
      }),
    { keep: [dw, db] },
  );
  refused(dev, ArgumentError, "bias", () => rmsNormBackward(st.y, x, { rstd: st.rstd, weight: w, bias: b } as never), {
    keep: [x],
  });
  refused(dev, ArgumentError, "bias", () => new RMSNorm(dev, 8, { bias: false } as never));
  refused(dev, ArgumentError, "zeroCentered", () => new RMSNorm(dev, 8, { zeroCentered: "yes" as never }));
});

test("two CPU devices are told apart in messages (cpu:0 and cpu:0#n)", () => {
  using a = cpu();
  using b2 = cpu();
  assert.notEqual(a.id, b2.id);
  const x = a.tensor(randoms(8, 1), [2, 4]);
  const w = b2.tensor(randoms(4, 2), [4]);
  assert.throws(() => layerNorm(x, { weight: w }), (e: unknown) => {
    assert.ok(e instanceof ArgumentError && e.argument === "weight");
    assert.ok(e.message.includes(a.id) && e.message.includes(b2.id), e.message);
    return true;
  });
});

test("a module given input of the wrong D → ArgumentError(x) naming the module's d, not its weight", () => {
  using dev = cpu();
  for (const m of [new LayerNorm(dev, 8), new RMSNorm(dev, 8)]) {
    using x = dev.tensor(randoms(8, 1), [2, 4]);
    assert.throws(
      () => m.forward(x),
      (e: unknown) => e instanceof ArgumentError && e.argument === "x" && /\b8\b.*module's d/.test(e.message),
    );
    m.close();
  }
});

test("tensors past 2^53 − 1 elements or bytes → ArgumentError(shape) with the exact count; past host memory → ArgumentError(bytes)", () => {
  using dev = cpu();
  assert.throws(
    () => dev.empty([2 ** 30, 2 ** 30]),
    (e: unknown) => e instanceof ArgumentError && e.argument === "shape" && e.message.includes(`${2n ** 60n} elements`),
  );
  assert.throws(
    () => dev.empty([2 ** 26, 2 ** 26], { dtype: "bf16" }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "shape" && e.message.includes(`${2n ** 53n} bytes`),
  );
  assert.throws(
    () => dev.empty([2 ** 40, 1]),
    (e: unknown) => e instanceof ArgumentError && e.argument === "bytes" && e.message.includes(`${2 ** 42}`),
  );
  assert.throws(
    () => dev.tensor([], [2 ** 40, 2 ** 40, 0]),
    (e: unknown) => e instanceof ArgumentError && e.argument === "shape",
  );
});

test("a CUDA library that cannot be loaded: the fallback reason says so once, naming the library and no other path", () => {
  using dev = Device.open({ sanityCheck: false });
  if (dev.backend !== "cpu") return void assert.equal(dev.fallbackReason, undefined);
  const reason = dev.fallbackReason ?? "";
  // (HIP may load here and find no device: then its part says that instead.)
  assert.match(reason, /^CUDA: cannot load [^ ]+: [^;]+; HIP: /);
  assert.equal(reason.split("open library").length, 1, reason);
  assert.ok(!reason.includes(process.cwd()), `no working-directory path: ${reason}`);
  for (const part of reason.split("; ")) assert.ok((part.match(/cannot load/g) ?? []).length <= 1, part);
});

test("options: every key layerNorm and rmsNorm read is accepted, any other is refused naming it", () => {
  using dev = Device.open({ backend: "cpu", sanityCheck: false });
  using x = dev.tensor(randoms(2 * 8, 31), [2, 8]);
  using out = dev.tensor(randoms(2 * 8, 32), [2, 8]);
  assert.equal(NORM_KEYS.size, 15);
  for (const norm of [layerNorm, rmsNorm]) {
    using want = norm(x);
    // Each known key given as undefined (not given): accepted; the call runs and writes out.
    for (const key of NORM_KEYS) {
      out.write(randoms(2 * 8, 33));
      const r = norm(x, (key === "out" ? { out: undefined } : { out, [key]: undefined }) as never) as unknown as Tensor;
      assert.deepEqual(r.readSync(), want.readSync(), `${norm.name} with ${key}: undefined`);
      if (r !== out) r.close();
    }
    for (const key of ["weigth", "epsilon", "Weight", "residualout", "toString"]) {
      const before = out.readSync();
      assert.throws(
        () => norm(x, { out, [key]: undefined } as never),
        (e: unknown) => e instanceof ArgumentError && e.argument === key && /an unknown key/.test(e.message),
        `${norm.name} with ${key}`,
      );
      assert.deepEqual(out.readSync(), before, "a refused call writes nothing");
    }
  }
});
