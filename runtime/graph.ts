/**
 * CUDA graphs from stream capture: record a sequence of launches and copies once, replay it with one
 * driver call (cuGraphLaunch), which is what makes 1–64-row norms cheap on the host.
 *
 *   using graph = stream.capture(() => rmsNorm(x, { weight, out: y, stream }));
 *   using exec = graph.instantiate();
 *   exec.launch(stream);                 // as often as wanted; x and y are read/written at their addresses
 *
 * A graph remembers device addresses, not objects: keep the buffers it uses open while it can be launched.
 * To run the same work on other buffers, capture again and `exec.update(newGraph)` (cheaper than a new
 * instantiate when only arguments changed; GraphUpdateError says when the driver refuses).
 */
import type { Device } from "./device.ts";
import type { GraphDriver, GraphUpdateRefusal } from "./driver.ts";
import { ArgumentError, UnsupportedError } from "./errors.ts";
import { Resource } from "./resource.ts";
import type { Stream } from "./stream.ts";

export type { CaptureMode, CaptureStatus, GraphUpdateRefusal } from "./driver.ts";

/** The driver refused to update an executable graph in place; it is unchanged and still launchable. */
export class GraphUpdateError extends Error {
  /** "GraphUpdateError". */
  override name = "GraphUpdateError";
  /**
   * Made by GraphExec.update(), not by users.
   * @param reason Why the driver refused (its CUgraphExecUpdateResult).
   */
  constructor(readonly reason: GraphUpdateRefusal) {
    super(
      `the executable graph cannot be updated from this graph (${reason}): only kernel arguments, copy and ` +
        `memset addresses may change; capture the same sequence of operations, or instantiate the new graph`,
    );
  }
}

/** @internal The device's graph driver, or UnsupportedError saying why there is none. */
export function graphDriver(device: Device, what: string): GraphDriver {
  const d = device.activeDriver;
  if (!d) {
    throw new UnsupportedError(
      `${what}: graphs need a GPU backend (the CPU backend runs each operation as it is called, so there is nothing to capture)`,
    );
  }
  if (!d.graphs) throw new UnsupportedError(`${what}: graph capture is not bound for the ${d.backend} backend yet`);
  return d.graphs;
}

/**
 * A captured graph (CUgraph): a template; instantiate() makes something launchable. Made by
 * `stream.capture()` or `stream.endCapture()`. CUDA only: the CPU backend has nothing to capture.
 * Every method throws DisposedError once it (or its device) is closed.
 *
 * @example
 * ```ts
 * import { Device, loadKernels, rmsNorm } from "@normkit/normkit";
 * using dev = Device.open({ backend: "cuda" });
 * await loadKernels(dev);
 * using stream = dev.createStream();
 * using x = dev.tensor(new Float32Array(2 * 512).fill(3), [2, 512]);
 * using weight = dev.tensor(new Float32Array(512).fill(1), [512]);
 * using y = dev.empty([2, 512]);
 * rmsNorm(x, { weight, out: y, stream });     // once before capturing: loads the kernel, caches the plan
 * using graph = stream.capture(() => rmsNorm(x, { weight, out: y, stream }));
 * using exec = graph.instantiate();
 * exec.launch(stream);
 * ```
 */
export class Graph extends Resource {
  /** The device whose context holds the graph. */
  readonly device: Device;
  readonly #handle: bigint;

  /** @internal use stream.endCapture() or stream.capture() */
  constructor(device: Device, handle: bigint, graphs: GraphDriver) {
    // The release keeps the driver, not the device (a forgotten graph must not keep its device alive). It makes
    // no call while recover() resets the context (which drops the graph) or after a sticky error (it would fail).
    const canRelease = device.canRelease;
    super(device.owner, () => canRelease() && graphs.destroy(handle), device);
    this.device = device;
    this.#handle = handle;
  }

  /** "Graph", for error messages. */
  protected get label(): string {
    return "Graph";
  }

  /** The native handle (CUgraph), for interop. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /**
   * Compiles the graph into an executable one (CUgraphExec). The Graph may be closed afterwards.
   * Throws GpuError when the driver refuses.
   */
  instantiate(): GraphExec {
    const h = this.handle;
    const graphs = graphDriver(this.device, "Graph.instantiate");
    return new GraphExec(this.device, graphs.instantiate(h), graphs);
  }
}

/**
 * An executable graph (CUgraphExec): launch it on any stream of its device, as often as wanted. Made by
 * `graph.instantiate()`. Every method throws DisposedError once it (or its device) is closed.
 */
export class GraphExec extends Resource {
  /** The device whose context holds the executable graph. */
  readonly device: Device;
  readonly #handle: bigint;

  /** @internal use graph.instantiate() */
  constructor(device: Device, handle: bigint, graphs: GraphDriver) {
    const canRelease = device.canRelease;
    super(device.owner, () => canRelease() && graphs.destroyExec(handle), device);
    this.device = device;
    this.#handle = handle;
  }

  /** "GraphExec", for error messages. */
  protected get label(): string {
    return "GraphExec";
  }

  /** The native handle (CUgraphExec), for interop. */
  get handle(): bigint {
    this.assertOpen();
    return this.#handle;
  }

  /**
   * Queues the whole graph on `stream` (default: the device's stream). One driver call.
   *
   * @throws {ArgumentError} when `stream` belongs to another device.
   * @throws {GpuError} when the driver refuses the launch.
   */
  launch(stream: Stream = this.device.stream): void {
    const h = this.handle;
    if (stream.device !== this.device) throw new ArgumentError("stream", "a Stream of the graph's device", stream);
    const s = stream.handle; // DisposedError when closed
    graphDriver(this.device, "GraphExec.launch").launch(h, s);
  }

  /**
   * Takes the parameters (kernel arguments, copy addresses) of `graph`, which must have the same nodes in
   * the same order (typically: the same code captured with other buffers). Throws GraphUpdateError when
   * the driver refuses; this executable graph is then unchanged.
   *
   * @throws {ArgumentError} when `graph` is not a Graph of this device.
   * @throws {GraphUpdateError} when the driver refuses the update.
   */
  update(graph: Graph): void {
    const h = this.handle;
    if (!(graph instanceof Graph) || graph.device !== this.device) {
      throw new ArgumentError("graph", "a Graph of the same device", graph);
    }
    const refusal = graphDriver(this.device, "GraphExec.update").update(h, graph.handle);
    if (refusal !== null) throw new GraphUpdateError(refusal);
  }
}
