/**
 * The compute_90 PTX of @normkit/ptx (what GPUs newer than sm_90 run) JIT-compiled by the driver on this GPU: it loads
 * and computes; so do the backward kernels' PTX (`backward`) and the fused kernels' (`fused`, `fusedQuant`), the
 * latter on the fused grid at 7 rows. Apart from the other GPU tests because the JIT of every kernel takes minutes on a fresh host (133 s
 * on an H200 with an empty cache: docs/loading.md). Skipped, with the reason, without a CUDA device.
 */
import assert from "node:assert/strict";
import { Device, loadKernels, rmsNorm, rmsNormBackward } from "../../mod.ts";
import { kernelImage, NORM_BWD_KERNELS } from "../../gpu.ts";
import { loadBackwardImage } from "../../ops/kernels.ts";
import { randoms } from "../fixtures/random.ts";
import { fusedModuleLoaded, loadFusedImage } from "../../ops/fused_module.ts";
import { readImage } from "../../ops/images.ts";
import { describeCase, fusedGrid, runFusedCase } from "../fixtures/fused_cases.ts";
import * as ptxPackage from "../../packages/ptx/mod.ts";
import { gpuTest } from "../fixtures/helpers.ts";
import { scaleComputes } from "../fixtures/scale_check.ts";

gpuTest("modules: the compute_90 PTX (JIT-compiled here, timed) loads; scale_f32 computes y = 2x", async () => {
  using dev = Device.open({ backend: "cuda" });
  const ptx = await kernelImage({ backend: "cuda", info: { ...dev.info, computeCapability: [10, 0] } }, {
    images: ptxPackage,
  });
  scaleComputes(dev, "compute_90 PTX", ptx);
});

gpuTest(
  "backward: the compute_90 PTX (JIT-compiled here, timed) has every backward kernel; dx matches the CPU backend's",
  async () => {
    using dev = Device.open({ backend: "cuda", sanityCheck: false });
    await loadKernels(dev); // the forward kernels (SASS); the backward module from the PTX, as a GPU newer than sm_90
    const ptx = await kernelImage({ backend: "cuda", info: { ...dev.info, computeCapability: [10, 0] } }, {
      images: ptxPackage,
      kind: "backward",
    });
    const t0 = performance.now();
    loadBackwardImage(dev, ptx);
    console.log(`# backward PTX loaded (JIT) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    {
      using mod = dev.loadModule(ptx);
      for (const name of NORM_BWD_KERNELS) mod.kernel(name, []);
    }
    // f32 rows of 1024: dx and dweight against the CPU backend's, within 1e-5 · (1 + |cpu|) and 1e-4 · (1 + |cpu|).
    using cpu = Device.open({ backend: "cpu" });
    const rows = 64, d = 1024, xv = randoms(rows * d, 1), dyv = randoms(rows * d, 2), wv = randoms(d, 3, 0.5, 1.5);
    const run = (device: Device) => {
      using x = device.tensor(xv, [rows, d]), dy = device.tensor(dyv, [rows, d]), w = device.tensor(wv, [d]);
      using f = rmsNorm(x, { weight: w, stats: true });
      const g = rmsNormBackward(dy, x, { rstd: f.rstd, weight: w });
      const out = [g.dx.readSync(), g.dweight!.readSync()];
      g.dx.close(), g.dweight!.close();
      return out;
    };
    const [gdx, gdw] = run(dev), [cdx, cdw] = run(cpu);
    for (let i = 0; i < gdx.length; i++) {
      if (!(Math.abs(gdx[i] - cdx[i]) <= 1e-5 * (1 + Math.abs(cdx[i])))) assert.fail(`dx[${i}] ${gdx[i]} ${cdx[i]}`);
    }
    for (let i = 0; i < d; i++) {
      if (!(Math.abs(gdw[i] - cdw[i]) <= 1e-4 * (1 + Math.abs(cdw[i])))) {
        assert.fail(`dweight[${i}] ${gdw[i]} ${cdw[i]}`);
      }
    }
  },
);

gpuTest(
  "fused: the compute_90 PTX (JIT-compiled here, timed) computes the fused grid at 7 rows within tolerance",
  async () => {
    using dev = Device.open({ backend: "cuda", sanityCheck: false });
    await loadKernels(dev); // the norm kernels (SASS); the fused module from the PTX, as a GPU newer than sm_90 loads it
    for (const image of ["fused", "fusedQuant"] as const) {
      const t0 = performance.now();
      loadFusedImage(dev, await readImage(ptxPackage[image].images.compute_90), image);
      console.log(`# ${image} PTX loaded (JIT) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      if (!fusedModuleLoaded(dev, image)) throw new Error(`the ${image} module is not loaded`);
    }
    let worst = 0;
    for (const c of fusedGrid([7], [8, 770, 5125, 8199])) {
      try {
        worst = Math.max(worst, runFusedCase(dev, c));
      } catch (e) {
        throw new Error(`${describeCase(c)}: ${(e as Error).message}`);
      }
    }
    console.log(`# largest error ${worst.toFixed(3)} × tolerance`);
  },
);
