/**
 * Static ABI check of ffi/cuda.ts (no GPU needed), and the FFI layer exercised for real on libc.
 *
 * - Every CUDA_SYMBOLS entry has a `// CUresult name(...)` prototype comment just above it; its parameter
 *   count and types must agree with the entry's `parameters` (C type → FFI type mapping below).
 * - When /usr/local/cuda/include/cuda.h exists (CI has nvcc): the prototype comments match cuda.h's own
 *   declarations, each table name is the one cuda.h's public name resolves to (the 64-bit `_v2` entry points),
 *   and the constants in ffi/cuda.ts equal cuda.h's values.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { commentAbove as sharedCommentAbove } from "../fixtures/symbol_comments.ts";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import {
  CU_DEVICE_ATTRIBUTE,
  CU_EVENT_DEFAULT,
  CU_EVENT_DISABLE_TIMING,
  CU_FUNC_ATTRIBUTE,
  CU_GRAPH_EXEC_UPDATE,
  CU_GRAPH_EXEC_UPDATE_RESULT_INFO,
  CU_LAUNCH_ATTRIBUTE,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
  CU_LAUNCH_CONFIG,
  CU_MEMHOSTALLOC_PORTABLE,
  CU_POINTER_ATTRIBUTE,
  CU_STREAM_CAPTURE_MODE,
  CU_STREAM_CAPTURE_STATUS,
  CU_STREAM_NON_BLOCKING,
  CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
  CUDA_ERROR_NOT_READY,
  CUDA_SUCCESS,
  CUDA_SYMBOLS,
} from "../../ffi/cuda.ts";
import { LibraryLoadError, openLibrary } from "../../ffi/library.ts";
import { ffi } from "../../ffi/runtime.ts";
import type { NativeType } from "../../ffi/types.ts";

const SOURCE = readFileSync(new URL("../../ffi/cuda.ts", import.meta.url), "utf8");
const CUDA_H = "/usr/local/cuda/include/cuda.h";
const HAVE_CUDA_H = existsSync(CUDA_H);
const NO_HEADER = `no CUDA header at ${CUDA_H}`;

interface Prototype {
  ret: string;
  params: string[]; // C types, parameter names removed, e.g. "const char **"
}

/** "const char **pStr" → "const char **"; "CUdevice dev" → "CUdevice"; "void" (alone) → no parameter. */
function paramType(decl: string): string {
  const d = decl.replace(/\s+/g, " ").trim();
  const m = /^(.*?[\s*])([A-Za-z_]\w*)$/.exec(d);
  assert.ok(m, `cannot split "${decl}" into type and name`);
  return m[1].replace(/\s*\*/g, " *").replace(/\* \*/g, "**").replace(/\s+/g, " ").trim();
}

/** The first `RET [CUDAAPI] name(...);` in `text`; `column0` skips indented (e.g. cuda.h's legacy) declarations. */
function parsePrototype(text: string, name: string, column0 = false): Prototype | undefined {
  const indent = column0 ? "" : "[ \\t]*";
  const re = new RegExp(`(?:^|\\n)${indent}(\\w+)\\s+(?:CUDAAPI\\s+)?${name}\\s*\\(([^)]*)\\)\\s*;`);
  const m = re.exec(text);
  if (!m) return undefined;
  const inner = m[2].replace(/\s+/g, " ").trim();
  const params = inner === "" || inner === "void" ? [] : inner.split(",").map(paramType);
  return { ret: m[1], params };
}

function commentAbove(name: string): string {
  return sharedCommentAbove(SOURCE, name, "ffi/cuda.ts");
}

function commentPrototype(name: string): Prototype {
  const p = parsePrototype(commentAbove(name), name);
  assert.ok(p, `${name}: no "// CUresult ${name}(...);" prototype comment just above its entry`);
  return p;
}

const U64_TYPES = new Set([
  "CUdeviceptr",
  "size_t",
  "CUstream",
  "CUevent",
  "CUmodule",
  "CUfunction",
  "CUcontext",
  "CUgraph",
  "CUgraphExec",
  "unsigned long long",
]);
const I32_TYPES = new Set([
  "int",
  "CUdevice",
  "CUresult",
  "CUdevice_attribute",
  "CUfunction_attribute",
  "CUstreamCaptureMode",
  "CUpointer_attribute",
]);
const U32_TYPES = new Set(["unsigned int", "unsigned char"]);

