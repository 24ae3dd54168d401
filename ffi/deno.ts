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

export const denoFfi: FfiRuntime = {
  name: "deno",
  open<T extends SymbolTable>(path: string, table: T): NativeLibrary<T> {
    const defs: Record<string, { parameters: string[]; result: string; optional: boolean }> = {};
    for (const [name, s] of Object.entries(table)) {
      // optional: a missing symbol (an older driver) becomes null instead of failing the whole dlopen.
      defs[name] = { parameters: s.parameters.map((t) => DENO_TYPE[t]), result: DENO_TYPE[s.result], optional: true };
    }
    const lib = D.dlopen(path, defs);
    return { path, symbols: lib.symbols, close: () => lib.close() };
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
};
