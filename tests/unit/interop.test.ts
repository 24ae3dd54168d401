/**
 * Interop: raw element bits in and out, memory and streams made by other code (the fake CUDA driver's own
 * allocations and streams, and host typed arrays on the CPU backend), normalizedShape of several dimensions,
 * disposable NormResult, short inspection strings, and Module.load all-or-nothing.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { inspect } from "node:util";
import {
  ArgumentError,
  type BitsArray,
  Device,
  LayerNorm,
  layerNorm,
  layerNormBackward,
  loadKernels,
  RMSNorm,
  rmsNorm,
  Tensor,
  UnsupportedError,
} from "../../mod.ts";
import { CUDA_ERROR_OUT_OF_MEMORY, FaultDriver } from "../fixtures/fault_driver.ts";
import { mulberry32, randoms } from "../fixtures/random.ts";

/** Asserts that `fn` throws ArgumentError naming `argument`. */
function refuses(fn: () => unknown, argument: string): void {
  assert.throws(
    fn,
    (e: unknown) => e instanceof ArgumentError && e.argument === argument,
    `ArgumentError naming ${argument}`,
  );
}

/** Random 16-bit patterns with the special ones: NaN payloads (quiet, signalling, negative), ±0, subnormals, ±Inf. */
function bits16(n: number, dtype: "f16" | "bf16", seed: number): Uint16Array {
  const special = dtype === "f16"
    ? [0x7e01, 0x7c01, 0xfe55, 0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7bff]
    : [0x7fc1, 0x7f81, 0xffa5, 0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7f7f];
  const next = mulberry32(seed), out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = i < special.length ? special[i] : Math.floor(next() * 0x10000);
  return out;
}

function bits32(n: number, seed: number): Uint32Array {
  const special = [
    0x7fc00123,
    0x7f800001,
    0xffa00001,
    0x00000000,
    0x80000000,
    0x00000001,
    0x807fffff,
    0x7f800000,
    0xff800000,
  ];
  const next = mulberry32(seed), out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = i < special.length ? special[i] : Math.floor(next() * 2 ** 32) >>> 0;
  return out;
}

/** The integers of a bits array (Float32Array bits read as Uint32, never as numbers, which may quiet a NaN). */
const ints = (a: BitsArray | Uint32Array): number[] =>
  Array.from(a instanceof Float32Array ? new Uint32Array(a.buffer, a.byteOffset, a.length) : a);

/** Round trips of raw bits on `dev`: contiguous and row-padded, 16-bit and 32-bit. */
async function bitsRoundTrips(dev: Device): Promise<void> {
  for (const dtype of ["f16", "bf16"] as const) {
    const b = bits16(6 * 40, dtype, 7);
    using t = dev.tensor(b, [6, 40], { dtype, bits: true });
    assert.deepEqual(ints(await t.toBits()), ints(b), `${dtype} contiguous`);
    assert.ok((await t.toBits()) instanceof Uint16Array);
    using p = dev.empty([6, 40], { dtype, rowStride: 48 });
    p.write(b, { bits: true });
    assert.deepEqual(ints(p.readBitsSync()), ints(b), `${dtype} padded rows`);
  }
  const w = bits32(5 * 24, 9);
  using f = dev.tensor(w, [5, 24], { dtype: "f32", bits: true });
  const back = await f.toBits();
  assert.ok(back instanceof Float32Array);
  assert.deepEqual(ints(back), ints(w));
  // A Float32Array's bytes are bits too.
  using g = dev.tensor(new Float32Array(w.buffer), [5, 24], { bits: true });
  assert.deepEqual(ints(g.readBitsSync()), ints(w));
}

test("raw bits round trip unchanged on the CPU backend (NaN payloads, ±0, subnormals, ±Inf)", async () => {
  using dev = Device.open({ backend: "cpu" });
  await bitsRoundTrips(dev);
});

test("raw bits round trip unchanged through the fake CUDA driver", async () => {
  const fake = new FaultDriver();
  using dev = Device.openWithDriver(fake);
  await bitsRoundTrips(dev);
});

