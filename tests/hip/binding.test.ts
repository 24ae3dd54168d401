/**
 * The HIP (AMD) backend's host side, checked without an AMD GPU.
 *
 * - Static: every HIP_SYMBOLS entry in ffi/hip.ts has a prototype comment just above it whose parameter count and
 *   types agree with the entry. When HIP's headers are installed (/usr/include/hip, Debian libamdhip64-dev), the
 *   comments must equal the header's declarations and the enum constants the header's values.
 * - With libamdhip64.so loadable (Debian libamdhip64-5 + -dev, or $NORMKIT_HIP_LIB): every symbol resolves, the
 *   runtime reports no device, openHipDriver() and Device.open({ backend: "hip" }) fail saying "no HIP device",
 *   and Device.open() falls back to the CPU naming HIP. Without it these are skipped with the reason in the name.
 * Nothing past hipInit can run here: there is no AMD GPU.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { commentAbove as sharedCommentAbove } from "../fixtures/symbol_comments.ts";
import process from "node:process";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  HIP_DEVICE_ATTRIBUTE,
  HIP_DEVICE_PROP,
  HIP_ERROR_INVALID_DEVICE,
  HIP_ERROR_NO_DEVICE,
  HIP_ERROR_NOT_READY,
  HIP_EVENT_DEFAULT,
  HIP_EVENT_DISABLE_TIMING,
  HIP_FUNC_ATTRIBUTE,
  HIP_HOST_MALLOC_PORTABLE,
  HIP_POINTER_ATTRIBUTE,
  HIP_STREAM_NON_BLOCKING,
  HIP_SUCCESS,
  HIP_SYMBOLS,
} from "../../ffi/hip.ts";
import { LibraryLoadError, openLibrary } from "../../ffi/library.ts";
import { ffi } from "../../ffi/runtime.ts";
import type { NativeType } from "../../ffi/types.ts";
import { Device } from "../../runtime/device.ts";
import { BackendUnavailableError, GpuError } from "../../runtime/errors.ts";
import { gfxArch, openHipDriver } from "../../runtime/hip.ts";

const SOURCE = readFileSync(new URL("../../ffi/hip.ts", import.meta.url), "utf8");
const SYMBOLS = Object.entries(HIP_SYMBOLS) as [string, { parameters: readonly NativeType[]; result: NativeType }][];

interface Prototype {
  ret: string;
  params: string[];
}

function paramType(decl: string): string {
  const d = decl.replace(/\s*=\s*\w+\s*$/, "").replace(/\s+/g, " ").trim(); // drop C++ default arguments
  const m = /^(.*?[\s*])([A-Za-z_]\w*)$/.exec(d);
  assert.ok(m, `cannot split "${decl}" into type and name`);
  return m[1].replace(/\s*\*/g, " *").replace(/\* \*/g, "**").replace(/\s+/g, " ").trim();
}

/** The first `RET name(...);` (RET may be `const char*`) in `text`. */
function parsePrototype(text: string, name: string): Prototype | undefined {
  const clean = text.replace(/__dparm\([^)]*\)/g, "");
  const re = new RegExp(`(?:^|\\n)[ \\t]*((?:const\\s+)?\\w+\\s*\\*?)\\s*${name}\\s*\\(([^)]*)\\)\\s*;`);
  const m = re.exec(clean);
  if (!m) return undefined;
  const inner = m[2].replace(/\s+/g, " ").trim();
  const params = inner === "" || inner === "void" ? [] : inner.split(",").map(paramType);
  return { ret: m[1].replace(/\s+/g, " ").replace(/\s*\*/, "*").trim(), params };
}

function commentAbove(name: string): string {
  return sharedCommentAbove(SOURCE, name, "ffi/hip.ts");
}

function commentPrototype(name: string): Prototype {
  const p = parsePrototype(commentAbove(name), name);
  assert.ok(p, `${name}: no "// hipError_t ${name}(...);" prototype comment just above its entry`);
  return p;
}

