// Which image a device loads (the table in ops/images.ts, on fake DeviceInfo), where loadKernels finds it, and that
// importing mod.ts / gpu.ts reads none. No GPU: the CUDA device is tests/fixtures/fake_cuda.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Device, layerNorm, loadKernels, rmsNormBackward } from "../../mod.ts";
import { kernelImage, NORM_SOURCE_SHA256 } from "../../gpu.ts";
import {
  findImage,
  type ImageChoice,
  imageChoice,
  imageSets,
  type KernelImageSet,
  readImage,
} from "../../ops/images.ts";
import { fusedModuleLoaded } from "../../ops/fused_module.ts";
import { FUSED_SOURCE_SHA256 } from "../../precompiled/fused_cuda.ts";
import { deferSanityCheck, isBackwardKernel, NORM_FWD_ARGS, normKernel, normModuleLoaded } from "../../ops/kernels.ts";
import { ArgumentError, SanityCheckError, UnsupportedError } from "../../runtime/errors.ts";
import type { DeviceInfo } from "../../runtime/driver.ts";
import * as ptxPackage from "../../packages/ptx/mod.ts";
import { FAKE_H200, fakeCudaDevice } from "../fixtures/fake_cuda.ts";

const root = new URL("../../", import.meta.url);
const read = (rel: string): Uint8Array => new Uint8Array(readFileSync(new URL(rel, root)));
const cuda = (cc: [number, number], name = `GPU ${cc.join(".")}`): { backend: string; info: DeviceInfo } => ({
  backend: "cuda",
  info: { ...FAKE_H200, name, computeCapability: cc, arch: `sm_${cc[0]}${cc[1]}` },
});

test("imageChoice: 8.x → sm_80 SASS, 9.x → sm_90 SASS, 10.0 and newer → compute_90 PTX (JIT), below 8.0 refused", () => {
  const sass80: ImageChoice = { target: "sm_80", package: "@normkit/normkit", jit: false };
  const sass90: ImageChoice = { target: "sm_90", package: "@normkit/normkit", jit: false };
  const ptx: ImageChoice = { target: "compute_90", package: "@normkit/ptx", jit: true };
  const cases: [[number, number], ImageChoice][] = [
    [[8, 0], sass80],
    [[8, 6], sass80],
    [[8, 7], sass80],
    [[8, 9], sass80],
    [[9, 0], sass90],
    [[10, 0], ptx],
    [[10, 3], ptx],
    [[12, 0], ptx],
    [[12, 1], ptx],
  ];
  for (const [cc, want] of cases) assert.deepEqual(imageChoice(cuda(cc)), want, cc.join("."));
  for (const cc of [[7, 5], [7, 0], [6, 1]] as [number, number][]) {
    assert.throws(() => imageChoice(cuda(cc, "old GPU")), (e: unknown) => {
      assert.ok(e instanceof UnsupportedError);
      assert.match(e.message, new RegExp(`old GPU has compute capability ${cc[0]}\\.${cc[1]}; .*8\\.0 or newer`));
      return true;
    });
  }
  assert.throws(() => imageChoice({ backend: "cpu", info: FAKE_H200 }), UnsupportedError);
});

