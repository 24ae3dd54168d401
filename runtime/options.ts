/**
 * Options objects: a key normkit does not know is refused, not ignored, so that a misspelt option (`weigth`,
 * `epsilon`, `backnd`) fails with an ArgumentError naming it instead of running without it. TypeScript catches such
 * keys in object literals; this catches them in JavaScript and in objects built at run time.
 */
import { ArgumentError } from "./errors.ts";

/** The keys one kind of options object may have. */
export type OptionKeys = ReadonlySet<string>;

/** The set of `keys`, made once per kind of options object. */
export function optionKeys(...keys: string[]): OptionKeys {
  return new Set(keys);
}

/** `{ stream? }`: the options of every call that takes none but a stream. */
export const STREAM_KEYS: OptionKeys = optionKeys("stream");

/**
 * Throws ArgumentError naming `${prefix}${key}` for the first enumerable string key of `o` not in `known`.
 * `for…in`: own and inherited enumerable keys, as a spread or a destructuring default would see them.
 */
export function refuseUnknownKeys(o: object, known: OptionKeys, prefix = ""): void {
  for (const k in o) {
    if (!known.has(k)) throw new ArgumentError(`${prefix}${k}`, `only ${[...known].join(", ")}`, "an unknown key");
  }
}

/**
 * An options argument: nothing (undefined), or an object of none but the `keys` (each optional). ArgumentError
 * naming `options` for anything else, or the unknown key.
 */
export function checkOptionKeys(opts: unknown, keys: OptionKeys): object | undefined {
  if (opts === undefined) return undefined;
  if (typeof opts !== "object" || opts === null) {
    throw new ArgumentError("options", `an options object { ${[...keys].join("?, ")}? } or nothing`, opts);
  }
  refuseUnknownKeys(opts, keys);
  return opts;
}