const U64_TYPES = new Set([
  "hipDeviceptr_t",
  "size_t",
  "hipStream_t",
  "hipEvent_t",
  "hipModule_t",
  "hipFunction_t",
]);
const I32_TYPES = new Set([
  "int",
  "hipDevice_t",
  "hipError_t",
  "hipDeviceAttribute_t",
  "hipFunction_attribute",
  "hipFuncAttribute",
]);
const U32_TYPES = new Set(["unsigned int", "unsigned", "unsigned char"]);

function allowedFfiTypes(cType: string): readonly NativeType[] {
  if (cType.includes("*")) return ["buffer", "u64"];
  const t = cType.replace(/^const /, "");
  if (U64_TYPES.has(t)) return ["u64"];
  if (I32_TYPES.has(t)) return ["i32"];
  if (U32_TYPES.has(t)) return ["u32"];
  throw new Error(`no mapping known for C type "${cType}"`);
}

test("HIP prototype parser: const char* results, default arguments, multi-line", () => {
  assert.deepEqual(parsePrototype("const char* hipGetErrorName(hipError_t hip_error);", "hipGetErrorName"), {
    ret: "const char*",
    params: ["hipError_t"],
  });
  assert.deepEqual(parsePrototype("hipError_t f(hipEvent_t e, hipStream_t stream = NULL);", "f"), {
    ret: "hipError_t",
    params: ["hipEvent_t", "hipStream_t"],
  });
  assert.deepEqual(parsePrototype("hipError_t g(int* a,\n  void** b, unsigned flags);", "g")?.params, [
    "int *",
    "void **",
    "unsigned",
  ]);
  assert.equal(parsePrototype("hipError_t gg(int a);", "g"), undefined);
});

test(`every HIP_SYMBOLS entry (${SYMBOLS.length}) has a prototype comment whose arity and types match`, () => {
  assert.ok(SYMBOLS.length >= 40, `expected the whole runtime table, got ${SYMBOLS.length}`);
  const problems: string[] = [];
  for (const [name, spec] of SYMBOLS) {
    const proto = commentPrototype(name);
    const wantResult = proto.ret === "hipError_t" ? "i32" : proto.ret === "const char*" ? "u64" : undefined;
    if (wantResult === undefined) problems.push(`${name}: unexpected return type ${proto.ret}`);
    else if (spec.result !== wantResult) problems.push(`${name}: result ${spec.result}, expected ${wantResult}`);
    if (proto.params.length !== spec.parameters.length) {
      problems.push(`${name}: C has ${proto.params.length} parameters, the table ${spec.parameters.length}`);
      continue;
    }
    proto.params.forEach((cType, i) => {
      const ok = allowedFfiTypes(cType);
      if (!ok.includes(spec.parameters[i])) {
        problems.push(
          `${name} parameter ${i} (${cType}): table says "${spec.parameters[i]}", expected ${ok.join(" or ")}`,
        );
      }
    });
  }
  assert.deepEqual(problems, []);
  assert.equal(commentPrototype("hipModuleLaunchKernel").params.length, 11);
  assert.equal(commentPrototype("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor").params.length, 4);
});

// ---- against HIP 5.2's headers, when installed ---------------------------------------------------------------

const HIP_H = "/usr/include/hip/hip_runtime_api.h";
const DRIVER_TYPES_H = "/usr/include/hip/driver_types.h";
const NO_HEADER = existsSync(HIP_H) && existsSync(DRIVER_TYPES_H) ? false : `no HIP headers at ${HIP_H}`;
const hname = (s: string) => (NO_HEADER ? `${s} [skipped: ${NO_HEADER}]` : s);