test("a Uint16Array for a 16-bit dtype must say bits: true or false; bits: false converts the numbers", () => {
  using dev = Device.open({ backend: "cpu" });
  const u = new Uint16Array([1, 2, 300, 1024]);
  refuses(() => dev.tensor(u, [4], { dtype: "bf16" }), "bits");
  using t = dev.tensor(u, [4], { dtype: "f16", bits: false });
  assert.deepEqual(Array.from(t.readSync()), [1, 2, 300, 1024]);
  refuses(() => t.write(u), "bits");
  refuses(() => dev.tensor(new Float32Array(4), [4], { dtype: "bf16", bits: true }), "values");
  refuses(() => dev.tensor(new Uint16Array(4), [4], { dtype: "f32", bits: true }), "values");
  refuses(() => dev.tensor(new Uint16Array(3), [4], { dtype: "f16", bits: true }), "values");
  refuses(() => dev.tensor(u, [4], { dtype: "f16", bits: 1 as never }), "bits");
  // f32 takes a Uint16Array as numbers, as before: there is nothing else it could mean.
  using f = dev.tensor(u, [4]);
  assert.deepEqual(Array.from(f.readSync()), [1, 2, 300, 1024]);
});

/** Float64 RMSNorm / LayerNorm of rows of n elements (the reference). */
function reference(
  kind: "rms" | "layer",
  x: ArrayLike<number>,
  n: number,
  w?: ArrayLike<number>,
  b?: ArrayLike<number>,
  eps = 1e-6,
): Float64Array {
  const out = new Float64Array(x.length);
  for (let r = 0; r < x.length / n; r++) {
    let mean = 0, sq = 0;
    for (let j = 0; j < n; j++) mean += x[r * n + j];
    mean = kind === "layer" ? mean / n : 0;
    for (let j = 0; j < n; j++) sq += (x[r * n + j] - mean) ** 2;
    const rstd = 1 / Math.sqrt(sq / n + eps);
    for (let j = 0; j < n; j++) out[r * n + j] = (x[r * n + j] - mean) * rstd * (w ? w[j] : 1) + (b ? b[j] : 0);
  }
  return out;
}

function close(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what: string): void {
  assert.equal(actual.length, expected.length, what);
  for (let i = 0; i < expected.length; i++) {
    assert.ok(
      Math.abs(actual[i] - expected[i]) <= tol * (1 + Math.abs(expected[i])),
      `${what}[${i}]: ${actual[i]} vs ${expected[i]}`,
    );
  }
}

test("fake driver: a buffer and a stream made through the driver are x, out and stream of a norm", async () => {
  const fake = new FaultDriver();
  using dev = Device.openWithDriver(fake);
  await loadKernels(dev);
  const rows = 4, d = 64, bytes = rows * d * 4;
  const xPtr = fake.memAlloc(bytes), yPtr = fake.memAlloc(bytes), st = fake.streamCreate();
  let live = 0;
  {
    using xb = dev.wrapPointer(xPtr, bytes), yb = dev.wrapPointer(yPtr, bytes);
    using s = dev.wrapStream(st);
    const x = new Tensor(xb, [rows, d]), y = new Tensor(yb, [rows, d]);
    x.write(randoms(rows * d, 3));
    fake.recordArgs = 2;
    const before = fake.launches.length;
    assert.equal(rmsNorm(x, { out: y, stream: s }), y);
    const l = fake.launches.slice(before);
    assert.equal(l.length, 1);
    assert.equal(l[0].stream, st, "launched on the wrapped stream");
    assert.deepEqual(l[0].args, [xPtr, yPtr], "x and out are the wrapped pointers");
    assert.match(String(xb), /wrapped/);
    live = fake.live; // the default stream and the kernel module are made by the first norm
  }
  // Closing the wrappers freed and destroyed nothing.
  assert.equal(fake.live, live);
  assert.ok(!fake.calls.includes("cuMemFree_v2") && !fake.calls.includes("cuStreamDestroy_v2"));
  // A byte offset into the allocation and a row stride.
  {
    using xb = dev.wrapPointer(xPtr + 256n, bytes - 256);
    const x = new Tensor(xb, [2, 32], { rowStride: 48, byteOffset: 16 });
    fake.recordArgs = 1;
    using _y = rmsNorm(x);
    assert.equal(fake.launches.at(-1)!.args[0], xPtr + 256n + 16n);
  }
  // own: true frees and destroys.
  {
    using _b = dev.wrapPointer(xPtr, bytes, { own: true });
    using _s = dev.wrapStream(st, { own: true });
  }
  assert.equal(fake.live, live - 2);
  fake.memFree(yPtr);
});

