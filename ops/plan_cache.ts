/**
 * Launch plans cached per device and problem, so that a norm called again with the same shape and dtypes
 * does no planning, builds no LaunchConfig (validated once against the device) and looks up no kernel:
 * what is left per call is writing the prepared argument block and one driver call.
 */
import type { Device } from "../runtime/device.ts";
import { type Kernel, LaunchConfig } from "../runtime/module.ts";
import type { DType } from "../runtime/dtype.ts";
import { NORM_FWD_ARGS, normKernel, planLimits } from "./kernels.ts";
import {
  type LaunchPlan,
  type NormKind,
  type PlanInput,
  type PlanLimits,
  planNorm,
  planNormInvariant,
} from "./plan.ts";

/** Cached plans per device, at most; past it the cache starts over (many distinct row counts, e.g. prefill). */
export const MAX_CACHED_PLANS = 1024;
const CACHE_KEY = "normkit.norm.plans";

/**
 * A plan with its launch configurations and, once launched, its kernels: the plan's `kernel` and, for calls
 * that qualify (fwdFull in ops/plan.ts), its `fullKernel`, each loaded on first use.
 */
export class PlannedLaunch {
  readonly plan: LaunchPlan;
  // Index 0: plan.kernel; 1: plan.fullKernel (where the plan has one).
  readonly #configs: [LaunchConfig, LaunchConfig];
  readonly #kernels: [Kernel | undefined, Kernel | undefined] = [undefined, undefined];

  constructor(plan: LaunchPlan) {
    this.plan = plan;
    const config = (gridX: number) =>
      new LaunchConfig({
        grid: [gridX, 1, 1],
        block: plan.block,
        sharedBytes: plan.sharedBytes,
        cluster: plan.cluster,
      });
    const c = config(plan.grid[0]);
    // The `rows` tile takes its own grid (tileGrid in ops/plan.ts); the others share the plan's.
    this.#configs = [
      c,
      plan.fullGridX === plan.grid[0] ? c : config(plan.fullGridX),
    ];
  }

  /** The launch configuration of kernel(device): see configFor. */
  get config(): LaunchConfig {
    return this.#configs[0];
  }

  /**
   * The launch configuration of kernel(device, full): the plan's (the `rows` tile: with its fullGridX), except that a
   * `cluster` plan launches at most as many clusters as are resident at once (known once kernel() has loaded that
   * kernel: the vector-only kernel's registers may differ). Its CTAs loop over the rows, so every cluster sets up its
   * exchange once, not once per row (decision fwd.cluster-persistent).
   */
  configFor(full: boolean): LaunchConfig {
    return this.#configs[this.#variant(full)];
  }

  /** The index of kernel(device, full) and configFor(full): 1 for the plan's fullKernel, where it has one. */
  #variant(full: boolean): 0 | 1 {
    return full && this.plan.fullKernel !== null ? 1 : 0;
  }

  /**
   * The prepared kernel on `device`: the plan's `fullKernel` when `full` (the caller checked fwdFull) and the
   * plan has one, else its `kernel`. The first use loads both variants (again if their module was closed), so
   * that a call during a graph capture, with buffers aligned unlike the call before it, loads nothing.
   */
  kernel(device: Device, full = false): Kernel {
    const i = this.#variant(full);
    const k = this.#kernels[i];
    if (k && !k.module.closed) return k;
    this.#load(device, 0);
    if (this.plan.fullKernel !== null) this.#load(device, 1);
    return this.#kernels[i]!;
  }

  #load(device: Device, i: 0 | 1): void {
    const p = this.plan;
    const loaded = normKernel(device, i === 1 ? p.fullKernel! : p.kernel, NORM_FWD_ARGS);
    if (p.mapping === "cluster" && p.cluster > 1) {
      const resident = loaded.activeClusters(p.block[0], p.sharedBytes, p.cluster);
      // (0 resident: the kernel cannot run with this geometry; the launch of one cluster then fails in the driver
      // with its own error, as the plan's grid would.)
      const clusters = Math.max(1, Math.min((i === 1 ? p.fullGridX : p.grid[0]) / p.cluster, resident));
      this.#configs[i] = new LaunchConfig({
        grid: [clusters * p.cluster, 1, 1],
        block: p.block,
        sharedBytes: p.sharedBytes,
        cluster: p.cluster,
      });
    }
    this.#kernels[i] = loaded;
  }
}