/** Values of every enumerator in `text`'s `typedef enum NAME { ... }` blocks (sequential, `= N` or `= other`). */
function enumValues(text: string): Map<string, number> {
  const values = new Map<string, number>();
  const noComments = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  for (const m of noComments.matchAll(/\benum\b[^{;()]*\{([^}]*)\}/g)) {
    let next = 0;
    for (const item of m[1].split(",")) {
      const e = /^\s*(\w+)\s*(?:=\s*([^,]+?))?\s*$/.exec(item);
      if (!e || !e[1]) continue;
      if (e[2] !== undefined) {
        const v = e[2].trim();
        next = /^(0x[0-9a-fA-F]+|-?\d+)$/.test(v) ? Number(v) : values.get(v) ?? NaN;
      }
      values.set(e[1], next);
      next++;
    }
  }
  return values;
}

function defineValue(text: string, name: string): number | undefined {
  const m = new RegExp(`^\\s*#define\\s+${name}\\s+\\(?(0x[0-9a-fA-F]+|\\d+)`, "m").exec(text);
  return m ? Number(m[1]) : undefined;
}

test(hname("prototype comments equal hip_runtime_api.h's declarations"), { skip: NO_HEADER }, () => {
  const h = readFileSync(HIP_H, "utf8");
  const problems: string[] = [];
  for (const [name] of SYMBOLS) {
    const decl = parsePrototype(h, name);
    if (!decl) {
      problems.push(`${name}: not declared in ${HIP_H}`);
      continue;
    }
    const ours = commentPrototype(name);
    if (JSON.stringify(decl) !== JSON.stringify(ours)) {
      problems.push(
        `${name}: header ${decl.ret} (${decl.params.join(", ")}) vs comment ${ours.ret} (${ours.params.join(", ")})`,
      );
    }
  }
  assert.deepEqual(problems, []);
});

test(hname("enum constants equal HIP 5.2's header values (hipDeviceAttribute_t is not CUDA's numbering)"), {
  skip: NO_HEADER,
}, () => {
  const h = readFileSync(HIP_H, "utf8") + "\n" + readFileSync(DRIVER_TYPES_H, "utf8");
  const e = enumValues(h);
  const ours: Record<string, number> = {
    hipSuccess: HIP_SUCCESS,
    hipErrorNoDevice: HIP_ERROR_NO_DEVICE,
    hipErrorInvalidDevice: HIP_ERROR_INVALID_DEVICE,
    hipErrorNotReady: HIP_ERROR_NOT_READY,
  };
  for (const [k, v] of Object.entries(HIP_DEVICE_ATTRIBUTE)) ours[`hipDeviceAttribute${k}`] = v;
  for (const [k, v] of Object.entries(HIP_FUNC_ATTRIBUTE)) ours[`HIP_FUNC_ATTRIBUTE_${k}`] = v;
  const wrong = Object.entries(ours)
    .filter(([k, v]) => e.get(k) !== v)
    .map(([k, v]) => `${k}: ours ${v}, header ${e.get(k)}`);
  const defines: Record<string, number> = {
    hipStreamNonBlocking: HIP_STREAM_NON_BLOCKING,
    hipEventDefault: HIP_EVENT_DEFAULT,
    hipEventDisableTiming: HIP_EVENT_DISABLE_TIMING,
    hipHostMallocPortable: HIP_HOST_MALLOC_PORTABLE,
  };
  for (const [k, v] of Object.entries(defines)) {
    if (defineValue(h, k) !== v) wrong.push(`${k}: ours ${v}, header ${defineValue(h, k)}`);
  }
  assert.deepEqual(wrong, []);
  // Sanity of the enum reader on known anchors: the AMD-specific block starts at 10000.
  assert.equal(e.get("hipDeviceAttributeAmdSpecificBegin"), 10000);
  assert.equal(e.get("hipDeviceAttributeCudaCompatibleBegin"), 0);
});