test("fake driver: wrapping checks the context, the allocation and the options", () => {
  const fake = new FaultDriver(), other = new FaultDriver();
  using dev = Device.openWithDriver(fake);
  using otherDev = Device.openWithDriver(other);
  const theirs = other.memAlloc(1024), ours = fake.memAlloc(1024);
  refuses(() => dev.wrapPointer(theirs, 1024), "ptr");
  assert.throws(() => dev.wrapPointer(theirs, 1024), /context/);
  refuses(() => dev.wrapPointer(0x1234n, 16), "ptr"); // no allocation there
  refuses(() => dev.wrapPointer(ours + 512n, 1024), "bytes"); // past the allocation
  refuses(() => dev.wrapPointer(ours + 256n, 16, { own: true }), "own"); // not the allocation's start
  refuses(() => dev.wrapPointer(5 as never, 16), "ptr");
  refuses(() => dev.wrapPointer(ours, 0), "bytes");
  refuses(() => dev.wrapPointer(ours, 16, { own: "yes" as never }), "own");
  refuses(() => dev.wrapStream(-1n), "handle");
  refuses(() => dev.wrapStream(0n, { own: true }), "own");
  assert.throws(() => dev.wrapHost(new Float32Array(4)), UnsupportedError);
  void otherDev;
  fake.memFree(ours), other.memFree(theirs);
});

test("fake driver: two wrappers of one allocation keep the in-place and overlap rules", async () => {
  const fake = new FaultDriver();
  using dev = Device.openWithDriver(fake);
  await loadKernels(dev);
  const d = 64, bytes = 4 * d * 4, ptr = fake.memAlloc(bytes);
  using a = dev.wrapPointer(ptr, bytes), b = dev.wrapPointer(ptr, bytes);
  const x = new Tensor(a, [4, d]);
  x.write(randoms(4 * d, 5));
  // Partial overlap through the second wrapper: refused as an x/out overlap.
  refuses(() => rmsNorm(x, { out: new Tensor(b, [3, d], { byteOffset: d * 4 }) }), "out");
  refuses(() => layerNorm(x, { out: new Tensor(b, [4, d - 1], { rowStride: d, byteOffset: 4 }) }), "out");
  // The very same elements through the other wrapper: in place, allowed.
  const same = new Tensor(b, [4, d]);
  assert.equal(rmsNorm(x, { out: same }), same);
  // out over the weight's memory through another wrapper: refused.
  const w = new Tensor(a, [d], { byteOffset: 0 });
  const y = new Tensor(b, [1, d], { byteOffset: 2 * d * 4 });
  const xs = new Tensor(b, [1, d], { byteOffset: 3 * d * 4 });
  refuses(() => rmsNorm(xs, { weight: w, out: new Tensor(b, [1, d]) }), "out");
  void y;
  fake.memFree(ptr);
});

