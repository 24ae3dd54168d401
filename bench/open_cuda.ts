/** The benchmarks' device: the CUDA backend, or a one-line message and exit code 2 where there is none. */
import process from "node:process";
import { BackendUnavailableError, Device } from "../mod.ts";

export function openCuda(script: string): Device {
  try {
    return Device.open({ backend: "cuda" });
  } catch (e) {
    if (!(e instanceof BackendUnavailableError)) throw e;
    console.error(`${script}: needs a CUDA GPU (${e.reason})`);
    process.exit(2);
  }
}
