/**
 * The Bun side of the FFI: bun:ffi.
 *
 * bun:ffi is reached through Bun's `import.meta.require`, only when this module's `bunFfi` is used under Bun,
 * not through an `import` declaration: ffi/runtime.ts imports this file statically under every runtime, and
 * neither Deno's module graph (`deno check`, `deno publish`, JSR) nor a type-checker without Bun's types may
 * see the `bun:ffi` specifier. `bun build` leaves `import.meta.require("bun:ffi")` for Bun to resolve at run time.
 */
import { readFile } from "node:fs/promises";
import process from "node:process";
import type { FfiRuntime, NativeLibrary, NativeType, SymbolTable } from "./types.ts";

/** The part of bun:ffi used here (its own types live in bun-types, which Deno and plain tsc users lack). */
interface BunFfiModule {
  dlopen(path: string, defs: Record<string, { args: string[]; returns: string }>): {
    // deno-lint-ignore no-explicit-any
    symbols: Record<string, (...args: any[]) => any>;
    close(): void;
  };
  ptr(view: ArrayBufferView): number;
  toArrayBuffer(addr: number, offset: number, bytes: number): ArrayBuffer;
  CString: new (addr: number) => { toString(): string };
}

let module: BunFfiModule | undefined;
function bunFfiModule(): BunFfiModule {
  return module ??= (import.meta as unknown as { require(id: string): BunFfiModule }).require("bun:ffi");
}

const BUN_TYPE: Record<NativeType, string> = {
  void: "void",
  i32: "i32",
  u32: "u32",
  i64: "i64",
  u64: "u64",
  f32: "f32",
  f64: "f64",
  buffer: "ptr",
};

/** The FFI over bun:ffi; use it only under Bun (ffi/runtime.ts picks it when `globalThis.Bun` exists). */
export const bunFfi: FfiRuntime = {
  name: "bun",
  readFile: async (fileUrl) => {
    const b = await readFile(new URL(fileUrl));
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  },
  open<T extends SymbolTable>(path: string, table: T): NativeLibrary<T> {
    const defs: Record<string, { args: string[]; returns: string }> = {};
    for (const [name, s] of Object.entries(table)) {
      defs[name] = { args: s.parameters.map((t) => BUN_TYPE[t]), returns: BUN_TYPE[s.result] };
    }
    const lib = bunFfiModule().dlopen(path, defs);
    return { path, symbols: lib.symbols as NativeLibrary<T>["symbols"], close: () => lib.close() };
  },
  addressOf(view: ArrayBufferView): bigint {
    // JSC keeps small typed arrays in its GC heap and moves their bytes out the first time their
    // ArrayBuffer is materialized: an address taken before that would dangle. Touch .buffer first.
    void view.buffer;
    return BigInt(bunFfiModule().ptr(view));
  },
  readCString(addr: bigint): string {
    return String(new (bunFfiModule().CString)(Number(addr)));
  },
  viewMemory(addr: bigint, bytes: number): ArrayBuffer {
    return bunFfiModule().toArrayBuffer(Number(addr), 0, bytes);
  },
  env(name: string): string | undefined {
    return process.env[name];
  },
  ffiAllowed(): boolean {
    return true;
  },
};
