/**
 * The runtime-neutral description of a native library's symbols.
 *
 * Only a handful of C types are needed to describe the CUDA and HIP APIs on 64-bit Linux:
 * - every opaque handle (CUcontext, CUstream, …) and every device pointer or size_t travels as "u64"
 *   (a bigint in JS), which is ABI-identical to a pointer on LP64 and keeps Deno's pointer objects and
 *   Bun's pointer numbers out of the rest of the code;
 * - "buffer" is a pointer to host memory that JS owns (a TypedArray or DataView), used for out-params and
 *   host-side copies; `null` passes NULL.
 */
export type NativeType = "void" | "i32" | "u32" | "i64" | "u64" | "f32" | "f64" | "buffer";

/** One C function: its parameter and result types. */
export interface SymbolSpec {
  readonly parameters: readonly NativeType[];
  readonly result: NativeType;
}

/** A library's symbol table: name → signature. */
export type SymbolTable = Readonly<Record<string, SymbolSpec>>;

/** Host-memory argument for a "buffer" parameter. */
export type HostPointer = ArrayBufferView | null;

// deno-lint-ignore no-explicit-any
export type NativeFunction = (...args: any[]) => any;

/** A loaded library: callable symbols and close(). */
export interface NativeLibrary<T extends SymbolTable> {
  readonly path: string;
  readonly symbols: { readonly [K in keyof T]: NativeFunction };
  close(): void;
}

/** What differs between Deno and Bun, and nothing else. */
export interface FfiRuntime {
  readonly name: "deno" | "bun";
  /** dlopen `path` with `table`; throws the runtime's own error when the library cannot be loaded. */
  open<T extends SymbolTable>(path: string, table: T): NativeLibrary<T>;
  /** The address of a view's first byte. The view must stay reachable while the address is in use. */
  addressOf(view: ArrayBufferView): bigint;
  /** Reads a NUL-terminated C string at `addr` (not freed: the strings read here are static). */
  readCString(addr: bigint): string;
  /** An ArrayBuffer over `bytes` bytes of native memory at `addr` (no copy; valid while the memory is). */
  viewMemory(addr: bigint, bytes: number): ArrayBuffer;
  /** The value of an environment variable if readable without a prompt, else undefined. */
  env(name: string): string | undefined;
  /** Whether FFI is permitted at all (Deno: --allow-ffi). */
  ffiAllowed(): boolean;
  /** The bytes of a local file given by its file: URL (a kernel image beside the modules). Deno: --allow-read. */
  readFile(fileUrl: string): Promise<Uint8Array>;
}
