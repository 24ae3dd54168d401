/**
 * The ops' HIP choices, as pure functions (no library, no GPU): which code object a device gets, the plan limits a
 * HIP device yields, and that loadKernels finds a HIP device's code object only in the images the user hands over.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as hipImages from "../../packages/hip/mod.ts";
import { HSACO_WAVE, hsacoTarget } from "../../ops/hip_module.ts";
import { findImage, imageChoice } from "../../ops/images.ts";
import { planLimits } from "../../ops/kernels.ts";
import { loadFusedModule } from "../../ops/fused_module.ts";
import type { Device } from "../../runtime/device.ts";
import { UnsupportedError } from "../../runtime/errors.ts";
import { deviceInfo } from "./targets.ts";

test("the targets with their wave sizes are exactly the embedded code objects", () => {
  assert.deepEqual(Object.keys(HSACO_WAVE).sort(), [...hipImages.TARGETS].sort());
  assert.deepEqual(Object.keys(hipImages.images).sort(), [...hipImages.TARGETS].sort());
  assert.deepEqual({ ...HSACO_WAVE }, { gfx90a: 64, gfx942: 64, gfx1100: 32 });
});

test("hsacoTarget: gfx90a/gfx942 (wave 64) and gfx1100 (wave 32) get their own code object", () => {
  assert.equal(hsacoTarget(deviceInfo("gfx90a", 64)), "gfx90a");
  assert.equal(hsacoTarget(deviceInfo("gfx942", 64)), "gfx942");
  assert.equal(hsacoTarget(deviceInfo("gfx1100", 32)), "gfx1100");
});

test("hsacoTarget: any other arch → UnsupportedError naming the device's arch and the built ones", () => {
  for (const arch of ["gfx1101", "gfx908", "gfx950", "gfx?", "sm_90"]) {
    assert.throws(() => hsacoTarget(deviceInfo(arch, 64)), (e: unknown) => {
      assert.ok(e instanceof UnsupportedError, String(e));
      assert.ok(e.message.includes(`test device (${arch})`), e.message);
      assert.match(e.message, /gfx90a, gfx942, gfx1100/);
      return true;
    });
  }
  // Inherited keys are not targets.
  assert.throws(() => hsacoTarget(deviceInfo("constructor", 64)), UnsupportedError);
});

test("hsacoTarget: a wave size other than the code object's is refused (the plan would size reductions wrongly)", () => {
  assert.throws(() => hsacoTarget(deviceInfo("gfx1100", 64)), /wave size 64; the gfx1100 code object is wave32/);
  assert.throws(() => hsacoTarget(deviceInfo("gfx942", 32)), /wave size 32; the gfx942 code object is wave64/);
});

test("a HIP device's image is its target's code object in @normkit/hip, found only when handed over", () => {
  const choice = imageChoice({ backend: "hip", info: deviceInfo("gfx942", 64) });
  assert.deepEqual(choice, { target: "gfx942", package: "@normkit/hip", jit: false });
  assert.throws(() => findImage(choice, [], "test device"), (e: unknown) => {
    assert.ok(e instanceof UnsupportedError);
    assert.match(e.message, /await loadKernels\(dev, \{ images: await import\("@normkit\/hip"\) \}\)/);
    return true;
  });
  const url = findImage(choice, [hipImages], "test device");
  assert.ok(url instanceof URL && url.href.endsWith("/packages/hip/norm_gfx942.hsaco.gz"), String(url));
});

test("planLimits: the device's wave size; clusters (ccMajor) only on CUDA", () => {
  assert.deepEqual(planLimits({ backend: "hip", info: deviceInfo("gfx942", 64) }), {
    maxGridX: 2147483647,
    maxThreadsPerBlock: 1024,
    warpSize: 64,
    ccMajor: 0,
    multiprocessors: 104,
  });
  assert.equal(planLimits({ backend: "hip", info: deviceInfo("gfx1100", 32) }).warpSize, 32);
  assert.equal(planLimits({ backend: "cuda", info: deviceInfo("sm_90", 32, [9, 0]) }).ccMajor, 9);
});

test("the fused kernels of a HIP device come from @normkit/hip's `fused` and `fusedQuant` images, found only when handed over", async () => {
  const hip = { backend: "hip", info: deviceInfo("gfx942", 64), cache: new Map() } as unknown as Device;
  await assert.rejects(() => loadFusedModule(hip), (e: unknown) => {
    assert.ok(e instanceof UnsupportedError);
    assert.match(e.message, /runs the fused kernels from the gfx942 image, which is in the package @normkit\/hip/);
    assert.ok(e.message.includes('loadKernels(dev, { fused: true, images: await import("@normkit/hip") })'));
    return true;
  });
  await assert.rejects(() => loadFusedModule(hip, [], "fusedQuant"), (e: unknown) => {
    assert.ok(e instanceof UnsupportedError);
    assert.match(
      e.message,
      /runs the quantized fused kernels from the gfx942 image, which is in the package @normkit\/hip/,
    );
    assert.ok(e.message.includes('loadKernels(dev, { quant: true, images: await import("@normkit/hip") })'));
    return true;
  });
});
