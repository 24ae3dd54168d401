/**
 * The sanity check, run by Device.open() unless `{ sanityCheck: false }`: all-ones rows
 * through LayerNorm (weight 1, bias 0) must give 0 and through RMSNorm (weight 1) must give 1/sqrt(1 + eps).
 * It catches a wrong module, a broken launch path or a broken copy before the first real call. Cost: two small
 * launches and two reads of 12 KB. On a GPU it runs when loadKernels() has loaded the kernels.
 * Importing this module (the package's main module does) registers it with Device.open().
 */
import { type Device, setSanityCheck } from "../runtime/device.ts";
import { SanityCheckError } from "../runtime/errors.ts";
import { layerNorm, rmsNorm } from "./norm.ts";
import { deferSanityCheck, normModuleLoaded } from "./kernels.ts";

const ROWS = 3, D = 1000; // D = 1000: not a multiple of the vector width, so the masked tail runs too
const RMS_EPS = 1e-6;

/** Runs the check on `device`; throws SanityCheckError naming the first wrong element. */
export function sanityCheck(device: Device): void {
  if (!normModuleLoaded(device)) {
    // Device.open() runs before the kernels are loaded (an asynchronous read): the check runs at the end of the
    // loadKernels() that loads them.
    deferSanityCheck(device, sanityCheck);
    return;
  }
  const ones = new Float32Array(ROWS * D).fill(1);
  using x = device.tensor(ones, [ROWS, D]);
  using w = device.tensor(ones.subarray(0, D), [D]);
  using b = device.tensor(new Float32Array(D), [D]);
  {
    using y = layerNorm(x, { weight: w, bias: b, eps: 1e-5, check: false });
    expectAll(device, "layerNorm", y.readSync(), 0, 1e-6);
  }
  {
    using y = rmsNorm(x, { weight: w, eps: RMS_EPS, check: false });
    expectAll(device, "rmsNorm", y.readSync(), 1 / Math.sqrt(1 + RMS_EPS), 2e-6);
  }
}

function expectAll(device: Device, op: string, got: Float32Array, want: number, tol: number): void {
  for (let i = 0; i < got.length; i++) {
    // `!(≤)` so that NaN fails.
    if (!(Math.abs(got[i] - want) <= tol)) throw new SanityCheckError(op, i, want, got[i], device.backend);
  }
}

setSanityCheck(sanityCheck);
