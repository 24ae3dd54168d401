/**
 * The compute_90 PTX of @normkit/ptx (what GPUs newer than sm_90 run) JIT-compiled by the driver on this GPU: it loads
 * and computes. Apart from the other GPU tests because the JIT of every kernel takes minutes on a fresh host (133 s
 * on an H200 with an empty cache: docs/loading.md). Skipped, with the reason, without a CUDA device.
 */
import { Device } from "../../mod.ts";
import { kernelImage } from "../../gpu.ts";
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
