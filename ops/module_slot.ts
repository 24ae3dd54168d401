/**
 * One module per device, loaded from an image once: the norm kernels' forward and backward (ops/kernels.ts) and the
 * fused kernels' (ops/fused_module.ts). The module lives in device.cache; the image is kept outside it (device.recover() clears the
 * cache), so that the module comes back, synchronously, from the same bytes.
 */
import type { Device } from "../runtime/device.ts";
import type { Module } from "../runtime/module.ts";
import { findImage, imageChoice, type ImageKind, type KernelImageSet, readImage } from "./images.ts";

export class ModuleSlot {
  readonly #images = new WeakMap<Device, Uint8Array>();

  /**
   * @param key The device-cache key of the module.
   * @param missing Throws the error for a device whose image was never loaded (which call loads it).
   */
  constructor(readonly key: string, readonly missing: (device: Device) => never) {}

  /** Loads `image` as `device`'s module unless one is loaded. */
  load(device: Device, image: Uint8Array): void {
    if (this.loaded(device)) return;
    device.cache.set(this.key, device.loadModule(image));
    this.#images.set(device, image);
  }

  /**
   * Reads the `kind` image of the device's target (the first of `sets` that has it, else normkit's own: findImage) and
   * loads it, unless the module is loaded (or the device is the CPU).
   */
  async loadFrom(device: Device, sets: readonly KernelImageSet[], kind: ImageKind): Promise<void> {
    if (this.loaded(device)) return;
    const choice = imageChoice(device);
    const src = findImage(choice, sets, `${device.info.name} (${choice.target})`, kind);
    this.load(device, await readImage(src)); // nothing if a concurrent call loaded it meanwhile
  }

  /** Whether the module is loaded on `device` (always true on the CPU: there is none to load). */
  loaded(device: Device): boolean {
    const mod = device.cache.get(this.key) as Module | undefined;
    return device.backend === "cpu" || (mod !== undefined && !mod.closed);
  }

  /** The module: loaded, or loaded again from its image after a recovery; `missing` where it never was. */
  module(device: Device): Module {
    let mod = device.cache.get(this.key) as Module | undefined;
    if (!mod || mod.closed) {
      const image = this.#images.get(device);
      if (!image) this.missing(device);
      mod = device.loadModule(image);
      device.cache.set(this.key, mod);
    }
    return mod;
  }

  /** Closes and forgets the module and its image (a module that failed a check is not kept). */
  drop(device: Device): void {
    (device.cache.get(this.key) as Module | undefined)?.close();
    device.cache.delete(this.key);
    this.#images.delete(device);
  }
}
