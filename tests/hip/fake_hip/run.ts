/**
 * Run by tests/hip/fake_library.test.ts in a child process with NORMKIT_HIP_LIB pointing at the fake libamdhip64
 * (fake_hip.c): the driver is loaded once per process, so each scenario needs a fresh one. Prints one JSON line.
 */
import process from "node:process";
import { Device, layerNorm, loadKernels, rmsNorm } from "../../../mod.ts";
import * as hipImages from "../../../packages/hip/mod.ts";

const [scenario, d = "2600"] = process.argv.slice(2);
const D = Number(d), rows = 3;
const message = (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));
/** Prints the scenario's one JSON line: the device's arch and wave size, then `more`. */
const report = (dev: Device, more: Record<string, unknown>) =>
  console.log(JSON.stringify({ arch: dev.info.arch, warpSize: dev.info.warpSize, ...more }));

if (scenario === "auto") {
  using dev = Device.open();
  report(dev, { backend: dev.backend, name: dev.name });
} else if (scenario === "norm") {
  // No sanity check: the fake library runs no kernel (loadKernels would run the check Device.open deferred).
  using dev = Device.open({ backend: "hip", sanityCheck: false });
  using x = dev.tensor(Float32Array.from({ length: rows * D }, (_, i) => i % 7), [rows, D]);
  using w = dev.tensor(new Float32Array(D).fill(1), [D]);
  using b = dev.tensor(new Float32Array(D), [D]);
  let beforeLoad = "";
  try {
    layerNorm(x, { weight: w, bias: b }).close();
  } catch (e) {
    beforeLoad = message(e);
  }
  await loadKernels(dev, { images: hipImages });
  const r = layerNorm(x, { weight: w, bias: b, eps: 0.25, stats: true });
  using xh = dev.tensor(Float32Array.from({ length: rows * D }, (_, i) => i % 5), [rows, D], { dtype: "bf16" });
  using y2 = rmsNorm(xh);
  dev.synchronize();
  report(dev, {
    beforeLoad,
    ptrs: {
      x: String(x.ptr),
      y: String(r.y.ptr),
      w: String(w.ptr),
      b: String(b.ptr),
      mean: String(r.mean.ptr),
      rstd: String(r.rstd.ptr),
      xh: String(xh.ptr),
      y2: String(y2.ptr),
    },
  });
  r.y.close(), r.mean.close(), r.rstd.close();
} else if (scenario === "fused") {
  // An RMSNorm with a residual on the fused kernels (h written over the residual), after loading them from
  // @normkit/hip's `fused` images.
  using dev = Device.open({ backend: "hip", sanityCheck: false });
  using x = dev.tensor(Float32Array.from({ length: rows * D }, (_, i) => i % 7), [rows, D]);
  using res = dev.tensor(Float32Array.from({ length: rows * D }, (_, i) => i % 3), [rows, D]);
  using w = dev.tensor(new Float32Array(D).fill(1), [D]);
  await loadKernels(dev, { fused: true, images: hipImages });
  using y = rmsNorm(x, { weight: w, residual: res, eps: 0.125 });
  dev.synchronize();
  report(dev, { ptrs: { x: String(x.ptr), res: String(res.ptr), w: String(w.ptr), y: String(y.ptr) } });
} else if (scenario === "fused-quant") {
  // An RMSNorm into int8 with a static scale, after loading the quantized fused kernels (`fusedQuant` images too).
  using dev = Device.open({ backend: "hip", sanityCheck: false });
  using x = dev.tensor(Float32Array.from({ length: rows * D }, (_, i) => i % 7), [rows, D]);
  using w = dev.tensor(new Float32Array(D).fill(1), [D]);
  await loadKernels(dev, { quant: true, images: hipImages });
  using y = rmsNorm(x, { weight: w, eps: 0.125, quant: { dtype: "int8", scale: 0.5 } });
  dev.synchronize();
  report(dev, { ptrs: { x: String(x.ptr), w: String(w.ptr), y: String(y.ptr) } });
} else if (scenario === "unsupported") {
  using dev = Device.open({ backend: "hip" });
  using x = dev.tensor([1, 2, 3, 4], [1, 4]);
  let load = "", norm = "";
  await loadKernels(dev, { images: hipImages }).catch((e) => (load = message(e)));
  try {
    layerNorm(x).close();
  } catch (e) {
    norm = message(e);
  }
  console.log(JSON.stringify({ arch: dev.info.arch, load, norm }));
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
