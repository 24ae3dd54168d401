// The C side of bench/latency_inproc.ts: the same norm launches as normkit's, made by C code INSIDE the
// JS process (loaded with dlopen over the runtime's FFI), so that TS and C are timed in the same process,
// on the same thread, context, stream and buffers, batch against batch. bench/latency_c.c times C in a
// process of its own; on a virtualized host the same C program's median moves by up to 1 µs between processes,
// which is more than the 10% the TS/C target allows, so a ratio across two processes is mostly noise.
//
//   bash bench/build-c.sh   (writes bench/liblaunch_shim.so)
//
// Calls (from the thread whose current context is normkit's, which is the JS thread after Device.open):
//   nk_shim_load(image)           cuModuleLoadData of the fatbin into the current context (0 or a CUresult)
//   nk_shim_prepare(...)          the kernel, launch configuration and argument block of one case
//   nk_shim_layers(ws, bs, n)     n weight (and bias) pointers the launches take in turn, as a model's layers do
//   nk_shim_batch(n)              n launches back to back, timed with CLOCK_MONOTONIC: µs in all, < 0 on error
//   nk_shim_error()               the CUresult of the last failure (0: none)
//   nk_shim_unload()              cuModuleUnload
// libcuda.so.1 is the process's own (dlopen of a loaded soname returns the same library); cuda.h gives types.
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef CUresult (*t_load)(CUmodule *, const void *);
typedef CUresult (*t_unload)(CUmodule);
typedef CUresult (*t_function)(CUfunction *, CUmodule, const char *);
typedef CUresult (*t_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*t_launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);

static t_load p_load;
static t_unload p_unload;
static t_function p_function;
static t_launch p_launch;
static t_launch_ex p_launch_ex;
static CUmodule mod;
static CUresult last_error;

// One prepared case: the kernel, its configuration and its argument block (NK_FWD_PARAMS, as latency_c.c).
static CUfunction fn;
static CUlaunchConfig cfg;
static CUlaunchAttribute attr;
static int dependent;
static CUdeviceptr x, y, w, b, none;
static int rows, d, tpr, nv, ahead;
static long long stride;
static float eps;
static void *params[] = {&x, &y, &w, &b, &none, &none, &rows, &d, &stride, &stride, &eps, &tpr, &nv, &ahead};
// Layers: each launch takes the next weight/bias pair (one pair by default: the prepared case's own).
#define MAX_LAYERS 64
static CUdeviceptr layer_w[MAX_LAYERS], layer_b[MAX_LAYERS];
static int layers = 1, next_layer;

static int fail(CUresult r) {
  last_error = r;
  return (int)r;
}

int nk_shim_error(void) { return (int)last_error; }

int nk_shim_load(const void *image) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fail(CUDA_ERROR_NOT_FOUND);
  *(void **)&p_load = dlsym(lib, "cuModuleLoadData");
  *(void **)&p_unload = dlsym(lib, "cuModuleUnload");
  *(void **)&p_function = dlsym(lib, "cuModuleGetFunction");
  *(void **)&p_launch = dlsym(lib, "cuLaunchKernel");
  *(void **)&p_launch_ex = dlsym(lib, "cuLaunchKernelEx");
  if (!p_load || !p_unload || !p_function || !p_launch || !p_launch_ex) return fail(CUDA_ERROR_NOT_FOUND);
  CUresult r = p_load(&mod, image);
  return r == CUDA_SUCCESS ? 0 : fail(r);
}

int nk_shim_unload(void) {
  if (!mod) return 0;
  CUresult r = p_unload(mod);
  mod = NULL;
  return r == CUDA_SUCCESS ? 0 : fail(r);
}

// layer != 0: LayerNorm (eps 1e-5), else RMSNorm (eps 1e-6, no bias). dep != 0: programmatic dependent launch.
// lanes, vec, prefetch: the plan's tpr, nv and prefetch (the kernel's last three arguments).
int nk_shim_prepare(const char *kernel, unsigned grid, unsigned block, unsigned shared, unsigned long long stream,
                    int dep, unsigned long long xp, unsigned long long yp, unsigned long long wp,
                    unsigned long long bp, int nrows, int dim, int lanes, int vec, int prefetch, int layer) {
  CUresult r = p_function(&fn, mod, kernel);
  if (r != CUDA_SUCCESS) return fail(r);
  x = xp, y = yp, w = wp, b = bp, none = 0;
  rows = nrows, d = dim, stride = dim, tpr = lanes, nv = vec, ahead = prefetch, eps = layer ? 1e-5f : 1e-6f;
  dependent = dep;
  layers = 1, next_layer = 0, layer_w[0] = wp, layer_b[0] = bp;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = grid, cfg.gridDimY = 1, cfg.gridDimZ = 1;
  cfg.blockDimX = block, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = shared, cfg.hStream = (CUstream)(uintptr_t)stream, cfg.attrs = &attr, cfg.numAttrs = 1;
  return 0;
}

// After nk_shim_prepare: n (1..MAX_LAYERS) weight/bias pointers for the launches to take in turn (bs may be NULL).
int nk_shim_layers(const unsigned long long *ws, const unsigned long long *bs, int n) {
  if (n < 1 || n > MAX_LAYERS) return fail(CUDA_ERROR_INVALID_VALUE);
  for (int i = 0; i < n; i++) layer_w[i] = ws[i], layer_b[i] = bs ? bs[i] : 0;
  layers = n, next_layer = 0;
  return 0;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

double nk_shim_batch(int n) {
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    w = layer_w[next_layer], b = layer_b[next_layer];
    if (++next_layer == layers) next_layer = 0;
    CUresult r = dependent ? p_launch_ex(&cfg, fn, params, NULL)
                           : p_launch(fn, cfg.gridDimX, 1, 1, cfg.blockDimX, 1, 1, cfg.sharedMemBytes, cfg.hStream,
                                      params, NULL);
    if (r != CUDA_SUCCESS) return -(double)fail(r);
  }
  return now_us() - t0;
}
