// The C side of bench/latency.ts: the same norm launches (kernel, grid, block, shared memory, arguments)
// over the same fatbin, straight through the driver API, measured the same way:
//   eager_host_us    one cuLaunchKernel, median of 2000 each timed alone (sync every 256, untimed)
//   eager_batch_us   batches of 16 launches timed as one interval, per launch, median over the batches
//   clock_us         an empty interval (the clock's own cost), median of 1000
//   eager_device_us  events around 2000 back-to-back launches, divided by 2000
//   eager_sync_us    launch + cuStreamSynchronize, median of 300
//   graph_host_us    cuGraphLaunch of a captured graph of 100 launches, median of 200, divided by 100
//   graph_device_us  events around 200 replays, divided by 200 * 100
//
//   bash bench/build-c.sh && bench/latency_c precompiled/norm.fatbin cases.txt [out.json]
//   (bash scripts/fatbin.sh first: it joins the per-architecture images into precompiled/norm.fatbin)
//
// cases.txt comes from `bench/latency.ts --cases`: one line per case,
//   kind rows d kernel grid block shared cluster tpr nv prefetch dependent
// (dependent = 1: programmatic dependent launch, cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, as normkit launches on sm_90 by default.)
// libcuda.so.1 is dlopen()ed (builds without a driver); cuda.h is included for types only.
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define F(name, ret, args) typedef ret(*t_##name) args; static t_##name p_##name;
F(cuInit, CUresult, (unsigned))
F(cuGetErrorName, CUresult, (CUresult, const char **))
F(cuDeviceGet, CUresult, (CUdevice *, int))
F(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))
F(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice))
F(cuCtxSetCurrent, CUresult, (CUcontext))
F(cuModuleLoadData, CUresult, (CUmodule *, const void *))
F(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *))
F(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))
F(cuMemFree_v2, CUresult, (CUdeviceptr))
F(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void *, size_t))
F(cuStreamCreate, CUresult, (CUstream *, unsigned))
F(cuStreamSynchronize, CUresult, (CUstream))
F(cuEventCreate, CUresult, (CUevent *, unsigned))
F(cuEventRecord, CUresult, (CUevent, CUstream))
F(cuEventSynchronize, CUresult, (CUevent))
F(cuEventElapsedTime, CUresult, (float *, CUevent, CUevent))
F(cuLaunchKernelEx, CUresult, (const CUlaunchConfig *, CUfunction, void **, void **))
F(cuLaunchKernel, CUresult, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **))
F(cuStreamBeginCapture_v2, CUresult, (CUstream, CUstreamCaptureMode))
F(cuStreamEndCapture, CUresult, (CUstream, CUgraph *))
F(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec *, CUgraph, unsigned long long))
F(cuGraphLaunch, CUresult, (CUgraphExec, CUstream))
F(cuGraphExecDestroy, CUresult, (CUgraphExec))
F(cuGraphDestroy, CUresult, (CUgraph))

static void check(CUresult r, const char *what, int line) {
  if (r == CUDA_SUCCESS) return;
  const char *name = NULL;
  if (!p_cuGetErrorName || p_cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "?";
  fprintf(stderr, "latency_c: %s failed: %s (%d) at line %d\n", what, name, (int)r, line);
  exit(1);
}
#define CK(call) check((call), #call, __LINE__)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {  // same rule as latency.ts: the element at floor(n / 2)
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "latency_c: cannot read %s\n", path); exit(1); }
  buf[n] = 0;
  fclose(f);
  *size = (size_t)n;
  return buf;
}

// bf16 bits of pseudo-random values in [lo, hi): never all zeros.
static void fill_bf16(uint16_t *v, size_t n, unsigned seed, float lo, float hi) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    float f = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    v[i] = (uint16_t)(bits >> 16);
  }
}
static CUdeviceptr upload_bf16(size_t n, unsigned seed, float lo, float hi) {
  uint16_t *h = malloc(n * 2);
  if (!h) exit(1);
  fill_bf16(h, n, seed, lo, hi);
  CUdeviceptr p;
  CK(p_cuMemAlloc_v2(&p, n * 2));
  CK(p_cuMemcpyHtoD_v2(p, h, n * 2));
  free(h);
  return p;
}

enum { N = 2000, SYNC_EVERY = 256, N_SYNC = 300, GRAPH_OPS = 100, REPLAYS = 200, BATCH = 16, N_CLOCK = 1000 };  // SYNC_EVERY % BATCH == 0

