/**
 * The HIP path of the ops, end to end through the real FFI, against a FAKE libamdhip64 (tests/hip/fake_hip/): one
 * "AMD GPU" whose memory is host memory and whose launches run nothing. Checked: auto picks HIP when it has a
 * device and CUDA none; the gfx name is read from hipDeviceProp_t at the header's offset and stripped of feature
 * suffixes; the code object handed to hipModuleLoadData is the one built for that gfx target; the launch has the
 * plan's kernel, grid, block and LDS for the device's wave size, and the arguments at the launcher's layout.
 * Not checked (no AMD GPU here): that any kernel runs, or computes the right values, on AMD hardware.
 *
 * Needs HIP's headers (for the struct offset) and gcc/g++; skipped, saying which is missing, without them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { HIP_SYMBOLS } from "../../ffi/hip.ts";
import { ffi } from "../../ffi/runtime.ts";
import { NORM_FWD_ARGS, planLimits } from "../../ops/kernels.ts";
import { type PlanInput, planNorm } from "../../ops/plan.ts";
import { FUSED_ARGS } from "../../ops/fused_abi.ts";
import { fusedGeometry, fusedLaunch } from "../../ops/plan_fused.ts";
import type { ArgType } from "../../runtime/module.ts";
import { codeObject, deviceInfo } from "./targets.ts";

const dir = fileURLToPath(new URL("./fake_hip/", import.meta.url));
const HEADER = "/usr/include/hip/hip_runtime_api.h";
const has = (cmd: string) => spawnSync(cmd, ["--version"]).status === 0;
const skip = ffi === null
  ? "this runtime has no FFI"
  : !ffi.ffiAllowed()
  ? "FFI not permitted"
  : !existsSync(HEADER)
  ? `no HIP headers at ${HEADER} (Debian libamdhip64-dev)`
  : !has("gcc") || !has("g++")
  ? "gcc/g++ not found"
  : false;
if (skip) console.log(`# fake-HIP tests SKIPPED: ${skip}`);
const name = (s: string) => (skip ? `${s} [skipped: ${skip}]` : s);

/** Builds the fake library once; symbols the table has and fake_hip.c lacks are stubs that fail. */
let built: { lib: string; work: string } | undefined;
function fakeLib(): { lib: string; work: string } {
  if (built) return built;
  const work = mkdtempSync(join(tmpdir(), "normkit-fakehip-"));
  const have = readFileSync(join(dir, "fake_hip.c"), "utf8");
  const missing = Object.keys(HIP_SYMBOLS).filter((s) => !new RegExp(`\\b${s}\\(`).test(have));
  writeFileSync(join(work, "stubs.c"), missing.map((s) => `int ${s}(void) { return 1; }\n`).join(""));
  execFileSync("g++", ["-D__HIP_PLATFORM_AMD__", "-fPIC", "-c", join(dir, "prop_offset.cc"), "-o", join(work, "po.o")]);
  const lib = join(work, "libfakehip.so");
  execFileSync("gcc", [
    "-fPIC",
    "-shared",
    "-o",
    lib,
    join(dir, "fake_hip.c"),
    join(work, "stubs.c"),
    join(work, "po.o"),
  ]);
  return (built = { lib, work });
}

/** Runs tests/hip/fake_hip/run.ts in a child of this runtime; returns its JSON line and the fake's log lines. */
function run(
  scenario: string,
  env: Record<string, string>,
  args: string[] = [],
): { out: Record<string, unknown>; log: string[] } {
  const { lib, work } = fakeLib();
  const log = join(work, `${scenario}-${Date.now()}.log`);
  const script = join(dir, "run.ts");
  const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
  // Deno: --allow-read because loadKernels reads the AMD code object from packages/hip/ (ops/images.ts).
  const argv = isDeno
    ? ["run", "--allow-ffi", "--allow-env", "--allow-read", script, scenario, ...args]
    : [script, scenario, ...args];
  const r = spawnSync(process.execPath, argv, {
    encoding: "utf8",
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? work,
      NO_COLOR: "1",
      NORMKIT_CUDA_LIB: "/nonexistent/libcuda.so.1",
      NORMKIT_HIP_LIB: lib,
      NK_FAKE_LOG: log,
      ...env,
    },
  });
  assert.equal(r.status, 0, `${scenario}: ${r.stdout}\n${r.stderr}`);
  const line = r.stdout.trim().split("\n").pop()!;
  return { out: JSON.parse(line), log: existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : [] };
}

/** Fake devices of a wave-64 and a wave-32 target, each with the gcnArchName the fake reports (with suffixes or none). */
const FAKE_DEVICES = [["gfx942", "gfx942:sramecc+:xnack-", 64], ["gfx1100", "gfx1100", 32]] as const;

