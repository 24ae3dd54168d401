/**
 * A fused-kernel A/B: two or more builds of kernels/fused.cu (sm_90 cubins from lab/kernel_ab/trimmed_cubin.sh --fused), each
 * launched directly with the op's own plan (fusedGeometry at the case's row count) on the same tensors. Each build's
 * h, y and scales must equal the op's bit for bit (a change to the schedule, not to the arithmetic; with `--near`, a
 * change to the arithmetic: h bit for bit, y within a step of its dtype, the scales within 1e-5); then each is
 * timed in the order given and again reversed (A B … B A), and the mean of its two runs is printed:
 *
 * - decode: 1 row, D 2048 / 4096 / 8192 (1, 2 and 4 chunks a thread), device µs per op in a CUDA graph (add +
 *   RMSNorm, → fp8e4m3 dynamic, add + LayerNorm), each build's kernel launched as the op launches it (programmatic
 *   dependent launch where launchesDependent says so);
 * - prefill: rows moving ≥ 512 MiB, D 4096 / 8192 (or `--ds`), % of a device-to-device copy of the same run (the six
 *   calls of the split sweep: four fused, two plain batch-invariant), and D 128 (a head's length: the sub-warp split
 *   QK-norm takes) for add + RMSNorm, → fp8e4m3.
 *
 *   deno run -A lab/fused_geometry/ab.ts A.cubin B.cubin [...] [--only decode|prefill] [--ds 4096,8192] [--near]
 *     [--x bf16|f16] [--json out.json]
 *
 * `--x f16`: x, residual, h, a float y, weight and bias in f16 (default bf16).
 *
 * The JSON is rewritten after every case, so a run stopped by a time limit keeps the cases it finished.
 */
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { GpuError, type Kernel, type Module, type Stream } from "../../gpu.ts";
import { FUSED_ARGS } from "../../ops/fused_abi.ts";
import { fusedGeometry, fusedKernelFor, fusedKernelName } from "../../ops/plan_fused.ts";
import { launchesDependent } from "../../ops/kernels.ts";
import {
  agrees,
  agreesNear,
  bitsOf,
  caseBytes,
  caseKey,
  caseTensors,
  measureCase,
  openLab,
  option,
  poison,
  type Variant,
  VARIANTS,
  viaKernel,
  viaOp,
  wholeNumbers,
  type X16,
  yDtype,
} from "./cases.ts";

const args = process.argv.slice(2);
const jsonPath = option("--json");
const only = option("--only");
const near = args.includes("--near");
const prefillDs = wholeNumbers(option("--ds"), [4096, 8192]);
const valued = ["--json", "--only", "--ds", "--x"];
const paths = args.filter((a, i) => !a.startsWith("--") && !valued.includes(args[i - 1]));
function usage(): never {
  console.error(
    "usage: lab/fused_geometry/ab.ts A.cubin B.cubin [...] [--only decode|prefill] [--ds 4096,8192] [--near] " +
      "[--x bf16|f16] [--json out.json]",
  );
  process.exit(2);
}
const xArg = option("--x") ?? "bf16";
const x16: X16 = xArg === "bf16" || xArg === "f16" ? xArg : usage();
if (paths.length < 2 || (only !== undefined && only !== "decode" && only !== "prefill")) usage();
using lab = await openLab("lab/fused_geometry/ab.ts");
const { dev, timer, copyGBs, limits, tile } = lab;
using held = new DisposableStack();
const modules: Module[] = paths.map((p) => held.use(dev.loadModule(readFileSync(p))));
console.log(`# ${dev.info.name}, copy ${copyGBs.toFixed(0)} GB/s; x ${x16}; builds: ${paths.join(", ")}`);
const results: Record<string, unknown>[] = [];

function run(mode: "decode" | "prefill", rows: number, d: number, v: Variant) {
  using cs = new DisposableStack();
  const t = caseTensors(dev, cs, tile, rows, d, x16);
  const g = fusedGeometry(v.kind, d, x16, limits, rows, "cuda");
  if ("unsupported" in g) throw new Error(g.unsupported);
  const to = yDtype(v, x16);
  const choice = fusedKernelFor(v.kind, x16, to, x16, g, "cuda");
  if ("unsupported" in choice) throw new Error(choice.unsupported);
  // Per build, the first of these it has: the op's kernel for this geometry; the triple's one kernel (builds without
  // the few-chunk kernels). Each build's kernel is named in the JSON.
  const base = fusedKernelName(v.kind, x16, to, x16);
  const names = [choice.kernel, base];
  const kernelOf = (m: Module): Kernel => {
    for (const name of names) {
      try {
        const k = m.kernel(name, FUSED_ARGS);
        k.dependentLaunch = launchesDependent(dev, name); // as the op launches it (fused_module.ts)
        return k;
      } catch (e) {
        if (!(e instanceof GpuError) || name === base) throw e;
      }
    }
    throw new Error("unreachable: the last name is the triple's kernel");
  };
  const kernels: Kernel[] = modules.map(kernelOf);
  const direct = (k: Kernel, s: Stream) => viaKernel(k, t, v, rows, d, g, limits.maxGridX, s);
  const bytes = caseBytes(rows, d, v);
  const measure = (k: Kernel) => measureCase(dev, timer, copyGBs, mode, bytes, (s) => direct(k, s));
  poison(t);
  viaOp(t, v);
  dev.synchronize();
  const want = bitsOf(t, v);
  const checks = kernels.map((k) => {
    poison(t);
    direct(k, dev.stream);
    dev.synchronize();
    return near ? agreesNear(t, v, want) : agrees(t, v, want);
  });
  const order = [...kernels.keys(), ...[...kernels.keys()].reverse()];
  const sums = kernels.map(() => 0);
  const passed = (i: number) => checks[i].startsWith("ok");
  for (const i of order) if (passed(i)) sums[i] += measure(kernels[i]) / 2;
  const unit = mode === "decode" ? "µs/op" : "%copy";
  const cells = kernels.map((_, i) => (passed(i) ? sums[i].toFixed(2) : checks[i]).padStart(8));
  console.log(
    `${mode} ${v.name.padEnd(11)} D=${String(d).padEnd(5)} (tpr ${g.tpr} nv ${g.nv} ${choice.variant}) ${unit}: ${
      cells.join(" ")
    }${checks.some((c) => c.startsWith("ok (")) ? `  [${checks.join(" | ")}]` : ""}`,
  );
  results.push({
    ...caseKey(mode, v, d, rows, g),
    kernels: kernels.map((k) => k.name),
    unit,
    values: sums,
    checks,
  });
  if (jsonPath) {
    writeFileSync(
      jsonPath,
      JSON.stringify({ device: dev.info.name, copyGBs, x: x16, builds: paths, results }, null, 1),
    );
  }
}

if (only !== "prefill") {
  for (const d of [2048, 4096, 8192]) for (const v of VARIANTS.slice(0, 3)) run("decode", 1, d, v);
}
if (only !== "decode") {
  for (const d of prefillDs) for (const v of VARIANTS) run("prefill", Math.ceil(2 ** 29 / (d * 8)), d, v);
  for (const v of VARIANTS.slice(0, 2)) run("prefill", 2 ** 29 / (128 * 8), 128, v);
}