/** The FFI types a C parameter type may travel as on x86-64 / aarch64 Linux (LP64). */
function allowedFfiTypes(cType: string): readonly NativeType[] {
  if (cType.includes("*")) return ["buffer", "u64"];
  const t = cType.replace(/^const /, "");
  if (U64_TYPES.has(t)) return ["u64"];
  if (I32_TYPES.has(t)) return ["i32"];
  if (U32_TYPES.has(t)) return ["u32"];
  if (t === "float") return ["f32"];
  throw new Error(`no mapping known for C type "${cType}"`);
}

const SYMBOLS = Object.entries(CUDA_SYMBOLS) as [string, { parameters: readonly NativeType[]; result: NativeType }][];

test("the prototype parser itself: types, names, pointers, void, two-line comments", () => {
  assert.deepEqual(parsePrototype("CUresult f(const char **pStr, CUdevice dev, unsigned int  Flags);", "f"), {
    ret: "CUresult",
    params: ["const char **", "CUdevice", "unsigned int"],
  });
  assert.deepEqual(parsePrototype("CUresult g(void);", "g"), { ret: "CUresult", params: [] });
  assert.deepEqual(parsePrototype("CUresult h(int *a,\n   void** b, float c);", "h"), {
    ret: "CUresult",
    params: ["int *", "void **", "float"],
  });
  assert.equal(parsePrototype("CUresult hh(int a);", "h"), undefined, "must not match a longer name");
  assert.deepEqual(allowedFfiTypes("const void *"), ["buffer", "u64"]);
  assert.throws(() => allowedFfiTypes("double"), /no mapping/);
});

