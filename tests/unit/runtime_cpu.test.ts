import { mulberry32 } from "../fixtures/random.ts";
/**
 * The runtime on the CPU backend and its object model: Device, DeviceBuffer, PinnedBuffer, Tensor, Stream,
 * Event, LaunchConfig and the Owner that releases native resources. Runs everywhere (no GPU needed); the
 * CUDA-only assertions are skipped, with the reason in the test name, when a CUDA device is present.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device } from "../../runtime/device.ts";
import { roundTo } from "../../runtime/dtype.ts";
import { ArgumentError, BackendUnavailableError, DisposedError, UnsupportedError } from "../../runtime/errors.ts";
import { LaunchConfig } from "../../runtime/module.ts";
import { Owner } from "../../runtime/resource.ts";
import { Tensor } from "../../runtime/tensor.ts";

type ErrorClass = new (...args: never[]) => Error;

/** Asserts fn throws `cls` and, for ArgumentError, that it names `argument` (in .argument and the message). */
function throwsNaming(fn: () => unknown, cls: ErrorClass, argument?: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e instanceof Error ? `${e.name}: ${e.message}` : e}`);
    if (argument !== undefined) {
      assert.ok(e.message.includes(argument), `message "${e.message}" should name ${argument}`);
      if (e instanceof ArgumentError) assert.equal(e.argument, argument);
    }
    return true;
  });
}

/** A deterministic PRNG (mulberry32) giving values in [-2, 2), never exactly 0. */
function rng(seed: number): () => number {
  const next = mulberry32(seed);
  return () => {
    const u = next();
    return u === 0.5 ? 0.125 : (u - 0.5) * 4;
  };
}

function randoms(n: number, seed: number): number[] {
  const r = rng(seed);
  return Array.from({ length: n }, r);
}

const cudaCount = Device.cudaDeviceCount();
const NO_GPU = cudaCount === 0;

// ---- Device.open -------------------------------------------------------------------------------------------

test(
  NO_GPU
    ? "Device.open() without a GPU falls back to the CPU and says why"
    : `Device.open() CPU fallback [skipped: ${cudaCount} CUDA device(s) present]`,
  { skip: NO_GPU ? false : "a CUDA device is present, so auto opens CUDA" },
  () => {
    using dev = Device.open();
    assert.equal(dev.backend, "cpu");
    assert.equal(typeof dev.fallbackReason, "string");
    assert.ok(dev.fallbackReason!.length > 0);
    assert.equal(dev.closed, false);
    assert.equal(typeof dev.name, "string");
    assert.ok(dev.name.length > 0);
  },
);

test("Device.open({ backend: 'cpu' }) is the CPU backend, with no fallback reason", () => {
  using dev = Device.open({ backend: "cpu" });
  assert.equal(dev.backend, "cpu");
  assert.equal(dev.fallbackReason, undefined);
  assert.deepEqual(dev.memoryInfo(), { free: 0, total: 0 });
  dev.synchronize(); // a no-op that must not throw
});

test(
  NO_GPU
    ? "Device.open({ backend: 'cuda' }) without a GPU throws BackendUnavailableError"
    : `Device.open({ backend: 'cuda' }) failure [skipped: ${cudaCount} CUDA device(s) present]`,
  { skip: NO_GPU ? false : "a CUDA device is present" },
  () => {
    throwsNaming(() => Device.open({ backend: "cuda" }), BackendUnavailableError, "cuda");
    try {
      Device.open({ backend: "cuda", ordinal: 3 });
      assert.fail("expected BackendUnavailableError");
    } catch (e) {
      assert.ok(e instanceof BackendUnavailableError);
      assert.equal(e.backend, "cuda");
      assert.ok(e.reason.length > 0);
    }
  },
);

test("Device.open with a bad backend or ordinal throws ArgumentError naming the argument", () => {
  // deno-lint-ignore no-explicit-any
  throwsNaming(() => Device.open({ backend: "gpu" as any }), ArgumentError, "backend");
  // deno-lint-ignore no-explicit-any
  throwsNaming(() => Device.open({ backend: "" as any }), ArgumentError, "backend");
  throwsNaming(() => Device.open({ ordinal: -1 }), ArgumentError, "ordinal");
  throwsNaming(() => Device.open({ ordinal: 0.5 }), ArgumentError, "ordinal");
  throwsNaming(() => Device.open({ backend: "cpu", ordinal: NaN }), ArgumentError, "ordinal");
});

// ---- lifetime ------------------------------------------------------------------------------------------------

test("close() is idempotent and `using` disposes", () => {
  const dev = Device.open({ backend: "cpu" });
  const buf = dev.alloc(16);
  buf.close();
  buf.close();
  assert.equal(buf.closed, true);
  dev.close();
  dev.close();
  assert.equal(dev.closed, true);

  let kept: Device;
  let keptBuf;
  {
    using d = Device.open({ backend: "cpu" });
    using b = d.alloc(8);
    kept = d;
    keptBuf = b;
    assert.equal(d.closed, false);
    assert.equal(b.closed, false);
  }
  assert.equal(kept.closed, true);
  assert.equal(keptBuf.closed, true);
});

test("use after close throws DisposedError (buffer.write, tensor.readSync, stream.synchronize, device.alloc)", async () => {
  const dev = Device.open({ backend: "cpu" });
  const buf = dev.alloc(16);
  buf.close();
  throwsNaming(() => buf.write(new Uint8Array(4)), DisposedError, "DeviceBuffer");
  throwsNaming(() => buf.read(new Uint8Array(4)), DisposedError, "DeviceBuffer");
  throwsNaming(() => buf.fill(1), DisposedError, "DeviceBuffer");
  throwsNaming(() => buf.hostBytes, DisposedError, "DeviceBuffer");

  const t = dev.tensor([1, 2, 3], [3]);
  t.close();
  assert.equal(t.closed, true);
  // The error names the tensor, not the buffer under it.
  for (const use of [() => t.readSync(), () => t.readBitsSync(), () => t.write([1, 2, 3]), () => t.view([1])]) {
    throwsNaming(use, DisposedError, "Tensor(f32 [3] on cpu:0");
  }
  await assert.rejects(t.toArray(), (e: Error) => e instanceof DisposedError && e.message.includes("Tensor(f32 [3]"));

  const s = dev.createStream();
  s.close();
  throwsNaming(() => s.synchronize(), DisposedError, "Stream");
  throwsNaming(() => s.query(), DisposedError, "Stream");

  const ev = dev.createEvent();
  ev.close();
  throwsNaming(() => ev.record(), DisposedError, "Event");

  const p = dev.pinned(8);
  p.close();
  throwsNaming(() => p.bytes, DisposedError, "PinnedBuffer");

  dev.close();
  throwsNaming(() => dev.alloc(8), DisposedError, "Device");
  throwsNaming(() => dev.pinned(8), DisposedError, "Device");
  throwsNaming(() => dev.createStream(), DisposedError, "Device");
  throwsNaming(() => dev.createEvent(), DisposedError, "Device");
  throwsNaming(() => dev.stream, DisposedError, "Device");
  throwsNaming(() => dev.tensor([1], [1]), DisposedError, "Device");
  throwsNaming(() => dev.synchronize(), DisposedError, "Device");
});

test("closing the device makes its buffers, tensors, streams and events unusable; closing them later is fine", () => {
  const dev = Device.open({ backend: "cpu" });
  const buf = dev.alloc(32);
  const pin = dev.pinned(32);
  const t = dev.tensor([1, 2, 3, 4], [2, 2]);
  const s = dev.createStream();
  const defaultStream = dev.stream;
  const ev = dev.createEvent();
  assert.ok(dev.owner.liveCount >= 6, `the device owns what it created (${dev.owner.liveCount})`);
  dev.close();
  assert.equal(dev.owner.liveCount, 0, "the device released everything it owned");
  for (const r of [buf, pin, t, s, defaultStream, ev]) assert.equal(r.closed, true, `${r.constructor.name}.closed`);
  throwsNaming(() => buf.write(new Uint8Array(4)), DisposedError, "closed");
  throwsNaming(() => buf.hostBytes, DisposedError, "device was closed");
  throwsNaming(() => buf.read(new Uint8Array(4)), DisposedError);
  throwsNaming(() => pin.bytes, DisposedError, "device was closed");
  throwsNaming(() => t.readSync(), DisposedError, "Tensor(f32 [2, 2] on cpu:0");
  throwsNaming(() => t.readSync(), DisposedError, "(its device was closed)");
  throwsNaming(() => s.synchronize(), DisposedError, "device was closed");
  throwsNaming(() => defaultStream.query(), DisposedError);
  throwsNaming(() => ev.record(), DisposedError, "closed");
  throwsNaming(() => ev.handle, DisposedError, "device was closed");
  throwsNaming(() => ev.elapsedSince(ev), DisposedError);
  // releasing them afterwards does not throw, twice
  for (let i = 0; i < 2; i++) {
    buf.close();
    pin.close();
    t.close();
    s.close();
    defaultStream.close();
    ev.close();
  }
});

test("the device's default stream is created once and belongs to the device", () => {
  using dev = Device.open({ backend: "cpu" });
  assert.equal(dev.stream, dev.stream);
  assert.equal(dev.stream.device, dev);
  assert.equal(dev.stream.handle, 0n);
  assert.equal(dev.stream.query(), true);
  dev.stream.synchronize();
});

// ---- DeviceBuffer / PinnedBuffer ---------------------------------------------------------------------------------

test("DeviceBuffer write/read with offsets; out-of-range → ArgumentError", () => {
  using dev = Device.open({ backend: "cpu" });
  using buf = dev.alloc(16);
  assert.equal(buf.byteLength, 16);
  buf.fill(0);
  buf.write(new Uint8Array([1, 2, 3, 4]), { offset: 5 });
  const all = new Uint8Array(16);
  buf.read(all);
  assert.deepEqual([...all], [0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0]);
  const part = new Uint8Array(3);
  buf.read(part, { offset: 6 });
  assert.deepEqual([...part], [2, 3, 4]);
  // a typed array view that is not at the start of its ArrayBuffer, and not bytes
  const f = new Float32Array([9, 1.5, -2.25, 7]).subarray(1, 3);
  buf.write(f, { offset: 8 });
  const back = new Float32Array(2);
  buf.read(back, { offset: 8 });
  assert.deepEqual([...back], [1.5, -2.25]);
  const mid = new Float32Array(4);
  buf.read(mid.subarray(1, 2), { offset: 12 });
  assert.deepEqual([...mid], [0, -2.25, 0, 0], "read into a subarray lands at its byteOffset only");
  // exactly at the end is fine; one past is not
  buf.write(new Uint8Array(4), { offset: 12 });
  buf.write(new Uint8Array(0), { offset: 16 });
  throwsNaming(() => buf.write(new Uint8Array(5), { offset: 12 }), ArgumentError, "write");
  throwsNaming(() => buf.write(new Uint8Array(17)), ArgumentError, "write");
  throwsNaming(() => buf.read(new Uint8Array(2), { offset: 15 }), ArgumentError, "read");
  throwsNaming(() => buf.write(new Uint8Array(1), { offset: -1 }), ArgumentError, "write offset");
  throwsNaming(() => buf.read(new Uint8Array(1), { offset: 1.5 }), ArgumentError, "read offset");
  throwsNaming(() => dev.alloc(-1), ArgumentError, "bytes");
  throwsNaming(() => dev.alloc(2.5), ArgumentError, "bytes");
  throwsNaming(() => dev.pinned(0), ArgumentError, "bytes");
  // failed writes wrote nothing
  buf.read(all);
  assert.deepEqual([...all.subarray(0, 8)], [0, 0, 0, 0, 0, 1, 2, 3]);
  assert.deepEqual([...all.subarray(12)], [0, 0, 0, 0]);
});

test("DeviceBuffer fill, fill32 and copyFrom", () => {
  using dev = Device.open({ backend: "cpu" });
  using a = dev.alloc(12);
  using b = dev.alloc(12);
  a.fill(0xab);
  const bytes = new Uint8Array(12);
  a.read(bytes);
  assert.deepEqual([...bytes], new Array(12).fill(0xab));
  throwsNaming(() => a.fill(256), ArgumentError, "value");
  throwsNaming(() => a.fill(-1), ArgumentError, "value");
  a.fill32(0x7fc00000);
  const f = new Float32Array(3);
  a.read(f);
  assert.ok(f.every(Number.isNaN), "fill32 with NaN bits gives NaNs");
  a.fill32(0x3f800000);
  a.read(f);
  assert.deepEqual([...f], [1, 1, 1]);
  a.fill32(-1); // negative numbers are taken as their 32-bit pattern
  const u = new Uint32Array(3);
  a.read(u);
  assert.deepEqual([...u], [0xffffffff, 0xffffffff, 0xffffffff]);
  using odd = dev.alloc(6);
  throwsNaming(() => odd.fill32(0), ArgumentError, "buffer");

  a.write(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
  b.fill(0);
  b.copyFrom(a, { srcOffset: 2, offset: 5, bytes: 4 });
  b.read(bytes);
  assert.deepEqual([...bytes], [0, 0, 0, 0, 0, 3, 4, 5, 6, 0, 0, 0]);
  b.copyFrom(a);
  b.read(bytes);
  assert.deepEqual([...bytes], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  throwsNaming(() => b.copyFrom(a, { offset: 1 }), ArgumentError, "copyFrom");
  throwsNaming(() => b.copyFrom(a, { srcOffset: 10, bytes: 4 }), ArgumentError, "copyFrom source");
  using other = Device.open({ backend: "cpu" });
  using c = other.alloc(12);
  throwsNaming(() => b.copyFrom(c), ArgumentError, "copyFrom source");
});

test("PinnedBuffer writeAsync/readAsync round trip on the CPU", () => {
  using dev = Device.open({ backend: "cpu" });
  using pin = dev.pinned(16);
  using buf = dev.alloc(16);
  assert.equal(pin.byteLength, 16);
  assert.equal(pin.bytes.byteLength, 16);
  buf.fill(0);
  pin.bytes.set([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160]);
  buf.writeAsync(pin, { pinnedOffset: 4, offset: 2, bytes: 6 });
  buf.writeAsync(pin, { pinnedOffset: 12, offset: 12 });
  dev.stream.synchronize();
  const got = new Uint8Array(16);
  buf.read(got);
  assert.deepEqual([...got], [0, 0, 50, 60, 70, 80, 90, 100, 0, 0, 0, 0, 130, 140, 150, 160]);
  using back = dev.pinned(16);
  back.bytes.fill(1);
  buf.readAsync(back, { offset: 2, pinnedOffset: 8, bytes: 6 });
  dev.stream.synchronize();
  assert.deepEqual([...back.bytes], [1, 1, 1, 1, 1, 1, 1, 1, 50, 60, 70, 80, 90, 100, 1, 1]);
  buf.readAsync(back);
  assert.deepEqual([...back.bytes], [...got]);
  throwsNaming(() => buf.writeAsync(pin, { pinnedOffset: 10, bytes: 8 }), ArgumentError, "writeAsync source");
  throwsNaming(() => buf.writeAsync(pin, { offset: 4 }), ArgumentError, "writeAsync");
  throwsNaming(() => buf.readAsync(back, { pinnedOffset: 12, bytes: 8 }), ArgumentError, "readAsync destination");
});

// ---- Tensor ------------------------------------------------------------------------------------------------

test("Tensor from f32/f16/bf16 values round trips (f16/bf16 equal roundTo of the inputs)", async () => {
  using dev = Device.open({ backend: "cpu" });
  const values = randoms(6 * 7, 1).map((v, i) => (i % 5 === 0 ? v * 1e3 : v));
  for (const dtype of ["f32", "f16", "bf16"] as const) {
    using t = dev.tensor(values, [6, 7], { dtype });
    assert.equal(t.dtype, dtype);
    assert.deepEqual(t.shape, [6, 7]);
    assert.equal(t.rows, 6);
    assert.equal(t.d, 7);
    assert.equal(t.numel, 42);
    assert.equal(t.rowStride, 7);
    assert.equal(t.contiguous, true);
    assert.equal(t.buffer.byteLength, 42 * (dtype === "f32" ? 4 : 2));
    const got = t.readSync();
    assert.ok(got instanceof Float32Array);
    assert.deepEqual([...got], values.map((v) => roundTo(v, dtype)), dtype);
    assert.deepEqual([...(await t.toArray())], [...got], `${dtype} toArray`);
  }
  using fromTyped = dev.tensor(new Float64Array([1, 2.5, -3]), [3], { dtype: "bf16" });
  assert.deepEqual([...fromTyped.readSync()], [1, 2.5, -3]);
});

test("Tensor with rowStride > d: padding is kept out of the values and left untouched by write", () => {
  using dev = Device.open({ backend: "cpu" });
  for (const dtype of ["f32", "f16", "bf16"] as const) {
    const values = randoms(3 * 5, 2);
    using t = dev.tensor(values, [3, 5], { dtype, rowStride: 8 });
    assert.equal(t.rowStride, 8);
    assert.equal(t.contiguous, false);
    const w = dtype === "f32" ? 4 : 2;
    assert.equal(t.buffer.byteLength, (2 * 8 + 5) * w, "span of the rows");
    assert.deepEqual([...t.readSync()], values.map((v) => roundTo(v, dtype)));
    // poison the padding, rewrite the values: the padding must survive
    const raw = new Uint8Array(t.buffer.byteLength);
    t.buffer.read(raw);
    for (let r = 0; r < 2; r++) raw.fill(0xee, (r * 8 + 5) * w, (r + 1) * 8 * w);
    t.buffer.write(raw);
    const v2 = randoms(15, 3);
    t.write(v2);
    assert.deepEqual([...t.readSync()], v2.map((v) => roundTo(v, dtype)));
    const after = new Uint8Array(t.buffer.byteLength);
    t.buffer.read(after);
    for (let r = 0; r < 2; r++) {
      assert.ok(after.subarray((r * 8 + 5) * w, (r + 1) * 8 * w).every((b) => b === 0xee), `${dtype} row ${r} padding`);
    }
  }
});

test("Tensor over a buffer with an element offset reads and writes only its rows", () => {
  using dev = Device.open({ backend: "cpu" });
  using buf = dev.alloc(4 * 20);
  buf.fill32(0x7fc00000);
  const t = new Tensor(buf, [2, 3], { offset: 5, rowStride: 4 });
  t.write([1, 2, 3, 4, 5, 6]);
  const f = new Float32Array(20);
  buf.read(f);
  const expect = new Array(20).fill(NaN);
  [1, 2, 3].forEach((v, i) => (expect[5 + i] = v));
  [4, 5, 6].forEach((v, i) => (expect[9 + i] = v));
  assert.deepEqual([...f], expect);
  assert.deepEqual([...t.readSync()], [1, 2, 3, 4, 5, 6]);
  t.close(); // does not own the buffer
  assert.equal(buf.closed, false);
  throwsNaming(() => new Tensor(buf, [4, 4], { offset: 8 }), ArgumentError, "buffer");
  throwsNaming(() => new Tensor(buf, [2], { offset: -1 }), ArgumentError, "offset");
  // deno-lint-ignore no-explicit-any
  throwsNaming(() => new Tensor(buf, [2], { dtype: "f64" as any }), ArgumentError, "dtype");
});

test("3-D shapes: rows is the product of the leading dimensions", () => {
  using dev = Device.open({ backend: "cpu" });
  const values = randoms(2 * 3 * 4, 4);
  using t = dev.tensor(values, [2, 3, 4]);
  assert.equal(t.rows, 6);
  assert.equal(t.d, 4);
  assert.equal(t.numel, 24);
  assert.deepEqual([...t.readSync()], values.map(Math.fround));
  using s = dev.tensor(randoms(2 * 3 * 4, 5), [2, 3, 4], { rowStride: 6, dtype: "f16" });
  assert.equal(s.rows, 6);
  assert.equal(s.buffer.byteLength, (5 * 6 + 4) * 2);
  using e = dev.empty([4, 0, 5]);
  assert.equal(e.rows, 0);
  assert.equal(e.numel, 0);
  assert.equal(e.readSync().length, 0);
  using one = dev.tensor([7, 8], [2]);
  assert.equal(one.rows, 1);
  assert.equal(one.d, 2);
});

test("bad shapes, values and rowStride → ArgumentError naming the argument", () => {
  using dev = Device.open({ backend: "cpu" });
  const live = dev.owner.liveCount;
  throwsNaming(() => dev.tensor([], []), ArgumentError, "shape");
  throwsNaming(() => dev.empty([]), ArgumentError, "shape");
  // deno-lint-ignore no-explicit-any
  throwsNaming(() => dev.empty(5 as any), ArgumentError, "shape");
  throwsNaming(() => dev.tensor([1, 2], [-2]), ArgumentError, "shape[0]");
  throwsNaming(() => dev.empty([2, -1]), ArgumentError, "shape[1]");
  throwsNaming(() => dev.tensor([1, 2], [2, 1.5]), ArgumentError, "shape[1]");
  throwsNaming(() => dev.empty([NaN]), ArgumentError, "shape[0]");
  // deno-lint-ignore no-explicit-any
  throwsNaming(() => dev.empty(["4"] as any), ArgumentError, "shape[0]");
  throwsNaming(() => dev.tensor([1, 2, 3, 4], [2, 2], { rowStride: 1 }), ArgumentError, "rowStride");
  throwsNaming(() => dev.empty([2, 4], { rowStride: 3 }), ArgumentError, "rowStride");
  throwsNaming(() => dev.empty([2, 4], { rowStride: 4.5 }), ArgumentError, "rowStride");
  throwsNaming(() => dev.tensor([1, 2, 3], [2, 2]), ArgumentError, "values");
  // deno-lint-ignore no-explicit-any
  throwsNaming(() => dev.tensor([1, 2], [2], { dtype: "uint8" as any }), ArgumentError, "dtype");
  using t = dev.tensor([1, 2, 3, 4], [2, 2]);
  throwsNaming(() => t.write([1, 2, 3]), ArgumentError, "values");
  assert.equal(dev.owner.liveCount, live + 1, "failed constructions leaked no buffers");
});

// ---- LaunchConfig, modules, events -----------------------------------------------------------------------

test("LaunchConfig validation: bad grid/block/sharedBytes → ArgumentError", () => {
  const ok = new LaunchConfig({ grid: [4, 2], block: 128, sharedBytes: 64 });
  assert.deepEqual(ok.grid, [4, 2, 1]);
  assert.deepEqual(ok.block, [128, 1, 1]);
  assert.equal(ok.sharedBytes, 64);
  assert.equal(ok.threadsPerBlock, 128);
  assert.equal(new LaunchConfig({ grid: 1, block: [8, 4, 2] }).threadsPerBlock, 64);
  assert.equal(new LaunchConfig({ grid: 1, block: 1 }).sharedBytes, 0);
  for (const grid of [0, -1, 1.5, [], [1, 2, 3, 4], [1, 0], 2 ** 32, NaN]) {
    throwsNaming(() => new LaunchConfig({ grid, block: 32 }), ArgumentError, "grid");
  }
  for (const block of [0, [32, 0], [1, 1, 1, 1], 0.5]) {
    throwsNaming(() => new LaunchConfig({ grid: 1, block }), ArgumentError, "block");
  }
  for (const sharedBytes of [-1, 1.5, NaN, Infinity]) {
    throwsNaming(() => new LaunchConfig({ grid: 1, block: 32, sharedBytes }), ArgumentError, "sharedBytes");
  }
});

test("LaunchConfig.validateFor checks the device's limits (the CPU device allows 1×1×1, no shared memory)", () => {
  using dev = Device.open({ backend: "cpu" });
  new LaunchConfig({ grid: 1, block: 1 }).validateFor(dev);
  throwsNaming(() => new LaunchConfig({ grid: 2, block: 1 }).validateFor(dev), ArgumentError, "grid[0]");
  throwsNaming(() => new LaunchConfig({ grid: [1, 1, 3], block: 1 }).validateFor(dev), ArgumentError, "grid[2]");
  throwsNaming(() => new LaunchConfig({ grid: 1, block: [1, 2] }).validateFor(dev), ArgumentError, "block[1]");
  throwsNaming(
    () => new LaunchConfig({ grid: 1, block: 1, sharedBytes: 1 }).validateFor(dev),
    ArgumentError,
    "sharedBytes",
  );
});

test("dev.loadModule on the CPU backend → UnsupportedError", () => {
  // No sanity check: once ops/ is loaded (other test files in the same process) it would create the default stream.
  using dev = Device.open({ backend: "cpu", sanityCheck: false });
  assert.throws(() => dev.loadModule(".version 8.0\n.target sm_90\n"), UnsupportedError);
  assert.throws(() => dev.loadModule(new Uint8Array([0x7f, 0x45, 0x4c, 0x46])), UnsupportedError);
  assert.equal(dev.owner.liveCount, 0, "nothing was created");
});

test("events on the CPU: elapsed time is non-negative and measures host time", async () => {
  using dev = Device.open({ backend: "cpu" });
  const start = dev.createEvent();
  const end = dev.createEvent({ timing: true });
  assert.equal(start.timing, true);
  assert.equal(dev.createEvent({ timing: false }).timing, false);
  start.record();
  await new Promise((r) => setTimeout(r, 15));
  dev.stream.record(end);
  end.synchronize();
  assert.equal(end.query(), true);
  const ms = end.elapsedSince(start);
  assert.equal(typeof ms, "number");
  assert.ok(Number.isFinite(ms) && ms >= 0, `elapsed ${ms}`);
  assert.ok(ms >= 5, `15 ms of sleep measured as ${ms} ms`);
  const s = dev.createStream();
  const ev = s.record();
  assert.equal(ev.device, dev);
  s.waitEvent(ev);
  const zero = ev.elapsedSince(ev);
  assert.equal(zero, 0);
});

// ---- Owner ---------------------------------------------------------------------------------------------------

test("Owner releases each resource exactly once, newest first", () => {
  const o = new Owner();
  const log: string[] = [];
  const a = o.adopt(() => log.push("a"));
  o.adopt(() => log.push("b"));
  const c = o.adopt(() => log.push("c"));
  o.adopt(() => log.push("d"));
  assert.equal(o.liveCount, 4);
  o.release(c);
  o.release(c);
  assert.deepEqual(log, ["c"]);
  assert.equal(o.liveCount, 3);
  o.releaseAll();
  assert.deepEqual(log, ["c", "d", "b", "a"]);
  assert.equal(o.liveCount, 0);
  o.releaseAll();
  o.release(a);
  o.release(12345);
  assert.deepEqual(log, ["c", "d", "b", "a"], "nothing runs twice");
});

test("Owner.releaseAll runs every release and rethrows the first error; a failed release is not retried", () => {
  const o = new Owner();
  const log: string[] = [];
  o.adopt(() => log.push("a"));
  o.adopt(() => {
    log.push("b");
    throw new Error("b failed");
  });
  const c = o.adopt(() => {
    log.push("c");
    throw new Error("c failed");
  });
  o.adopt(() => log.push("d"));
  assert.throws(() => o.releaseAll(), { message: "c failed" }, "the first error (newest first) is rethrown");
  assert.deepEqual(log, ["d", "c", "b", "a"], "all ran despite the errors");
  assert.equal(o.liveCount, 0);
  o.releaseAll();
  o.release(c);
  assert.deepEqual(log, ["d", "c", "b", "a"]);

  const single = new Owner();
  const id = single.adopt(() => {
    throw new RangeError("once");
  });
  assert.throws(() => single.release(id), RangeError);
  single.release(id); // not retried
  assert.equal(single.liveCount, 0);
});

test("Owner ids are unique; releaseAll empties it", () => {
  const o = new Owner();
  const ids = new Set(Array.from({ length: 100 }, () => o.adopt(() => {})));
  assert.equal(ids.size, 100);
  o.releaseAll();
  assert.equal(o.liveCount, 0);
});

test("buffer copies and Event.record refuse a stream of another device (ArgumentError naming stream)", () => {
  using dev = Device.open({ backend: "cpu" });
  using other = Device.open({ backend: "cpu" });
  const foreign = other.createStream();
  using buf = dev.alloc(64);
  using src = dev.alloc(64);
  using pinned = dev.pinned(64);
  const host = new Uint8Array(16);
  const calls: [string, () => unknown][] = [
    ["write", () => buf.write(host, { stream: foreign })],
    ["read", () => buf.read(host, { stream: foreign })],
    ["fill", () => buf.fill(1, { stream: foreign })],
    ["fill32", () => buf.fill32(1, { stream: foreign })],
    ["copyFrom", () => buf.copyFrom(src, { stream: foreign })],
    ["writeAsync", () => buf.writeAsync(pinned, { stream: foreign })],
    ["readAsync", () => buf.readAsync(pinned, { stream: foreign })],
    ["Event.record", () => dev.createEvent().record(foreign)],
  ];
  for (const [name, call] of calls) {
    assert.throws(call, (e: unknown) => e instanceof ArgumentError && /^stream/.test(e.message), name);
  }
  const closed = dev.createStream();
  closed.close();
  assert.throws(() => buf.write(host, { stream: closed }), DisposedError);
});

test("copyFrom within one buffer: overlapping ranges are refused, disjoint ones copied", () => {
  using dev = Device.open({ backend: "cpu" });
  using buf = dev.alloc(32);
  buf.write(Uint8Array.from({ length: 32 }, (_, i) => i + 1));
  assert.throws(() => buf.copyFrom(buf, { srcOffset: 0, offset: 4, bytes: 8 }), ArgumentError);
  buf.copyFrom(buf, { srcOffset: 0, offset: 16, bytes: 8 });
  const out = new Uint8Array(32);
  buf.read(out);
  assert.deepEqual([...out.subarray(16, 24)], [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.deepEqual([...out.subarray(0, 8)], [1, 2, 3, 4, 5, 6, 7, 8]);
});
