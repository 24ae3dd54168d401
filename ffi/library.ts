/** Finding and opening a native library: environment override, clear errors. */
import { ffi } from "./runtime.ts";
import type { NativeLibrary, SymbolTable } from "./types.ts";

/** Thrown when a native library cannot be loaded; `reason` says why in one line. */
export class LibraryLoadError extends Error {
  /** "LibraryLoadError". */
  override name = "LibraryLoadError";
  /**
   * Made when a native library cannot be opened.
   * @param library The path (or name) that was tried.
   * @param reason Why it could not be opened, in one line.
   */
  constructor(readonly library: string, readonly reason: string) {
    super(`cannot load ${library}: ${reason}`);
  }
}

/**
 * dlopen `defaultPath` (or the path in the environment variable `envVar` when it is set and readable)
 * with `table`. Throws LibraryLoadError with the reason when the runtime has no FFI, FFI is not permitted,
 * or the library is missing.
 */
export function openLibrary<T extends SymbolTable>(defaultPath: string, envVar: string, table: T): NativeLibrary<T> {
  if (!ffi) throw new LibraryLoadError(defaultPath, "this JavaScript runtime has no FFI (normkit needs Deno or Bun)");
  const path = ffi.env(envVar) || defaultPath;
  if (!ffi.ffiAllowed()) throw new LibraryLoadError(path, "FFI is not permitted (run Deno with --allow-ffi)");
  try {
    return ffi.open(path, table);
  } catch (e) {
    const msg = e instanceof Error ? e.message.split("\n")[0] : String(e);
    throw new LibraryLoadError(path, msg);
  }
}