test(`every CUDA_SYMBOLS entry (${SYMBOLS.length}) has a prototype comment whose arity and types match`, () => {
  assert.ok(SYMBOLS.length >= 40, `expected the whole driver table, got ${SYMBOLS.length} entries`);
  const problems: string[] = [];
  for (const [name, spec] of SYMBOLS) {
    const proto = commentPrototype(name);
    if (proto.ret !== "CUresult") problems.push(`${name}: returns ${proto.ret}, expected CUresult`);
    if (spec.result !== "i32") problems.push(`${name}: result ${spec.result}, CUresult is "i32"`);
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
});

test("the multi-line prototypes (cuOccupancy…, cuLaunchKernel) are read completely", () => {
  assert.equal(commentPrototype("cuOccupancyMaxActiveBlocksPerMultiprocessor").params.length, 4);
  const launch = commentPrototype("cuLaunchKernel");
  assert.equal(launch.params.length, 11);
  assert.deepEqual(launch.params.slice(-2), ["void **", "void **"]);
});

function headerText(): string {
  return readFileSync(CUDA_H, "utf8");
}

/** The public name cuda.h #defines to `entry` (cuGraphInstantiate → cuGraphInstantiateWithFlags), if any. */
function headerPublicName(h: string, entry: string): string | undefined {
  const m = new RegExp(`^\\s*#define\\s+(\\w+)\\s+(?:__CUDA_API_PT(?:DS|SZ)\\()?${entry}\\)?\\s*$`, "m").exec(h);
  return m?.[1];
}

/** What cuda.h's public name for `symbol` (the symbol without a _vN suffix) is #defined to, if anything. */
function headerAlias(h: string, base: string): string | undefined {
  const m = new RegExp(`^\\s*#define\\s+${base}\\s+(?:__CUDA_API_PT(?:DS|SZ)\\()?(\\w+)\\)?\\s*$`, "m").exec(h);
  return m?.[1];
}

test(
  HAVE_CUDA_H
    ? "prototype comments agree with cuda.h's declarations"
    : `prototype comments agree with cuda.h [skipped: ${NO_HEADER}]`,
  { skip: HAVE_CUDA_H ? false : NO_HEADER },
  () => {
    const h = headerText();
    const problems: string[] = [];
    for (const [name] of SYMBOLS) {
      const base = name.replace(/_v\d+$/, "");
      // cuda.h declares the public (unsuffixed) name at column 0; the legacy declarations further down are indented.
      // An entry point with no `_vN` suffix of its own may still be what a public name is #defined to.
      const publicName = headerPublicName(h, name);
      const decl = parsePrototype(h, base, true) ?? parsePrototype(h, name, true) ??
        (publicName ? parsePrototype(h, publicName, true) : undefined);
      if (!decl) {
        problems.push(`${name}: no declaration of ${base} in cuda.h`);
        continue;
      }
      const ours = commentPrototype(name);
      if (JSON.stringify(decl) !== JSON.stringify(ours)) {
        problems.push(`${name}: cuda.h (${decl.params.join(", ")}) vs comment (${ours.params.join(", ")})`);
      }
    }
    assert.deepEqual(problems, []);
  },
);

test(
  HAVE_CUDA_H
    ? "each table name is the entry point cuda.h binds its public name to"
    : `table names vs cuda.h aliases [skipped: ${NO_HEADER}]`,
  { skip: HAVE_CUDA_H ? false : NO_HEADER },
  () => {
    const h = headerText();
    const problems: string[] = [];
    for (const [name] of SYMBOLS) {
      const base = name.replace(/_v\d+$/, "");
      const alias = headerAlias(h, base) ?? base;
      if (alias === name) continue;
      // A deliberate choice of the older entry point must be explained in the entry's comment.
      const remarks = commentAbove(name).replace(new RegExp(`CUresult\\s+${name}\\s*\\([^)]*\\)\\s*;`), "");
      if (/_v\d/.test(remarks)) continue;
      problems.push(`${name}: cuda.h binds ${base} to ${alias}`);
    }
    assert.deepEqual(problems, []);
  },
);

function headerValue(h: string, name: string): number {
  const m = new RegExp(`(?:^|\\s)${name}\\s*(?:=\\s*)?(0x[0-9a-fA-F]+|\\d+)\\b`, "m").exec(h);
  assert.ok(m, `${name} not found in cuda.h`);
  return Number(m[1]);
}

test(
  HAVE_CUDA_H ? "constants equal cuda.h's values" : `constants equal cuda.h's values [skipped: ${NO_HEADER}]`,
  { skip: HAVE_CUDA_H ? false : NO_HEADER },
  () => {
    const h = headerText();
    const ours: Record<string, number> = {
      CUDA_SUCCESS,
      CUDA_ERROR_NOT_READY,
      CU_STREAM_NON_BLOCKING,
      CU_EVENT_DEFAULT,
      CU_EVENT_DISABLE_TIMING,
      CU_MEMHOSTALLOC_PORTABLE,
      CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
      CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
      CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
    };
    for (const [k, v] of Object.entries(CU_STREAM_CAPTURE_MODE)) ours[`CU_STREAM_CAPTURE_MODE_${k}`] = v;
    for (const [k, v] of Object.entries(CU_STREAM_CAPTURE_STATUS)) ours[`CU_STREAM_CAPTURE_STATUS_${k}`] = v;
    for (const [k, v] of Object.entries(CU_GRAPH_EXEC_UPDATE)) ours[`CU_GRAPH_EXEC_UPDATE_${k}`] = v;
    for (const [k, v] of Object.entries(CU_DEVICE_ATTRIBUTE)) ours[`CU_DEVICE_ATTRIBUTE_${k}`] = v;
    for (const [k, v] of Object.entries(CU_FUNC_ATTRIBUTE)) ours[`CU_FUNC_ATTRIBUTE_${k}`] = v;
    for (const [k, v] of Object.entries(CU_POINTER_ATTRIBUTE)) ours[`CU_POINTER_ATTRIBUTE_${k}`] = v;
    assert.ok(Object.keys(ours).length >= 25);
    const wrong = Object.entries(ours)
      .filter(([k, v]) => headerValue(h, k) !== v)
      .map(([k, v]) => `${k}: ours ${v}, cuda.h ${headerValue(h, k)}`);
    assert.deepEqual(wrong, []);
  },
);

// The struct layouts the driver reads or writes through raw memory, from the C compiler itself.
const CC = ["gcc", "cc"].find((c) => {
  try {
    execFileSync(c, ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
});
const LAYOUT_SKIP = !HAVE_CUDA_H ? NO_HEADER : !CC ? "no C compiler (gcc/cc)" : false;

test(
  LAYOUT_SKIP
    ? `struct layouts equal cuda.h's [skipped: ${LAYOUT_SKIP}]`
    : "struct layouts (CUlaunchConfig, CUgraphExecUpdateResultInfo) equal cuda.h's",
  { skip: LAYOUT_SKIP },
  () => {
    const dir = mkdtempSync("/tmp/normkit-layout-");
    try {
      writeFileSync(
        `${dir}/l.c`,
        `#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\\n", sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream),
    offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute),
    offsetof(CUlaunchAttribute, value), offsetof(CUlaunchAttribute, value.clusterDim.x),
    offsetof(CUlaunchAttribute, value.programmaticStreamSerializationAllowed), sizeof(CUgraphExecUpdateResultInfo),
    offsetof(CUgraphExecUpdateResultInfo, result));
  return 0;
}
`,
      );
      execFileSync(CC!, ["-I/usr/local/cuda/include", "-o", `${dir}/l`, `${dir}/l.c`]);
      const got = execFileSync(`${dir}/l`, { encoding: "utf8" }).trim().split(" ").map(Number);
      assert.deepEqual(got, [
        CU_LAUNCH_CONFIG.size,
        CU_LAUNCH_CONFIG.stream,
        CU_LAUNCH_CONFIG.attrs,
        CU_LAUNCH_CONFIG.numAttrs,
        CU_LAUNCH_ATTRIBUTE.size,
        CU_LAUNCH_ATTRIBUTE.value,
        CU_LAUNCH_ATTRIBUTE.value,
        CU_LAUNCH_ATTRIBUTE.value,
        CU_GRAPH_EXEC_UPDATE_RESULT_INFO.size,
        CU_GRAPH_EXEC_UPDATE_RESULT_INFO.result,
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

// ---- the FFI layer, for real, on libc --------------------------------------------------------------------

const LIBC = {
  memcpy: { parameters: ["buffer", "buffer", "u64"], result: "u64" },
  memset: { parameters: ["buffer", "i32", "u64"], result: "u64" },
  strlen: { parameters: ["buffer"], result: "u64" },
  abs: { parameters: ["i32"], result: "i32" },
} as const;

const FFI_SKIP = ffi === null
  ? "this runtime has no FFI"
  : !ffi.ffiAllowed()
  ? "FFI not permitted (--allow-ffi)"
  : false;
const name = (s: string) => (FFI_SKIP ? `${s} [skipped: ${FFI_SKIP}]` : s);

test(name("libc through ffi: buffer arguments honour byteOffset, u64 results are bigint"), { skip: FFI_SKIP }, () => {
  const lib = ffi!.open("libc.so.6", LIBC);
  try {
    const dst = new Uint8Array(16);
    const src = new Uint8Array([10, 11, 12, 13, 14, 15, 16, 17]);
    const r = lib.symbols.memcpy(dst.subarray(3), src.subarray(2), 4n);
    assert.equal(typeof r, "bigint", "u64 result is a bigint");
    assert.equal(r, ffi!.addressOf(dst) + 3n, "memcpy returns dest: the subarray's address");
    assert.deepEqual([...dst], [0, 0, 0, 12, 13, 14, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    // A view that does not start at its buffer's start, over a larger ArrayBuffer.
    const f = new Float32Array(new ArrayBuffer(64), 8, 4);
    lib.symbols.memset(f.subarray(1), 0x3f, 8n);
    const all = new Uint8Array(f.buffer);
    assert.deepEqual([...all.subarray(8, 12)], [0, 0, 0, 0], "bytes before the subarray untouched");
    assert.deepEqual([...all.subarray(12, 20)], new Array(8).fill(0x3f));
    assert.deepEqual([...all.subarray(20, 24)], [0, 0, 0, 0], "bytes after the range untouched");
    assert.equal(lib.symbols.abs(-7), 7);
    const s = new TextEncoder().encode("xxnormkit\0");
    const len = lib.symbols.strlen(s.subarray(2));
    assert.equal(typeof len, "bigint");
    assert.equal(len, 7n);
  } finally {
    lib.close();
  }
});

// Deno: a symbol the library lacks comes back null (an older driver), and the others are declared without
// `optional` (ffi/deno.ts opens a probe first), for which Deno makes fast calls.
const DENO_SKIP = FFI_SKIP ||
  (ffi!.name !== "deno" ? "the null-for-missing contract is Deno's (bun:ffi refuses the open)" : false);
test(
  DENO_SKIP
    ? `a missing symbol is null, the others callable [skipped: ${DENO_SKIP}]`
    : "a missing symbol is null, the others callable (Deno)",
  { skip: DENO_SKIP },
  () => {
    const lib = ffi!.open("libc.so.6", { ...LIBC, nk_no_such_symbol: { parameters: ["i32"], result: "i32" } } as const);
    try {
      assert.equal(lib.symbols.nk_no_such_symbol, null);
      assert.equal(lib.symbols.abs(-12), 12);
      assert.equal(lib.symbols.strlen(new TextEncoder().encode("abc\0")), 3n);
    } finally {
      lib.close();
    }
  },
);

test(name("addressOf: subarrays are offset by their byteOffset; stable for one view"), { skip: FFI_SKIP }, () => {
  const buf = new Uint8Array(64);
  const base = ffi!.addressOf(buf);
  assert.equal(typeof base, "bigint");
  assert.ok(base !== 0n);
  assert.equal(ffi!.addressOf(buf.subarray(5)), base + 5n);
  assert.equal(ffi!.addressOf(new Uint32Array(buf.buffer, 16, 4)), base + 16n);
  assert.equal(ffi!.addressOf(buf), base, "the address does not change between calls");
});

test(name("readCString and viewMemory write-through"), { skip: FFI_SKIP }, () => {
  const text = new TextEncoder().encode("ab\u00e9cd\0tail");
  assert.equal(ffi!.readCString(ffi!.addressOf(text)), "ab\u00e9cd", "UTF-8, stops at the NUL");
  assert.equal(ffi!.readCString(ffi!.addressOf(text.subarray(1))), "b\u00e9cd");

  const backing = new Uint8Array(32);
  const addr = ffi!.addressOf(backing);
  const view = new Uint8Array(ffi!.viewMemory(addr + 4n, 8));
  assert.equal(view.byteLength, 8);
  view[0] = 0xaa;
  view[7] = 0xbb;
  assert.equal(backing[4], 0xaa, "a write through the view lands in the memory");
  assert.equal(backing[11], 0xbb);
  backing[5] = 0x42;
  assert.equal(view[1], 0x42, "and the view sees writes to the memory");
  const lib = ffi!.open("libc.so.6", LIBC);
  try {
    lib.symbols.memset(backing.subarray(4), 7, 3n);
    assert.deepEqual([...view.subarray(0, 4)], [7, 7, 7, 0]);
  } finally {
    lib.close();
  }
});

test(name("openLibrary: a missing library throws LibraryLoadError naming the path"), { skip: FFI_SKIP }, () => {
  const path = "/nonexistent/normkit/libdoesnotexist.so.9";
  let err: unknown;
  try {
    openLibrary(path, "NORMKIT_TEST_UNSET_LIBRARY_VAR", LIBC);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof LibraryLoadError, `expected LibraryLoadError, got ${err}`);
  assert.equal(err.library, path);
  assert.ok(err.message.includes(path), err.message);
  assert.ok(err.reason.length > 0);
  assert.ok(!err.reason.includes("\n"), "the reason is one line");
  // and an existing library opens through the same function
  const lib = openLibrary("libc.so.6", "NORMKIT_TEST_UNSET_LIBRARY_VAR", LIBC);
  try {
    assert.equal(lib.symbols.abs(-3), 3);
  } finally {
    lib.close();
  }
});
