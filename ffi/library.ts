/** Finding and opening a native library: environment override, clear errors. */
import { ffi } from "./runtime.ts";
import type { NativeLibrary, SymbolTable } from "./types.ts";

/** Thrown when a native library cannot be loaded; `reason` says why in one line. */
export class LibraryLoadError extends Error {
  override name = "LibraryLoadError";
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
    throw new LibraryLoadError(path, loadFailureReason(path, e instanceof Error ? e.message : String(e)));
  }
}

/**
 * The loader's own reason (dlerror's) from a runtime's dlopen message: Deno wraps it in "Could not open library: "
 * twice, Bun in `Failed to open library "name": ` and names the file it tried first, a bare name resolved against the
 * working directory, which is not where the library was looked for in the end. What is left names the library as
 * asked for, once: "cannot open shared object file: No such file or directory".
 */
export function loadFailureReason(path: string, message: string): string {
  let m = message.split("\n")[0].trim();
  const wrapper = /^(?:Could not open library: |Failed to open library "[^"]*": )/;
  while (wrapper.test(m)) m = m.replace(wrapper, "");
  // dlerror's "FILE: reason": FILE is the path as asked for or one made from it; the error names the library already.
  const base = path.slice(path.lastIndexOf("/") + 1);
  const colon = m.indexOf(": ");
  if (colon > 0 && m.slice(0, colon).endsWith(base)) m = m.slice(colon + 2);
  return m || "the loader gave no reason";
}
