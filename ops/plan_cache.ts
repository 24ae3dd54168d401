/**
 * Launch plans cached per device and problem, so that a norm called again with the same shape and dtypes
 * does no planning, builds no LaunchConfig (validated once against the device) and looks up no kernel:
 * what is left per call is writing the prepared argument block and one driver call.
 */
import type { Device } from "../runtime/device.ts";
import { type Kernel, LaunchConfig } from "../runtime/module.ts";
import { NORM_FWD_ARGS, normKernel } from "./kernels.ts";
import { type LaunchPlan, type PlanInput, type PlanLimits, planNorm } from "./plan.ts";

/** Cached plans per device, at most; past it the cache starts over (many distinct row counts, e.g. prefill). */
export const MAX_CACHED_PLANS = 1024;
const CACHE_KEY = "normkit.norm.plans";

/** A plan with its launch configuration and, once launched, its kernel. */
export class PlannedLaunch {
  readonly plan: LaunchPlan;
  readonly config: LaunchConfig;
  #kernel: Kernel | undefined;

  constructor(plan: LaunchPlan) {
    this.plan = plan;
    this.config = new LaunchConfig(plan);
  }

  /** The prepared kernel on `device` (loaded on first use; again if its module was closed). */
  kernel(device: Device): Kernel {
    const k = this.#kernel;
    if (k && !k.module.closed) return k;
    return (this.#kernel = normKernel(device, this.plan.kernel, NORM_FWD_ARGS));
  }
}

export type CachedPlan = PlannedLaunch | { readonly unsupported: string };

/**
 * The plan for `p` from `cache` (a device's cache map), made with `limits()` on a miss. Refusals are cached
 * too: the same unsupported call fails as fast as a supported one succeeds.
 */
export function cachedNormPlan(cache: Map<string, unknown>, p: PlanInput, limits: () => PlanLimits): CachedPlan {
  let plans = cache.get(CACHE_KEY) as Map<string, CachedPlan> | undefined;
  if (!plans) cache.set(CACHE_KEY, plans = new Map());
  const key = `${p.kind}/${p.rows}/${p.d}/${p.inputDtype}/${p.outputDtype}/${p.paramDtype ?? "-"}`;
  let hit = plans.get(key);
  if (hit === undefined) {
    const r = planNorm(p, limits());
    hit = "plan" in r ? new PlannedLaunch(r.plan) : { unsupported: r.unsupported };
    if (plans.size >= MAX_CACHED_PLANS) plans.clear();
    plans.set(key, hit);
  }
  return hit;
}