export type CachedPlan = PlannedLaunch | { readonly unsupported: string };
/** What lookupNormPlan gives for an invariant plan that the tuned kernels do not have (planNormInvariant's null). */
export const NO_INVARIANT_PLAN: { readonly unsupported: string } = Object.freeze({
  unsupported: "no tuned plan keeps this row length's sums fixed across row counts and paths (the fused kernels do)",
});

// Every tensor dtype has a code, so a plan asked for a 1-byte dtype is refused by planNorm (and cached), not mixed
// up with another problem's.
const DTYPE_CODE: Readonly<Record<DType, number>> = { f32: 0, f16: 1, bf16: 2, fp8e4m3: 3, fp8e5m2: 4, int8: 5 };

/** The plans of one device: by problem code (kind, D, dtypes), then by rows. Numbers as keys: no string per call. */
class PlanTable {
  readonly byProblem = new Map<number, Map<number, CachedPlan>>();
  size = 0;
}

function planTable(cache: Map<string, unknown>): PlanTable {
  let t = cache.get(CACHE_KEY) as PlanTable | undefined;
  if (!t) cache.set(CACHE_KEY, t = new PlanTable());
  return t;
}

/**
 * The plan for `p` from `cache` (a device's cache map), made with `limits()` on a miss. Refusals are cached
 * too: the same unsupported call fails as fast as a supported one succeeds.
 */
export function cachedNormPlan(cache: Map<string, unknown>, p: PlanInput, limits: () => PlanLimits): CachedPlan {
  return lookupNormPlan(cache, p.kind, p.rows, p.d, p.inputDtype, p.outputDtype, p.paramDtype, limits, undefined);
}

/**
 * cachedNormPlan without the PlanInput object (the ops' hot path: nothing allocated on a hit). On a miss the
 * limits come from `limits()` or, when it is undefined, from planLimits(device). `invariant`: planNormInvariant's plan
 * (NO_INVARIANT_PLAN where it has none), cached apart from planNorm's.
 */
export function lookupNormPlan(
  cache: Map<string, unknown>,
  kind: NormKind,
  rows: number,
  d: number,
  inputDtype: DType,
  outputDtype: DType,
  paramDtype: DType | undefined,
  limits: (() => PlanLimits) | undefined,
  device: Device | undefined,
  invariant = false,
): CachedPlan {
  const table = planTable(cache);
  // ((d·2 + kind)·8 + input)·8 + output)·8 + param (7 = none), then ·2 + invariant: exact below 2^53 for any D the ops
  // accept.
  const code = (((d * 2 + (kind === "layer" ? 1 : 0)) * 8 + DTYPE_CODE[inputDtype]) * 8 + DTYPE_CODE[outputDtype]) * 8 +
    (paramDtype === undefined ? 7 : DTYPE_CODE[paramDtype]);
  const problem = code * 2 + (invariant ? 1 : 0);
  let byRows = table.byProblem.get(problem);
  let hit = byRows?.get(rows);
  if (hit === undefined) {
    const p: PlanInput = { kind, rows, d, inputDtype, outputDtype, paramDtype };
    const l = limits ? limits() : planLimits(device!);
    const r = invariant ? planNormInvariant(p, l) : planNorm(p, l);
    hit = r === null ? NO_INVARIANT_PLAN : "plan" in r ? new PlannedLaunch(r.plan) : { unsupported: r.unsupported };
    if (table.size >= MAX_CACHED_PLANS) {
      table.byProblem.clear();
      table.size = 0;
      byRows = undefined;
    }
    if (!byRows) table.byProblem.set(problem, byRows = new Map());
    byRows.set(rows, hit);
    table.size++;
  }
  return hit;
}

/** How many plans `cache` (a device's cache map) holds. */
export function cachedPlanCount(cache: Map<string, unknown>): number {
  return (cache.get(CACHE_KEY) as PlanTable | undefined)?.size ?? 0;
}