test("CPU backend: wrapHost computes in the typed arrays themselves; overlapping views are refused", () => {
  using dev = Device.open({ backend: "cpu" });
  const rows = 3, d = 16, xs = randoms(rows * d, 11), ys = new Float32Array(rows * d);
  using xb = dev.wrapHost(xs), yb = dev.wrapHost(ys);
  const x = new Tensor(xb, [rows, d]), y = new Tensor(yb, [rows, d]);
  rmsNorm(x, { out: y });
  close(ys, reference("rms", xs, d), 1e-6, "y in the caller's array");
  // Two views of one ArrayBuffer: a partial overlap is refused, the same elements are in place.
  const shared = new Float32Array(4 * d);
  shared.set(randoms(4 * d, 12));
  const expected = reference("layer", shared.subarray(0, 2 * d), d, undefined, undefined, 1e-5);
  using v1 = dev.wrapHost(shared.subarray(0, 2 * d)),
    v2 = dev.wrapHost(shared.subarray(d, 3 * d)),
    v3 = dev.wrapHost(shared);
  refuses(() => layerNorm(new Tensor(v1, [2, d]), { out: new Tensor(v2, [2, d]) }), "out");
  layerNorm(new Tensor(v1, [2, d]), { out: new Tensor(v3, [2, d]) });
  close(shared.subarray(0, 2 * d), expected, 1e-6, "in place through another view");
  // Closing a wrapper leaves the array alone.
  xb.close();
  assert.equal(xs.length, rows * d);
  refuses(() => dev.wrapHost([1, 2] as never), "view");
  assert.throws(() => dev.wrapPointer(0x1000n, 16), UnsupportedError);
  assert.throws(() => dev.wrapStream(0n), UnsupportedError);
});

test("normalizedShape of two trailing dims: modules and ops against the float64 reference", () => {
  using dev = Device.open({ backend: "cpu" });
  const lead = 3, ns = [8, 64], n = 512;
  const xs = randoms(lead * n, 21), ws = randoms(n, 22, 0.5, 1.5), bs = randoms(n, 23);
  using x = dev.tensor(xs, [lead, 8, 64]);
  using ln = new LayerNorm(dev, ns), rms = new RMSNorm(dev, ns);
  assert.deepEqual(ln.weight!.shape, [8, 64]);
  assert.equal(ln.d, 512);
  ln.load({ weight: ws, bias: bs });
  rms.load({ weight: ws });
  using y1 = ln.forward(x);
  assert.deepEqual(y1.shape, [lead, 8, 64]);
  close(y1.readSync(), reference("layer", xs, n, ws, bs, 1e-5), 1e-5, "LayerNorm([8, 64])");
  using y2 = rms.forward(x);
  close(y2.readSync(), reference("rms", xs, n, ws), 1e-5, "RMSNorm([8, 64])");
  using dy = dev.tensor(randoms(lead * n, 24), [lead, 8, 64]);
  using dx = rms.backward(dy);
  assert.deepEqual(dx.shape, [lead, 8, 64]);
  assert.deepEqual(rms.weightGrad!.shape, [8, 64]);
  // The ops: weight of shape [8, 64], stats one per leading index.
  using w = dev.tensor(ws, ns), b = dev.tensor(bs, ns);
  using r = layerNorm(x, { weight: w, bias: b, normalizedShape: ns, stats: true });
  assert.deepEqual(r.y.shape, [lead, 8, 64]);
  assert.deepEqual(r.rstd.shape, [lead]);
  close(r.y.readSync(), reference("layer", xs, n, ws, bs, 1e-5), 1e-5, "layerNorm normalizedShape");
  const g = layerNormBackward(dy, x, { mean: r.mean, rstd: r.rstd, weight: w, bias: b, normalizedShape: ns });
  assert.deepEqual(g.dx.shape, [lead, 8, 64]);
  assert.deepEqual(g.dweight!.shape, [8, 64]);
  // Against a numeric gradient of sum(dy * y) in float64 for one weight element.
  const dys = dy.readSync(), j = 77, h = 1e-3;
  const loss = (wj: number) => {
    const w2 = Float64Array.from(ws);
    w2[j] = wj;
    return reference("layer", xs, n, w2, bs, 1e-5).reduce((s, v, i) => s + v * dys[i], 0);
  };
  const numeric = (loss(ws[j] + h) - loss(ws[j] - h)) / (2 * h);
  assert.ok(
    Math.abs(g.dweight!.readSync()[j] - numeric) < 1e-3,
    `dweight[${j}] ${g.dweight!.readSync()[j]} vs ${numeric}`,
  );
  g.dx.close(), g.dweight!.close(), g.dbias!.close();
  // Refusals: trailing dims that differ, non-contiguous normalized dims, bad normalizedShape.
  refuses(() => rmsNorm(x, { normalizedShape: [4, 64] }), "x");
  using padded = dev.empty([lead, 8, 64], { rowStride: 80 });
  refuses(() => rmsNorm(padded, { normalizedShape: ns }), "x");
  refuses(() => rmsNorm(x, { normalizedShape: [0, 64] }), "normalizedShape[0]");
  refuses(() => new RMSNorm(dev, [8, 64]).forward(dev.tensor(xs, [lead, 512])), "x");
  refuses(() => new RMSNorm(dev, [1024, 1024]), "normalizedShape");
});