#define SYM(name)                                                                  \
  do {                                                                             \
    *(void **)&p_##name = dlsym(lib, #name);                                       \
    if (!p_##name) { fprintf(stderr, "latency_c: no symbol %s\n", #name); return 1; } \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: latency_c norm.fatbin cases.txt [out.json]\n"); return 2; }
  size_t image_size;
  void *image = read_file(argv[1], &image_size);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "latency_c: dlopen(libcuda.so.1): %s\n", dlerror()); return 1; }
  SYM(cuInit); SYM(cuGetErrorName); SYM(cuDeviceGet); SYM(cuDevicePrimaryCtxRetain);
  SYM(cuDevicePrimaryCtxRelease_v2); SYM(cuCtxSetCurrent); SYM(cuModuleLoadData); SYM(cuModuleGetFunction);
  SYM(cuMemAlloc_v2); SYM(cuMemFree_v2); SYM(cuMemcpyHtoD_v2); SYM(cuStreamCreate); SYM(cuStreamSynchronize);
  SYM(cuEventCreate); SYM(cuEventRecord); SYM(cuEventSynchronize); SYM(cuEventElapsedTime); SYM(cuLaunchKernel); SYM(cuLaunchKernelEx);
  SYM(cuStreamBeginCapture_v2); SYM(cuStreamEndCapture); SYM(cuGraphInstantiateWithFlags); SYM(cuGraphLaunch);
  SYM(cuGraphExecDestroy); SYM(cuGraphDestroy);

  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUstream stream;
  CUevent ev0, ev1;
  CK(p_cuInit(0));
  CK(p_cuDeviceGet(&dev, 0));
  CK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(p_cuCtxSetCurrent(ctx));
  CK(p_cuModuleLoadData(&mod, image));
  CK(p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CK(p_cuEventCreate(&ev0, CU_EVENT_DEFAULT));
  CK(p_cuEventCreate(&ev1, CU_EVENT_DEFAULT));

  FILE *cases = fopen(argv[2], "r");
  if (!cases) { perror(argv[2]); return 1; }
  FILE *json = argc > 3 ? fopen(argv[3], "w") : NULL;
  if (json) fprintf(json, "{\"runtime\": \"c\", \"results\": [");
  double *host = malloc(sizeof(double) * N), *sync = malloc(sizeof(double) * N_SYNC), *ghost = malloc(sizeof(double) * REPLAYS);
  double *batch = malloc(sizeof(double) * (N / BATCH)), *clk = malloc(sizeof(double) * N_CLOCK);
  if (!host || !sync || !ghost || !batch || !clk) return 1;

  char kind[16], kernel[128];
  int rows, d, grid, block, shared, cluster, tpr, nv, prefetch, dependent, first = 1;
  while (fscanf(cases, "%15s %d %d %127s %d %d %d %d %d %d %d %d", kind, &rows, &d, kernel, &grid, &block, &shared,
                &cluster, &tpr, &nv, &prefetch, &dependent) == 12) {
    if (cluster != 1) { fprintf(stderr, "latency_c: %s needs a cluster launch, not implemented here\n", kernel); return 1; }
    CUfunction fn;
    CK(p_cuModuleGetFunction(&fn, mod, kernel));
    int layer = strcmp(kind, "layer") == 0;
    size_t n = (size_t)rows * (size_t)d;
    CUdeviceptr x = upload_bf16(n, 3, -2, 2), w = upload_bf16((size_t)d, 1, 0.5f, 1.5f);
    CUdeviceptr b = layer ? upload_bf16((size_t)d, 2, -1, 1) : 0, y, none = 0;
    CK(p_cuMemAlloc_v2(&y, n * 2));
    // The argument block is prepared once, as normkit's Kernel does (NK_FWD_PARAMS).
    long long stride = d;
    float eps = layer ? 1e-5f : 1e-6f;
    void *params[] = {&x, &y, &w, &b, &none, &none, &rows, &d, &stride, &stride, &eps, &tpr, &nv, &prefetch};
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = (unsigned)grid, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = (unsigned)block, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = (unsigned)shared, cfg.hStream = stream, cfg.attrs = &attr, cfg.numAttrs = 1;
#define LAUNCH()                                    \
  (dependent ? p_cuLaunchKernelEx(&cfg, fn, params, NULL) \
             : p_cuLaunchKernel(fn, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, (unsigned)shared, stream, params, NULL))

    for (int i = 0; i < 500; i++) CK(LAUNCH());
    CK(p_cuStreamSynchronize(stream));
    for (int i = 0; i < N; i++) {
      double t0 = now_us();
      CUresult r = LAUNCH();
      host[i] = now_us() - t0;
      CK(r);
      if ((i + 1) % SYNC_EVERY == 0) CK(p_cuStreamSynchronize(stream));
    }
    CK(p_cuStreamSynchronize(stream));
    for (int i = 0; i < N / BATCH; i++) {
      CUresult r = CUDA_SUCCESS;
      double t0 = now_us();
      for (int j = 0; j < BATCH && r == CUDA_SUCCESS; j++) r = LAUNCH();
      batch[i] = (now_us() - t0) / BATCH;
      CK(r);
      if (((i + 1) * BATCH) % SYNC_EVERY == 0) CK(p_cuStreamSynchronize(stream));
    }
    CK(p_cuStreamSynchronize(stream));
    for (int i = 0; i < N_CLOCK; i++) {
      double t0 = now_us();
      clk[i] = now_us() - t0;
    }

    float ms;
    CK(p_cuEventRecord(ev0, stream));
    for (int i = 0; i < N; i++) CK(LAUNCH());
    CK(p_cuEventRecord(ev1, stream));
    CK(p_cuEventSynchronize(ev1));
    CK(p_cuEventElapsedTime(&ms, ev0, ev1));
    double eager_device = ms * 1000.0 / N;

    for (int i = 0; i < N_SYNC; i++) {
      double t0 = now_us();
      CUresult r1 = LAUNCH(), r2 = p_cuStreamSynchronize(stream);
      sync[i] = now_us() - t0;
      CK(r1);
      CK(r2);
    }

    CUgraph graph;
    CUgraphExec exec;
    CK(p_cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int i = 0; i < GRAPH_OPS; i++) CK(LAUNCH());
    CK(p_cuStreamEndCapture(stream, &graph));
    CK(p_cuGraphInstantiateWithFlags(&exec, graph, 0));
    CK(p_cuGraphLaunch(exec, stream));
    CK(p_cuStreamSynchronize(stream));
    for (int i = 0; i < REPLAYS; i++) {
      double t0 = now_us();
      CUresult r = p_cuGraphLaunch(exec, stream);
      ghost[i] = now_us() - t0;
      CK(r);
      if ((i + 1) % 4 == 0) CK(p_cuStreamSynchronize(stream));  // as latency.ts: at most 400 launches queued
    }
    CK(p_cuStreamSynchronize(stream));
    CK(p_cuEventRecord(ev0, stream));
    for (int i = 0; i < REPLAYS; i++) CK(p_cuGraphLaunch(exec, stream));
    CK(p_cuEventRecord(ev1, stream));
    CK(p_cuEventSynchronize(ev1));
    CK(p_cuEventElapsedTime(&ms, ev0, ev1));
    double graph_device = ms * 1000.0 / (REPLAYS * GRAPH_OPS);

    double eh = median(host, N), es = median(sync, N_SYNC), gh = median(ghost, REPLAYS) / GRAPH_OPS;
    double eb = median(batch, N / BATCH), ck = median(clk, N_CLOCK);
    printf("c %-5s rows=%2d d=%d: eager host %.2f us (batches of %d: %.2f us/call, clock %.3f us), device %.2f us/op, "
           "+sync %.2f us; graph host %.3f us/op, device %.2f us/op\n", kind, rows, d, eh, BATCH, eb, ck, eager_device, es, gh,
           graph_device);
    if (json) {
      fprintf(json, "%s\n {\"runtime\": \"c\", \"kind\": \"%s\", \"rows\": %d, \"d\": %d, \"dtype\": \"bf16\", "
              "\"eager_host_us\": %.4f, \"eager_batch_us\": %.4f, \"clock_us\": %.4f, \"eager_device_us\": %.4f, "
              "\"eager_sync_us\": %.4f, \"graph_host_us\": %.5f, \"graph_device_us\": %.4f}",
              first ? "" : ",", kind, rows, d, eh, eb, ck, eager_device, es, gh, graph_device);
      first = 0;
    }
    CK(p_cuGraphExecDestroy(exec));
    CK(p_cuGraphDestroy(graph));
    CK(p_cuMemFree_v2(x));
    CK(p_cuMemFree_v2(y));
    CK(p_cuMemFree_v2(w));
    if (b) CK(p_cuMemFree_v2(b));
  }
  if (json) { fprintf(json, "\n]}\n"); fclose(json); }
  fclose(cases);
  CK(p_cuDevicePrimaryCtxRelease_v2(dev));
  free(host); free(sync); free(ghost); free(batch); free(clk); free(image);
  return 0;
}
