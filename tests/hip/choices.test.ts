/**
 * The ops' HIP choices, as pure functions (no library, no GPU): which code object a device gets, the plan limits a
 * HIP device yields, and that the AMD code objects stay out of the static module graph of mod.ts / gpu.ts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { NORM_HSACO } from "../../precompiled/norm_hip.ts";
import { hipCodeObject, HSACO_WAVE, hsacoTarget } from "../../ops/hip_module.ts";
import { planLimits } from "../../ops/kernels.ts";
import type { DeviceInfo } from "../../runtime/driver.ts";
import { UnsupportedError } from "../../runtime/errors.ts";

const info = (arch: string, warpSize: number, cc: [number, number] = [9, 4]): DeviceInfo => ({
  ordinal: 0, name: "test device", arch, computeCapability: cc, multiprocessors: 104, totalMemory: 1 << 30,
  warpSize, maxThreadsPerBlock: 1024, maxBlockDim: [1024, 1024, 1024], maxGridDim: [2147483647, 65536, 65536],
  maxSharedPerBlock: 65536, maxSharedPerBlockOptin: 65536, l2CacheBytes: 8 << 20,
});

test("the targets with their wave sizes are exactly the embedded code objects", () => {
  assert.deepEqual(Object.keys(HSACO_WAVE).sort(), Object.keys(NORM_HSACO).sort());
  assert.deepEqual({ ...HSACO_WAVE }, { gfx90a: 64, gfx942: 64, gfx1100: 32 });
});

test("hsacoTarget: gfx90a/gfx942 (wave 64) and gfx1100 (wave 32) get their own code object", () => {
  assert.equal(hsacoTarget(info("gfx90a", 64)), "gfx90a");
  assert.equal(hsacoTarget(info("gfx942", 64)), "gfx942");
  assert.equal(hsacoTarget(info("gfx1100", 32)), "gfx1100");
});

test("hsacoTarget: any other arch → UnsupportedError naming the device's arch and the built ones", () => {
  for (const arch of ["gfx1101", "gfx908", "gfx950", "gfx?", "sm_90"]) {
    assert.throws(() => hsacoTarget(info(arch, 64)), (e: unknown) => {
      assert.ok(e instanceof UnsupportedError, String(e));
      assert.ok(e.message.includes(`test device (${arch})`), e.message);
      assert.match(e.message, /gfx90a, gfx942, gfx1100/);
      return true;
    });
  }
  // Inherited keys are not targets.
  assert.throws(() => hsacoTarget(info("constructor", 64)), UnsupportedError);
});

test("hsacoTarget: a wave size other than the code object's is refused (the plan would size reductions wrongly)", () => {
  assert.throws(() => hsacoTarget(info("gfx1100", 64)), /wave size 64; the gfx1100 code object is wave32/);
  assert.throws(() => hsacoTarget(info("gfx942", 32)), /wave size 32; the gfx942 code object is wave64/);
});

test("hipCodeObject before the code objects are imported says to await loadKernels(device)", () => {
  assert.throws(() => hipCodeObject("gfx942"), /await loadKernels\(device\)/);
});

test("planLimits: the device's wave size; clusters (ccMajor) only on CUDA", () => {
  assert.deepEqual(planLimits({ backend: "hip", info: info("gfx942", 64) }), {
    maxGridX: 2147483647, maxThreadsPerBlock: 1024, warpSize: 64, ccMajor: 0, multiprocessors: 104,
  });
  assert.equal(planLimits({ backend: "hip", info: info("gfx1100", 32) }).warpSize, 32);
  assert.equal(planLimits({ backend: "cuda", info: info("sm_90", 32, [9, 0]) }).ccMajor, 9);
});

/** Files reached from `entry` through static `import`/`export ... from` (not import()). */
function staticGraph(entry: string): Set<string> {
  const seen = new Set<string>();
  const visit = (url: URL) => {
    if (seen.has(url.href)) return;
    seen.add(url.href);
    const src = readFileSync(url, "utf8");
    for (const m of src.matchAll(/^\s*(?:import|export)\s[^;]*?\sfrom\s+"(\.[^"]+)"|^\s*import\s+"(\.[^"]+)"/gm)) {
      visit(new URL(m[1] ?? m[2], url));
    }
  };
  visit(new URL(`../../${entry}`, import.meta.url));
  return new Set([...seen].map((h) => h.slice(new URL("../../", import.meta.url).href.length)));
}

test("precompiled/norm_hip.ts is not in the static module graph of mod.ts or gpu.ts (imported only on demand)", () => {
  const graph = new Set([...staticGraph("mod.ts"), ...staticGraph("gpu.ts")]);
  assert.ok(graph.has("ops/hip_module.ts") && graph.has("precompiled/norm_cuda.ts"), [...graph].join(" "));
  assert.ok(!graph.has("precompiled/norm_hip.ts"), "norm_hip.ts is imported statically");
  // And the dynamic import is by a computed URL, which Deno's graph builder does not follow (see hip_module.ts).
  const src = readFileSync(new URL("../../ops/hip_module.ts", import.meta.url), "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  assert.doesNotMatch(src, /import\(\s*["']/);
  assert.match(src, /new URL\("\.\.\/precompiled\/norm_hip\.ts", import\.meta\.url\)/);
});
