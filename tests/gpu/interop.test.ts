/**
 * GPU test: memory and a stream made straight through the CUDA driver API (the ffi symbol table, not normkit's
 * runtime) used as x, out and stream of a norm, checked against a float64 reference; closing the wrappers frees
 * nothing (the driver's own frees then succeed); a host address is refused; raw bf16 bits round trip unchanged.
 * Skipped, with the reason, without a CUDA device.
 */
import assert from "node:assert/strict";
import { ArgumentError, cpuNormForward, Device, loadKernels, rmsNorm, Tensor } from "../../mod.ts";
import { CUDA_SYMBOLS } from "../../ffi/cuda.ts";
import { openLibrary } from "../../ffi/library.ts";
import { ffi } from "../../ffi/runtime.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

gpuTest("interop: a cuMemAlloc'd x and out and a cuStreamCreate'd stream run a norm; closing frees nothing", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  dev.synchronize(); // makes the device's (primary) context current on this thread for the raw calls below
  const cu = openLibrary("libcuda.so.1", "NORMKIT_CUDA_LIB", CUDA_SYMBOLS).symbols;
  const out = new BigUint64Array(1);
  const rows = 96, d = 1536, bytes = rows * d * 2; // bf16
  assert.equal(cu.cuMemAlloc_v2(out, BigInt(bytes)), 0);
  const xPtr = out[0];
  assert.equal(cu.cuMemAlloc_v2(out, BigInt(bytes)), 0);
  const yPtr = out[0];
  assert.equal(cu.cuStreamCreate(out, 1), 0);
  const st = out[0];
  const xs = randoms(rows * d, 51, -3, 3), ws = randoms(d, 52, 0.5, 1.5);
  {
    using xb = dev.wrapPointer(xPtr, bytes), yb = dev.wrapPointer(yPtr, bytes);
    using s = dev.wrapStream(st);
    const x = new Tensor(xb, [rows, d], { dtype: "bf16" }), y = new Tensor(yb, [rows, d], { dtype: "bf16" });
    x.write(xs, { stream: s });
    using w = dev.tensor(ws, [d]);
    assert.equal(rmsNorm(x, { weight: w, out: y, stream: s, eps: 1e-6 }), y);
    s.synchronize();
    const got = y.readSync({ stream: s });
    const ref =
      cpuNormForward({ kind: "rms", rows, d, x: x.readSync({ stream: s }), xStride: d, weight: ws, eps: 1e-6 }).y;
    // bf16 output: 8 bits of mantissa, rounding of the result plus f32 accumulation.
    for (let i = 0; i < ref.length; i++) {
      assert.ok(Math.abs(got[i] - ref[i]) <= 2 ** -7 * Math.abs(ref[i]) + 1e-3, `y[${i}] ${got[i]} vs ${ref[i]}`);
    }
    // Raw bits of the result equal the bf16 values read back.
    const bits = y.readBitsSync({ stream: s });
    assert.equal(bits.length, rows * d);
    assert.equal(new Float32Array(new Uint32Array([bits[5] << 16]).buffer)[0], got[5]);
  }
  // The wrappers freed nothing: the driver's own frees succeed (a double free would return an error).
  assert.equal(cu.cuStreamDestroy_v2(st), 0);
  assert.equal(cu.cuMemFree_v2(xPtr), 0);
  assert.equal(cu.cuMemFree_v2(yPtr), 0);
  // Host memory is not device memory of this context.
  const host = new Uint8Array(4096);
  assert.throws(
    () => dev.wrapPointer(ffi!.addressOf(host), 4096),
    (e: unknown) => e instanceof ArgumentError && e.argument === "ptr",
  );
});

gpuTest("interop: own: true frees the wrapped allocation on close", () => {
  using dev = Device.open({ backend: "cuda" });
  dev.synchronize();
  const cu = openLibrary("libcuda.so.1", "NORMKIT_CUDA_LIB", CUDA_SYMBOLS).symbols;
  const out = new BigUint64Array(1);
  assert.equal(cu.cuMemAlloc_v2(out, 1n << 20n), 0);
  const ptr = out[0];
  dev.wrapPointer(ptr, 1 << 20, { own: true }).close();
  // Freed already: the driver no longer knows the address.
  assert.throws(() => dev.wrapPointer(ptr, 16), (e: unknown) => e instanceof ArgumentError && e.argument === "ptr");
});

gpuTest(
  "interop: raw bf16 and f32 bits (NaN payloads, ±0, subnormals, ±Inf) round trip unchanged on the GPU",
  async () => {
    using dev = Device.open({ backend: "cuda" });
    const b16 = new Uint16Array([
      0x7fc1,
      0x7f81,
      0xffa5,
      0x0000,
      0x8000,
      0x0001,
      0x807f,
      0x7f80,
      0xff80,
      0x3f80,
      0x1234,
      0xabcd,
    ]);
    using t = dev.tensor(b16, [3, 4], { dtype: "bf16", bits: true });
    assert.deepEqual(Array.from(await t.toBits()), Array.from(b16));
    const b32 = new Uint32Array([0x7fc00123, 0x7f800001, 0xffa00001, 0, 0x80000000, 1, 0x807fffff, 0x7f800000]);
    using f = dev.tensor(b32, [2, 4], { dtype: "f32", bits: true });
    const back = await f.toBits();
    assert.deepEqual(Array.from(new Uint32Array(back.buffer, back.byteOffset, back.length)), Array.from(b32));
  },
);