/** Runs `scenario` (rows of `d`) on one of FAKE_DEVICES, which the scenario must see as that device. */
function runOn(scenario: string, [arch, gcn, wave]: typeof FAKE_DEVICES[number], d: number) {
  const r = run(scenario, { NK_FAKE_ARCH: gcn, NK_FAKE_WAVE: String(wave) }, [String(d)]);
  assert.equal(r.out.arch, arch);
  assert.equal(r.out.warpSize, wave);
  return r;
}

/** The fake's log lines that start with `word`, without it (fake_hip.c: load, function, launch). */
const logged = (log: string[], word: string): string[] =>
  log.filter((l) => l.startsWith(`${word} `)).map((l) => l.slice(word.length + 1));

/** How the fake logs loading `code`: its size and FNV-1a 64 hash. */
function loaded(code: Uint8Array): string {
  let h = 0xcbf29ce484222325n;
  for (const x of code) h = BigInt.asUintN(64, (h ^ BigInt(x)) * 0x100000001b3n);
  return `${code.length} ${h.toString(16).padStart(16, "0")}`;
}

/** A launch's parameter slot (8 bytes, little-endian hex, as fake_hip.c logs it) read back as an argument type. */
const slot = (hex: string, t: string): number | bigint => {
  const v = BigInt(`0x${hex}`);
  return t === "f32"
    ? new Float32Array(new Uint32Array([Number(v & 0xffffffffn)]).buffer)[0]
    : t === "i32"
    ? Number(BigInt.asIntN(32, v))
    : BigInt.asIntN(64, v);
};

/** Every parameter slot of `kernel`'s launch holds the wanted argument, as the launcher packs `types`. */
function assertParams(kernel: string, params: string[], types: readonly ArgType[], want: (string | number)[]): void {
  assert.equal(params.length, types.length, `${kernel}: every argument slot filled`);
  params.forEach((hex, j) => {
    const t = types[j], exp = want[j];
    const e = t === "f32" ? Math.fround(Number(exp)) : t === "i32" ? Number(exp) : BigInt(exp);
    assert.equal(slot(hex, t), e, `${kernel} argument ${j} (${t})`);
  });
}

test.after(() => built && rmSync(built.work, { recursive: true, force: true }));

test(
  name(
    "Device.open() picks HIP when it has a device and CUDA has none; arch from gcnArchName, wave from the attribute",
  ),
  { skip },
  () => {
    const { out } = run("auto", { NK_FAKE_ARCH: "gfx90a:sramecc+:xnack-", NK_FAKE_WAVE: "64" });
    assert.deepEqual(out, {
      backend: "hip",
      arch: "gfx90a",
      warpSize: 64,
      name: "Fake AMD Instinct (normkit test double)",
    });
  },
);

for (const device of FAKE_DEVICES) {
  const [arch, , wave] = device;
  test(name(`${arch} (wave ${wave}): loads the ${arch} code object, launches the plan's kernel/geometry/arguments`), {
    skip,
  }, () => {
    const D = 2600, rows = 3;
    const { out, log } = runOn("norm", device, D);
    assert.match(
      String(out.beforeLoad),
      /UnsupportedError: .*not loaded: `await loadKernels\(dev\)`/,
      "a clear error before loadKernels",
    );

    assert.deepEqual(logged(log, "load"), [loaded(codeObject("norm", arch))], "one module: this target's");

    const limits = { maxGridX: 2147483647, maxThreadsPerBlock: 1024, warpSize: wave, ccMajor: 0, multiprocessors: 104 }; // fake_hip.c: MultiprocessorCount
    const launches = logged(log, "launch").map((l) => l.split(" "));
    assert.equal(launches.length, 2, log.join("\n"));
    const ptrs = out.ptrs as Record<string, string>;
    const cases: [PlanInput, (string | number)[]][] = [
      [{ kind: "layer", rows, d: D, inputDtype: "f32", outputDtype: "f32", paramDtype: "f32" }, [
        ptrs.x,
        ptrs.y,
        ptrs.w,
        ptrs.b,
        ptrs.mean,
        ptrs.rstd,
        rows,
        D,
        D,
        D,
        0.25,
      ]],
      [{ kind: "rms", rows, d: D, inputDtype: "bf16", outputDtype: "bf16" }, [
        ptrs.xh,
        ptrs.y2,
        0,
        0,
        0,
        0,
        rows,
        D,
        D,
        D,
        1e-6,
      ]],
    ];
    cases.forEach(([input, args], i) => {
      const r = planNorm(input, limits);
      assert.ok("plan" in r);
      const p = r.plan;
      const [kernel, gx, gy, gz, bx, by, bz, shared, ...params] = launches[i];
      assert.equal(kernel, p.kernel);
      assert.deepEqual([gx, gy, gz, bx, by, bz, shared].map(Number), [...p.grid, ...p.block, p.sharedBytes]);
      assert.equal(p.block[0] % wave, 0, "whole waves");
      assertParams(p.kernel, params, NORM_FWD_ARGS, [...args, p.tpr, p.nv, p.prefetch]);
    });
    // Only the two kernels launched were looked up.
    assert.deepEqual(logged(log, "function").sort(), launches.map((l) => l[0]).sort());
  });
}