test("NormResult is disposable and still destructures", () => {
  using dev = Device.open({ backend: "cpu" });
  using x = dev.tensor(randoms(32, 31), [4, 8]);
  let kept: { y: Tensor; mean: Tensor; rstd: Tensor };
  {
    using r = rmsNorm(x, { stats: true });
    kept = r;
    const { y, mean, rstd } = r;
    assert.ok(!y.closed && !mean.closed && !rstd.closed);
  }
  assert.ok(kept.y.closed && kept.mean.closed && kept.rstd.closed);
  // With out given, the caller's out stays open.
  using out = dev.empty([4, 8]);
  {
    using _r = layerNorm(x, { out, stats: true });
  }
  assert.ok(!out.closed);
});

test("short inspection strings for Tensor, Device, DeviceBuffer and Stream (Deno and Node/Bun inspect)", () => {
  using dev = Device.open({ backend: "cpu" });
  using t = dev.tensor(new Float32Array(32), [4, 8], { dtype: "bf16" });
  const expected = `Tensor(bf16 [4, 8] on ${dev.id})`;
  assert.equal(String(t), expected);
  assert.equal(inspect(t), expected);
  const deno = (globalThis as { Deno?: { inspect(v: unknown): string } }).Deno;
  if (deno) assert.equal(deno.inspect(t), expected);
  assert.equal(inspect(dev), `Device(${dev.id})`);
  using buf = dev.alloc(64);
  assert.equal(inspect(buf), `DeviceBuffer(64 bytes on ${dev.id})`);
  assert.equal(inspect(dev.stream), `Stream(${dev.id})`);
  if (deno) assert.equal(deno.inspect(dev), `Device(${dev.id})`);
  using p = dev.empty([2, 3], { rowStride: 4 });
  assert.equal(String(p), `Tensor(f32 [2, 3], rowStride 4 on ${dev.id})`);
  buf.close();
  assert.equal(inspect(buf), `DeviceBuffer(64 bytes on ${dev.id}), closed`);
});

test("Module.load is all or nothing: a failed upload leaves state() and the forward's weight as they were", async () => {
  const d = 64, old = randoms(d, 41), next = randoms(d, 42);
  for (let k = 1; k <= 12; k++) {
    const fake = new FaultDriver();
    using dev = Device.openWithDriver(fake);
    await loadKernels(dev);
    using m = new RMSNorm(dev, d, { zeroCentered: true });
    m.load({ weight: old });
    fake.failAt(k, CUDA_ERROR_OUT_OF_MEMORY);
    let failed = false;
    try {
      m.load({ weight: next });
    } catch {
      failed = true;
    }
    fake.failAt(0);
    const w = m.state().weight!;
    const expected = failed ? old : next;
    assert.deepEqual(Array.from(w), Array.from(expected), `k=${k}: state() weight`);
    // The weight the kernel reads (1 + w) agrees with state().
    fake.recordArgs = 3;
    using x = dev.tensor(randoms(2 * d, 43), [2, d]);
    using _y = m.forward(x);
    const scale = new Float32Array(fake.deviceBytes(fake.launches.at(-1)!.args[2], d * 4).slice().buffer);
    assert.deepEqual(
      Array.from(scale),
      Array.from(expected, (v) => Math.fround(1 + v)),
      `k=${k}: the forward's weight`,
    );
  }
});
