/**
 * The compute_90 PTX of @normkit/ptx (what GPUs newer than sm_90 run) JIT-compiled by the driver on this GPU: it loads
 * and computes; so does the fused kernels' PTX (`fused` of the same package), on the fused grid at 7 rows. Apart from the other GPU tests because the JIT of every kernel takes minutes on a fresh host (133 s
 * on an H200 with an empty cache: docs/loading.md). Skipped, with the reason, without a CUDA device.
 */
import { Device, loadKernels } from "../../mod.ts";
import { kernelImage } from "../../gpu.ts";
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