test(name("an AMD GPU without a built code object (gfx1101): UnsupportedError naming it and the built targets"), {
  skip,
}, () => {
  const { out, log } = run("unsupported", { NK_FAKE_ARCH: "gfx1101", NK_FAKE_WAVE: "32" });
  assert.equal(out.arch, "gfx1101");
  for (const msg of [out.load, out.norm] as string[]) {
    assert.match(msg, /^UnsupportedError: no AMD code object for .*\(gfx1101\).*gfx90a, gfx942, gfx1100/);
  }
  assert.deepEqual(logged(log, "load"), [], "nothing loaded");
});

for (const device of FAKE_DEVICES) {
  const [arch, , wave] = device;
  test(name(`${arch} (wave ${wave}): a fused call loads the ${arch} fused code object, launches the fused plan`), {
    skip,
  }, () => {
    const D = 2600, rows = 3;
    const { out, log } = runOn("fused", device, D);
    assert.deepEqual(
      logged(log, "load").sort(),
      [loaded(codeObject("norm", arch)), loaded(codeObject("fused", arch))].sort(),
      "two modules: this target's norm and fused code objects",
    );
    const launches = logged(log, "launch").map((l) => l.split(" "));
    assert.equal(launches.length, 1, log.join("\n"));
    const g = fusedGeometry("rms", D, "f32", planLimits({ backend: "hip", info: deviceInfo(arch, wave) }), rows, "hip");
    assert.ok(!("unsupported" in g));
    const l = fusedLaunch(g, rows, { maxGridX: 2147483647 });
    const [kernel, gx, gy, gz, bx, by, bz, shared, ...params] = launches[0];
    assert.equal(kernel, "nk_fused_rms_f32_f32_f32");
    assert.deepEqual([gx, gy, gz, bx, by, bz, shared].map(Number), [...l.grid, ...l.block, 0]);
    // Three rows: the latency split, 256 threads of 4 chunks (650 chunks, 1024 leaves), on either wave.
    assert.deepEqual([g.tpr, g.nv, g.rule], [256, 4, "fused.latency"]);
    const ptrs = out.ptrs as Record<string, string>;
    // x, residual, h (= residual), y, weight, bias, weight2, mean, rstd, scale; n0, n1, d; the strides (rows of D,
    // one level: n0 = 1, n1 = rows, s0 the whole tensor); eps, scale_value, scale_ub, quant, split (= n1), tpr, nv.
    const want: (string | number)[] = [ptrs.x, ptrs.res, ptrs.res, ptrs.y, ptrs.w, 0, 0, 0, 0, 0, 1, rows, D];
    for (let t = 0; t < 4; t++) want.push(rows * D, D);
    want.push(0.125, 1, Infinity, 0, rows, g.tpr, g.nv);
    assertParams(kernel, params, FUSED_ARGS, want);
    assert.deepEqual(logged(log, "function"), [kernel]);
  });
}

for (const device of FAKE_DEVICES) {
  const [arch, , wave] = device;
  test(
    name(`${arch} (wave ${wave}): a quantized call loads the ${arch} fused_quant code object and launches from it`),
    {
      skip,
    },
    () => {
      const D = 2600, rows = 3;
      const { out, log } = runOn("fused-quant", device, D);
      assert.deepEqual(
        logged(log, "load").sort(),
        [loaded(codeObject("norm", arch)), loaded(codeObject("fused", arch)), loaded(codeObject("fused_quant", arch))]
          .sort(),
        "three modules: this target's norm, fused and fused_quant code objects",
      );
      const launches = logged(log, "launch").map((l) => l.split(" "));
      assert.equal(launches.length, 1, log.join("\n"));
      const g = fusedGeometry(
        "rms",
        D,
        "f32",
        planLimits({ backend: "hip", info: deviceInfo(arch, wave) }),
        rows,
        "hip",
      );
      assert.ok(!("unsupported" in g));
      const [kernel, ...rest] = launches[0];
      assert.equal(kernel, "nk_fused_rms_f32_int8_f32");
      const params = rest.slice(7);
      const ptrs = out.ptrs as Record<string, string>;
      // No residual (its strides and h's 0); y int8; static scale 0.5 by value (quant 1).
      const want: (string | number)[] = [ptrs.x, 0, 0, ptrs.y, ptrs.w, 0, 0, 0, 0, 0, 1, rows, D];
      want.push(rows * D, D, 0, 0, 0, 0, rows * D, D);
      want.push(0.125, 0.5, Infinity, 1, rows, g.tpr, g.nv);
      assertParams(kernel, params, FUSED_ARGS, want);
      assert.deepEqual(logged(log, "function"), [kernel]);
    },
  );
}
