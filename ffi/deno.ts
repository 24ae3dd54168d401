/** The Deno side of the FFI: Deno.dlopen and Deno.UnsafePointer. */
import type { FfiRuntime, NativeLibrary, NativeType, SymbolTable } from "./types.ts";

// Declared locally so that this file type-checks under Bun's types too.
// deno-lint-ignore no-explicit-any
const D: any = (globalThis as any).Deno;

const DENO_TYPE: Record<NativeType, string> = {
  void: "void", i32: "i32", u32: "u32", i64: "i64", u64: "u64", f32: "f32", f64: "f64", buffer: "buffer",
};

function pointerOf(addr: bigint): unknown {
  return D.UnsafePointer.create(addr);
}

type DenoDefs = Record<string, { parameters: string[]; result: string; optional?: boolean }>;

/** Opens `path` with the symbols of `defs` it has (a probe with every symbol optional says which). */
function openPresent(path: string, defs: DenoDefs) {
  const probeDefs: DenoDefs = {};
  for (const [name, def] of Object.entries(defs)) probeDefs[name] = { ...def, optional: true };
  const probe = D.dlopen(path, probeDefs); // throws when the library itself cannot be opened
  const present: DenoDefs = {};
  for (const name of Object.keys(defs)) if (probe.symbols[name] !== null) present[name] = defs[name];
  try {
    return D.dlopen(path, present);
  } finally {
    probe.close(); // after the second open: the library stays loaded in between (dlopen counts references)
  }
}

export const denoFfi: FfiRuntime = {
  name: "deno",
  open<T extends SymbolTable>(path: string, table: T): NativeLibrary<T> {
    const defs: DenoDefs = {};
    for (const [name, s] of Object.entries(table)) {
      defs[name] = { parameters: s.parameters.map((t) => DENO_TYPE[t]), result: DENO_TYPE[s.result] };
    }
    // A missing symbol (an older driver) must become null instead of failing the whole dlopen, which is what
    // `optional: true` does; but Deno makes no fast call for an optional symbol: 0.2–0.4 µs per call instead
    // of about 0.01 (measured, Deno 2.9), a tenth of a kernel launch. So the library is opened with every
    // symbol required, and only when that fails does a probe opened with every symbol optional say which
    // exist, for a second open with those alone, none optional. (Each open compiles a call stub per symbol:
    // ~4–10 ms for the CUDA table, so the probe is skipped where nothing is missing, as with current drivers.)
    let lib;
    try {
      lib = D.dlopen(path, defs);
    } catch {
      lib = openPresent(path, defs);
    }
    const symbols: Record<string, unknown> = {};
    for (const name of Object.keys(defs)) symbols[name] = lib.symbols[name] ?? null;
    return { path, symbols: symbols as NativeLibrary<T>["symbols"], close: () => lib.close() };
  },
  addressOf(view: ArrayBufferView): bigint {
    return BigInt(D.UnsafePointer.value(D.UnsafePointer.of(view)));
  },
  readCString(addr: bigint): string {
    return D.UnsafePointerView.getCString(pointerOf(addr));
  },
  viewMemory(addr: bigint, bytes: number): ArrayBuffer {
    return D.UnsafePointerView.getArrayBuffer(pointerOf(addr), bytes);
  },
  env(name: string): string | undefined {
    // Reading the environment needs --allow-env; ask without prompting and treat "not granted" as unset.
    const state = D.permissions.querySync?.({ name: "env", variable: name })?.state;
    if (state !== "granted") return undefined;
    return D.env.get(name);
  },
  ffiAllowed(): boolean {
    return D.permissions.querySync?.({ name: "ffi" })?.state === "granted";
  },
  readFile: (fileUrl) => D.readFile(new URL(fileUrl)),
};