test("findImage: normkit's own SASS; the PTX only when @normkit/ptx is handed over; sets given first; sources must match", () => {
  const sm90 = findImage(imageChoice(cuda([9, 0])), [], "d");
  assert.ok(sm90 instanceof URL && sm90.href.endsWith("/precompiled/norm_sm90.fatbin"));
  const ptx = imageChoice(cuda([10, 0]));
  assert.throws(() => findImage(ptx, [], "GPU 10.0 (compute_90)"), (e: unknown) => {
    assert.ok(e instanceof UnsupportedError);
    assert.match(e.message, /GPU 10\.0 \(compute_90\) runs normkit's kernels from the compute_90 image/);
    assert.ok(e.message.includes('`await loadKernels(dev, { images: await import("@normkit/ptx") })`'), e.message);
    return true;
  });
  assert.equal(findImage(ptx, [ptxPackage], "d"), ptxPackage.images.compute_90);
  const own = new Uint8Array([1, 2, 3]);
  assert.equal(
    findImage(imageChoice(cuda([9, 0])), [{ sourceSha256: NORM_SOURCE_SHA256, images: { sm_90: own } }], "d"),
    own,
  );
  assert.throws(
    () => findImage(ptx, [{ sourceSha256: "0".repeat(64), images: { compute_90: own } }], "d"),
    /built from other kernel sources \(sha256 000000000000…\) than this normkit .*use @normkit\/ptx of the same version/,
  );
});

test("findImage of the fused kernels: normkit's SASS on 8.x/9.x; the PTX package's `fused` on 10.0+; its own hash", () => {
  const sm80 = findImage(imageChoice(cuda([8, 6])), [], "d", "fused");
  assert.ok(sm80 instanceof URL && sm80.href.endsWith("/precompiled/fused_sm80.fatbin"), String(sm80));
  const sm90 = findImage(imageChoice(cuda([9, 0])), [ptxPackage], "d", "fused");
  assert.ok(sm90 instanceof URL && sm90.href.endsWith("/precompiled/fused_sm90.fatbin"), String(sm90));
  const ptx = imageChoice(cuda([10, 0]));
  for (const sets of [[], [{ sourceSha256: NORM_SOURCE_SHA256, images: ptxPackage.images }]]) {
    assert.throws(() => findImage(ptx, sets, "GPU 10.0 (compute_90)", "fused"), (e: unknown) => {
      assert.ok(e instanceof UnsupportedError);
      assert.match(e.message, /GPU 10\.0 \(compute_90\) runs the fused kernels from the compute_90 image/);
      assert.ok(e.message.includes('`await loadKernels(dev, { fused: true, images: await import("@normkit/ptx") })`'));
      return true;
    });
  }
  const found = findImage(ptx, [ptxPackage], "d", "fused");
  assert.equal(found, ptxPackage.fused.images.compute_90);
  assert.ok(ptxPackage.fused.images.compute_90.href.endsWith("/packages/ptx/fused_compute90.fatbin"));
  assert.equal(ptxPackage.fused.sourceSha256, FUSED_SOURCE_SHA256, "packages/ptx/fused_build.ts: the same sources");
  // The norm kernels' hash does not pass for the fused images, nor the other way round.
  const own = new Uint8Array([1]);
  assert.throws(
    () =>
      findImage(
        ptx,
        [{ ...ptxPackage, fused: { sourceSha256: NORM_SOURCE_SHA256, images: { compute_90: own } } }],
        "d",
        "fused",
      ),
    /the fused compute_90 image given to loadKernels was built from other kernel sources/,
  );
  assert.equal(
    findImage(
      ptx,
      [{ sourceSha256: "x", images: {}, fused: { sourceSha256: FUSED_SOURCE_SHA256, images: { compute_90: own } } }],
      "d",
      "fused",
    ),
    own,
  );
});

test("imageSets: one set, an array, or nothing, each read once into a frozen snapshot; anything else is an ArgumentError naming images", () => {
  assert.deepEqual(imageSets(undefined), []);
  const fields = (s: KernelImageSet) => [
    s.sourceSha256,
    s.images,
    s.fused?.sourceSha256,
    s.fused?.images,
    s.fusedQuant?.sourceSha256,
    s.fusedQuant?.images,
  ];
  assert.deepEqual(imageSets(ptxPackage).map(fields), [fields(ptxPackage)]);
  assert.deepEqual(imageSets([ptxPackage, ptxPackage]).map(fields), [fields(ptxPackage), fields(ptxPackage)]);
  assert.ok(
    imageSets(ptxPackage).every((s) =>
      Object.isFrozen(s) && Object.isFrozen(s.fused) && Object.isFrozen(s.fusedQuant) && s.fusedQuant !== undefined
    ),
  );
  // Getters run once: a set that answers differently the second time cannot swap what was checked.
  let reads = 0;
  const tricky = {
    get sourceSha256() {
      return reads++ === 0 ? NORM_SOURCE_SHA256 : 42;
    },
    images: {},
    get fused() {
      reads++;
      return undefined;
    },
  };
  const [snap] = imageSets(tricky);
  assert.equal(snap.sourceSha256, NORM_SOURCE_SHA256);
  assert.equal(reads, 2);
  assert.ok(!("fused" in snap) && !("fusedQuant" in snap));
  const badFused = [null, 3, { images: {} }, { sourceSha256: "x" }, { sourceSha256: "x", images: "y" }];
  [
    null,
    3,
    "x",
    { images: {} },
    { sourceSha256: "x" },
    [ptxPackage, {}],
    ...badFused.map((fused) => ({ ...ptxPackage, fused })),
    ...badFused.map((fusedQuant) => ({ ...ptxPackage, fusedQuant })),
  ].forEach((bad, i) => {
    assert.throws(
      () => imageSets(bad),
      (e: unknown) => e instanceof ArgumentError && e.argument === "images",
      `case ${i}`,
    );
  });
});

test("readImage: the file's bytes (read once per process); gzip inflated; bytes as given", async () => {
  const url = new URL("precompiled/norm_sm80.fatbin", root);
  const a = await readImage(url);
  assert.deepEqual(a, read("precompiled/norm_sm80.fatbin"));
  assert.equal(await readImage(url.href), a, "the same bytes, not read again");
  const raw = Uint8Array.from({ length: 5000 }, (_, i) => (i * 7919) % 251);
  const gz = new Uint8Array(
    await new Response(new Blob([raw]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer(),
  );
  assert.deepEqual(await readImage(gz), raw);
  assert.equal(await readImage(raw), raw);
  await assert.rejects(readImage(new URL("precompiled/missing.fatbin", root)));
  await assert.rejects(readImage("data:,x"), UnsupportedError);
});

test("fake H200: a norm before loadKernels is an UnsupportedError saying to await it; after it, the sm_90 image is loaded", async () => {
  const { dev, made } = await fakeCudaDevice(
    (d) => ({ x: d.tensor(new Float32Array(64).fill(1), [2, 32]), y: d.empty([2, 32]) }),
    {
      load: false,
    },
  );
  assert.throws(() => layerNorm(made.x, { out: made.y }), (e: unknown) => {
    assert.ok(e instanceof UnsupportedError);
    assert.match(e.message, /the norm kernels of fake NVIDIA H200 are not loaded: `await loadKernels\(dev\)`/);
    return true;
  });
  await loadKernels(dev);
  assert.deepEqual(await kernelImage(dev), read("precompiled/norm_sm90.fatbin"));
  assert.equal(normKernel(dev, "nk_ln_rows_f32_f32_f32", NORM_FWD_ARGS).name, "nk_ln_rows_f32_f32_f32");
  await loadKernels(dev); // again: nothing to do
  dev.close();
});

test("fake A100 gets the sm_80 image; a fake 10.0 GPU needs @normkit/ptx and then gets its PTX", async () => {
  const a100 = await fakeCudaDevice(() => null, { info: cuda([8, 0], "fake A100").info });
  assert.deepEqual(await kernelImage(a100.dev), read("precompiled/norm_sm80.fatbin"));
  a100.dev.close();
  const next = await fakeCudaDevice(() => null, { info: cuda([10, 0], "fake B200").info, load: false });
  await assert.rejects(loadKernels(next.dev), /@normkit\/ptx/);
  await loadKernels(next.dev, { images: ptxPackage });
  assert.deepEqual(await kernelImage(next.dev, { images: ptxPackage }), read("packages/ptx/norm_compute90.fatbin"));
  next.dev.close();
});

test("loadKernels({ fused }) loads the fused image of the device's target, { quant } the quantized one too: sm_80, sm_90, the PTX package's on 10.0", async () => {
  const cases: [[number, number], string, string, KernelImageSet[]][] = [
    [[8, 0], "precompiled/fused_sm80.fatbin", "precompiled/fused_quant_sm80.fatbin", []],
    [[9, 0], "precompiled/fused_sm90.fatbin", "precompiled/fused_quant_sm90.fatbin", []],
    [[10, 0], "packages/ptx/fused_compute90.fatbin", "packages/ptx/fused_quant_compute90.fatbin", [ptxPackage]],
  ];
  for (const [cc, file, quantFile, images] of cases) {
    const { dev, driver } = await fakeCudaDevice(() => null, {
      info: cuda(cc, `fake ${cc.join(".")}`).info,
      load: false,
    });
    const loaded: Uint8Array[] = [];
    const load = driver.moduleLoad.bind(driver);
    driver.moduleLoad = (image: Uint8Array) => (loaded.push(image), load(image));
    if (images.length) {
      await assert.rejects(loadKernels(dev, { fused: true }), /fused kernels from the compute_90 image.*@normkit\/ptx/);
      assert.equal(fusedModuleLoaded(dev), false);
      // { quant: true } on a fresh device names itself, not { fused: true }.
      await assert.rejects(
        loadKernels(dev, { quant: true }),
        /quantized fused kernels from the compute_90 image.*loadKernels\(dev, \{ quant: true, images: /,
      );
    }
    await loadKernels(dev, { fused: true, images });
    assert.equal(fusedModuleLoaded(dev), true, file);
    assert.equal(fusedModuleLoaded(dev, "fusedQuant"), false, "the quantized kernels not read");
    assert.deepEqual(loaded[0], read(file), `${cc.join(".")}: the fused module from ${file}`);
    assert.equal(loaded.length, 2, "then the norm module");
    if (images.length) {
      await assert.rejects(
        loadKernels(dev, { quant: true }),
        /quantized fused kernels from the compute_90 image.*loadKernels\(dev, \{ quant: true, images: await import\("@normkit\/ptx"\) \}\)/,
      );
    }
    await loadKernels(dev, { quant: true, images });
    assert.equal(fusedModuleLoaded(dev, "fusedQuant"), true, quantFile);
    assert.equal(loaded.length, 3, "the quantized image alone: the others are loaded");
    assert.deepEqual(loaded[2], read(quantFile), `${cc.join(".")}: the quantized module from ${quantFile}`);
    dev.close();
  }
});

test("loadKernels({ backward }) loads the backward image of the device's target (sm_80, sm_90, the PTX package's); without it a backward is refused before any launch", async () => {
  const cases: [[number, number], string, KernelImageSet[]][] = [
    [[8, 0], "precompiled/norm_bwd_sm80.fatbin", []],
    [[9, 0], "precompiled/norm_bwd_sm90.fatbin", []],
    [[10, 0], "packages/ptx/norm_bwd_compute90.fatbin", [ptxPackage]],
  ];
  for (const [cc, file, images] of cases) {
    const { dev, driver, made, launches } = await fakeCudaDevice((d) => ({
      x: d.tensor(new Float32Array(64).map((_, i) => Math.sin(i)), [2, 32]),
      dy: d.tensor(new Float32Array(64).map((_, i) => Math.cos(i)), [2, 32]),
      dx: d.tensor(new Float32Array(64).fill(7), [2, 32]),
      rstd: d.tensor(new Float32Array(2).fill(1), [2]),
    }), { info: cuda(cc, `fake ${cc.join(".")}`).info, load: false, record: true });
    const loaded: Uint8Array[] = [];
    const load = driver.moduleLoad.bind(driver);
    driver.moduleLoad = (image: Uint8Array) => (loaded.push(image), load(image));
    (driver as unknown as Record<string, unknown>).occupancy = () => 4; // one-row blocks size their grid from it
    await loadKernels(dev, { images });
    assert.equal(loaded.length, 1, "the forward image alone");
    assert.equal(normModuleLoaded(dev), true);
    assert.throws(() => rmsNormBackward(made.dy, made.x, { rstd: made.rstd, dx: made.dx }), (e: unknown) => {
      assert.ok(e instanceof UnsupportedError);
      assert.match(
        e.message,
        /the backward kernels of fake .* are not loaded: `await loadKernels\(dev, \{ backward: true \}\)`/,
      );
      return true;
    });
    // Without dx: refused before dx is allocated (the fake driver allocates nothing: memAlloc would throw).
    assert.throws(() => rmsNormBackward(made.dy, made.x, { rstd: made.rstd }), UnsupportedError);
    assert.equal(launches.length, 0, "nothing launched");
    const dx = made.dx.buffer.hostBytes;
    assert.deepEqual(Array.from(new Float32Array(dx.buffer, dx.byteOffset, 64)), new Array(64).fill(7), "dx untouched");
    if (images.length) {
      await assert.rejects(
        loadKernels(dev, { backward: true }),
        /backward kernels from the compute_90 image.*loadKernels\(dev, \{ backward: true, images: await import\("@normkit\/ptx"\) \}\)/,
      );
    }
    await loadKernels(dev, { backward: true, images });
    assert.equal(loaded.length, 2, "then the backward image alone");
    assert.deepEqual(loaded[1], read(file), `${cc.join(".")}: the backward module from ${file}`);
    assert.deepEqual(await kernelImage(dev, { images, kind: "backward" }), read(file));
    rmsNormBackward(made.dy, made.x, { rstd: made.rstd, dx: made.dx });
    assert.ok(launches.length >= 1 && launches.every((l) => isBackwardKernel(l.kernel)), launches[0]?.kernel);
    await loadKernels(dev, { backward: true, images }); // again: nothing to do
    assert.equal(loaded.length, 2);
    dev.close();
  }
  await assert.rejects(
    kernelImage(cuda([9, 0]), { kind: "bwd" as never }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "kind",
  );
});

test("fake H200: the sanity check Device.open() deferred runs in loadKernels, once; a module failing it is not kept", async () => {
  const { dev, made } = await fakeCudaDevice(
    (d) => ({ x: d.tensor(new Float32Array(64).fill(1), [2, 32]), y: d.empty([2, 32]) }),
    { load: false },
  );
  let calls = 0;
  // What ops/diag_sanity.ts does at Device.open() on a GPU, with a check that fails (the fake runs no kernel).
  deferSanityCheck(dev, (d) => {
    calls++;
    assert.equal(normModuleLoaded(d), true, "the check runs with the module loaded");
    throw new SanityCheckError("rmsNorm", 0, 1, 0, "cuda");
  });
  await assert.rejects(loadKernels(dev), SanityCheckError);
  assert.equal(normModuleLoaded(dev), false);
  assert.throws(() => layerNorm(made.x, { out: made.y }), /not loaded: `await loadKernels\(dev\)`/);
  await loadKernels(dev);
  assert.equal(normModuleLoaded(dev), true);
  assert.equal(calls, 1);
  dev.close();
});

test("CPU: loadKernels is a no-op (bad options still refused)", async () => {
  using dev = Device.open({ backend: "cpu" });
  await loadKernels(dev);
  await assert.rejects(loadKernels(dev, 3 as never), ArgumentError);
  await assert.rejects(loadKernels(dev, { images: 3 as never }), ArgumentError);
  using x = dev.tensor([1, 2, 3, 4], [1, 4]);
  using y = layerNorm(x);
  assert.ok(Math.abs(y.readSync()[0] + 1.5 / Math.sqrt(1.25 + 1e-5)) < 1e-6); // mean 2.5, variance 1.25
});

/** Files reached from `entry` through static `import`/`export ... from` (dynamic import() is checked apart). */
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
  visit(new URL(entry, root));
  return new Set([...seen].map((h) => h.slice(root.href.length)));
}

test("a light import: mod.ts and gpu.ts reach no image, no JSON module and no import() of their own", () => {
  const graph = new Set([...staticGraph("mod.ts"), ...staticGraph("gpu.ts")]);
  assert.ok(graph.has("ops/images.ts") && graph.has("precompiled/norm_cuda.ts"), [...graph].join(" "));
  for (const f of graph) {
    assert.match(f, /\.ts$/, `${f} in the static graph`);
    // Without comments and string literals (error messages quote `await import("@normkit/ptx")` for the user).
    const src = readFileSync(new URL(f, root), "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "")
      .replace(/`(?:[^`\\]|\\.)*`|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'/g, '""');
    // The one dynamic import (ffi/runtime.ts: bun.ts under Bun only) is by a variable; none by a literal, which
    // Deno would fetch while building the graph.
    assert.doesNotMatch(src, /import\(\s*["'`]/, f);
    if (f !== "ffi/runtime.ts") assert.doesNotMatch(src, /\bimport\(/, f);
  }
  assert.ok(read("precompiled/norm_cuda.ts").length < 64 * 1024, "norm_cuda.ts holds names and URLs, no image");
});