/** The sizes and offsets that `main` prints (space-separated), compiled with g++ against HIP's header. */
function headerNumbers(main: string): number[] {
  const dir = mkdtempSync(join(tmpdir(), "normkit-hipheader-"));
  try {
    writeFileSync(
      join(dir, "p.cc"),
      `#include <hip/hip_runtime_api.h>\n#include <cstddef>\n#include <cstdio>\n${main}\n`,
    );
    execFileSync("g++", ["-D__HIP_PLATFORM_AMD__", "-o", join(dir, "p"), join(dir, "p.cc")]);
    return execFileSync(join(dir, "p"), { encoding: "utf8" }).trim().split(" ").map(Number);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test(hname("HIP_DEVICE_PROP equals offsetof/sizeof in the header's hipDeviceProp_t (compiled with g++)"), {
  skip: NO_HEADER,
}, () => {
  const [size, gcnArchNameOffset, gcnArchNameSize] = headerNumbers(`int main() {
  std::printf("%zu %zu %zu\\n", sizeof(hipDeviceProp_t), offsetof(hipDeviceProp_t, gcnArchName),
              sizeof(((hipDeviceProp_t*)0)->gcnArchName));
}`);
  assert.deepEqual({ size, gcnArchNameOffset, gcnArchNameSize }, { ...HIP_DEVICE_PROP });
});

test(hname("HIP_POINTER_ATTRIBUTE equals offsetof/sizeof in the header's hipPointerAttribute_t (compiled with g++)"), {
  skip: NO_HEADER,
}, () => {
  const [size, device] = headerNumbers(
    `int main() { std::printf("%zu %zu\\n", sizeof(hipPointerAttribute_t), offsetof(hipPointerAttribute_t, device)); }`,
  );
  assert.deepEqual({ size, device }, { ...HIP_POINTER_ATTRIBUTE });
});

test("gfxArch: gcnArchName → base gfx target, feature suffixes stripped; anything else undefined", () => {
  assert.equal(gfxArch("gfx90a:sramecc+:xnack-"), "gfx90a");
  assert.equal(gfxArch("gfx942:sramecc+:xnack-"), "gfx942");
  assert.equal(gfxArch("gfx942:xnack+"), "gfx942");
  assert.equal(gfxArch("gfx1100"), "gfx1100");
  assert.equal(gfxArch("gfx1101"), "gfx1101");
  assert.equal(gfxArch("gfx908:sramecc-"), "gfx908");
  for (const bad of ["", "gfx", "sm_90", "AMD Instinct MI300X", "gfx942:", "gfx942 junk", "\x01\x02"]) {
    assert.equal(gfxArch(bad), undefined, JSON.stringify(bad));
  }
});

// ---- the real library, when loadable ----------------------------------------------------------------------------

const loadable: string | false = (() => {
  if (ffi === null) return "this runtime has no FFI";
  if (!ffi.ffiAllowed()) return "FFI not permitted (--allow-ffi)";
  try {
    openLibrary("libamdhip64.so", "NORMKIT_HIP_LIB", HIP_SYMBOLS).close();
    return false;
  } catch (e) {
    return `libamdhip64 not loadable: ${e instanceof Error ? e.message : e}`;
  }
})();
if (loadable) console.log(`# HIP runtime tests SKIPPED: ${loadable}`);
const lname = (s: string) => (loadable ? `${s} [skipped: ${loadable}]` : s);

test(lname("libamdhip64 loads with the whole table; HIP reports no device"), { skip: loadable }, () => {
  const lib = openLibrary("libamdhip64.so", "NORMKIT_HIP_LIB", HIP_SYMBOLS);
  try {
    for (const [name] of SYMBOLS) assert.equal(typeof lib.symbols[name as keyof typeof HIP_SYMBOLS], "function", name);
    const s = lib.symbols;
    assert.equal(ffi!.readCString(s.hipGetErrorName(HIP_ERROR_NO_DEVICE)), "hipErrorNoDevice");
    assert.ok(ffi!.readCString(s.hipGetErrorString(HIP_ERROR_NO_DEVICE)).length > 0);
    const ver = new Int32Array(1);
    assert.equal(s.hipDriverGetVersion(ver), HIP_SUCCESS);
    assert.ok(ver[0] > 0, `driver version ${ver[0]}`);
    const init = s.hipInit(0);
    const count = new Int32Array([-1]);
    const rc = s.hipGetDeviceCount(count);
    // No AMD GPU here: hipInit fails (HIP 5.2: hipErrorInvalidDevice) or the count is 0 (hipErrorNoDevice).
    assert.ok(init !== HIP_SUCCESS || count[0] === 0, `hipInit ${init}, hipGetDeviceCount ${rc} → ${count[0]}`);
    assert.ok(rc === HIP_ERROR_NO_DEVICE || count[0] === 0, `hipGetDeviceCount ${rc} → ${count[0]}`);
  } finally {
    lib.close();
  }
});

test(lname('openHipDriver() fails with a GpuError saying "no HIP device"'), { skip: loadable }, () => {
  assert.throws(() => openHipDriver(), (e: unknown) => {
    assert.ok(e instanceof GpuError, `expected GpuError, got ${e}`);
    assert.equal(e.backend, "hip");
    assert.match(e.message, /no HIP device/);
    assert.match(e.codeName, /^hipError/);
    return true;
  });
  assert.equal(Device.hipDeviceCount(), 0);
});

test(lname('Device.open({ backend: "hip" }) throws BackendUnavailableError saying "no HIP device"'), {
  skip: loadable,
}, () => {
  assert.throws(() => Device.open({ backend: "hip" }), (e: unknown) => {
    assert.ok(e instanceof BackendUnavailableError, `expected BackendUnavailableError, got ${e}`);
    assert.equal(e.backend, "hip");
    assert.match(e.reason, /no HIP device/);
    return true;
  });
});

const cudaPresent = (() => {
  try {
    return Device.cudaDeviceCount() > 0;
  } catch {
    return false;
  }
})();
const autoSkip = loadable || (cudaPresent ? "a CUDA device is present, so auto picks CUDA" : false);
test(
  autoSkip
    ? `Device.open() falls back to the CPU naming HIP [skipped: ${autoSkip}]`
    : "Device.open() falls back to the CPU naming CUDA and HIP",
  {
    skip: autoSkip,
  },
  () => {
    const dev = Device.open();
    try {
      assert.equal(dev.backend, "cpu");
      assert.match(dev.fallbackReason ?? "", /CUDA: .+; HIP: .*no HIP device/);
    } finally {
      dev.close();
    }
  },
);

// ---- NORMKIT_HIP_LIB ---------------------------------------------------------------------------------------------

const FFI_SKIP = ffi === null ? "this runtime has no FFI" : !ffi.ffiAllowed() ? "FFI not permitted" : false;
test(
  FFI_SKIP
    ? `NORMKIT_HIP_LIB → missing file [skipped: ${FFI_SKIP}]`
    : "NORMKIT_HIP_LIB pointing at a missing file → LibraryLoadError naming it",
  {
    skip: FFI_SKIP,
  },
  () => {
    const path = "/nonexistent/normkit/libamdhip64-missing.so";
    const before = process.env.NORMKIT_HIP_LIB;
    process.env.NORMKIT_HIP_LIB = path;
    try {
      assert.equal(ffi!.env("NORMKIT_HIP_LIB"), path, "the override is visible to the FFI layer");
      assert.throws(() => openHipDriver(), (e: unknown) => {
        assert.ok(e instanceof LibraryLoadError, `expected LibraryLoadError, got ${e}`);
        assert.equal(e.library, path);
        assert.ok(e.message.includes(path), e.message);
        return true;
      });
    } finally {
      if (before === undefined) delete process.env.NORMKIT_HIP_LIB;
      else process.env.NORMKIT_HIP_LIB = before;
    }
  },
);
