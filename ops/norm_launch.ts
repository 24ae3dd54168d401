/**
 * The launch of a tuned forward plan (ops/plan.ts) over validated tensors: the kernel for the call's path (fwdFull),
 * its configuration and argument block. Shared by the plain norms (ops/norm.ts) and by `batchInvariant: true` on the
 * plans that keep a row's sums fixed (planNormInvariant, from ops/fused.ts).
 */
import type { Stream } from "../runtime/stream.ts";
import type { ArgBlock, Kernel, LaunchConfig } from "../runtime/module.ts";
import type { Device } from "../runtime/device.ts";
import type { Tensor } from "../runtime/tensor.ts";
import { fwdFull, type LaunchPlan } from "./plan.ts";
import type { PlannedLaunch } from "./plan_cache.ts";

/** The plan's values the kernel takes as arguments (tpr, nv, prefetch: LaunchPlan). */
export type KernelGeometry = Pick<LaunchPlan, "tpr" | "nv" | "prefetch">;

/** Writes the forward kernel's arguments (NORM_FWD_ARGS) into an argument block of it: all validated by the caller. */
export function writeNormArgs(
  k: ArgBlock,
  x: Tensor,
  y: Tensor,
  w: Tensor | undefined,
  b: Tensor | undefined,
  mean: Tensor | undefined,
  rstd: Tensor | undefined,
  eps: number,
  g: KernelGeometry,
): void {
  k.setPtr(0, x.ptr);
  k.setPtr(1, y.ptr);
  k.setPtr(2, w === undefined ? 0n : w.ptr);
  k.setPtr(3, b === undefined ? 0n : b.ptr);
  k.setPtr(4, mean === undefined ? 0n : mean.ptr);
  k.setPtr(5, rstd === undefined ? 0n : rstd.ptr);
  k.setI32(6, x.rows);
  k.setI32(7, x.d);
  k.setI64(8, x.rowStride);
  k.setI64(9, y.rowStride);
  k.setF32(10, eps);
  k.setI32(11, g.tpr);
  k.setI32(12, g.nv);
  k.setI32(13, g.prefetch);
}

/**
 * Queues `plan` over x (rows of one stride) into y on `stream`: the vector-only kernel where every row qualifies (fewer
 * registers spilled; the `rows` tile: its own thread mapping and grid, plan.configFor(true)), else the plan's kernel.
 * Gives back what was launched, for a repeat of the same call.
 */
export function launchNorm(
  plan: PlannedLaunch,
  device: Device,
  stream: Stream,
  x: Tensor,
  y: Tensor,
  weight: Tensor | undefined,
  bias: Tensor | undefined,
  mean: Tensor | undefined,
  rstd: Tensor | undefined,
  eps: number,
): { kernel: Kernel; config: LaunchConfig } {
  const full = plan.plan.fullKernel !== null && fwdFull(
    x.d,
    x.dtype,
    y.dtype,
    x.ptr,
    x.rowStride,
    y.ptr,
    y.rowStride,
    weight?.ptr ?? 0n,
    bias?.ptr ?? 0n,
  );
  const kernel = plan.kernel(device, full), config = plan.configFor(full);
  kernel.checkLaunch(stream, config);
  writeNormArgs(kernel.args, x, y, weight, bias, mean, rstd, eps, plan.plan);
  kernel.launchWritten(stream, config, kernel.args);
  return { kernel, config };
}
