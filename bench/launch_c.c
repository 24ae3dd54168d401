// Host-side cost of cuLaunchKernel from C: the floor that the TypeScript launch path is compared to.
//
//   bash bench/build-c.sh && bench/launch_c precompiled/norm.fatbin
//
// libcuda.so.1 is dlopen()ed (no link-time libcuda); cuda.h is included for types only.
// Measures, for scale_f32 (grid 1, block 256, shared 0, non-blocking stream, n = 256):
//   - each of 10 000 cuLaunchKernel calls timed individually with CLOCK_MONOTONIC (the stream is
//     synchronized every 256 launches outside the timed region so the queue never fills);
//   - launch + cuStreamSynchronize, 1000 iterations.
// Last line (machine-readable):
//   launch_c median_us=<x> p10_us=<x> p90_us=<x> launch_sync_median_us=<x>
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*fn_cuInit)(unsigned int);
typedef CUresult (*fn_cuGetErrorName)(CUresult, const char**);
typedef CUresult (*fn_cuDeviceGet)(CUdevice*, int);
typedef CUresult (*fn_cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
typedef CUresult (*fn_cuDevicePrimaryCtxRelease)(CUdevice);
typedef CUresult (*fn_cuCtxSetCurrent)(CUcontext);
typedef CUresult (*fn_cuModuleLoadData)(CUmodule*, const void*);
typedef CUresult (*fn_cuModuleUnload)(CUmodule);
typedef CUresult (*fn_cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
typedef CUresult (*fn_cuMemAlloc)(CUdeviceptr*, size_t);
typedef CUresult (*fn_cuMemFree)(CUdeviceptr);
typedef CUresult (*fn_cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
typedef CUresult (*fn_cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
typedef CUresult (*fn_cuStreamCreate)(CUstream*, unsigned int);
typedef CUresult (*fn_cuStreamDestroy)(CUstream);
typedef CUresult (*fn_cuStreamSynchronize)(CUstream);
typedef CUresult (*fn_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, CUstream, void**, void**);

static fn_cuGetErrorName p_cuGetErrorName;

static void check(CUresult r, const char* what, int line) {
  if (r == CUDA_SUCCESS) return;
  const char* name = NULL;
  if (!p_cuGetErrorName || p_cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "?";
  fprintf(stderr, "launch_c: %s failed: %s (%d) at line %d\n", what, name, (int)r, line);
  exit(1);
}
#define CK(call) check((call), #call, __LINE__)

static void* lib;
static void* sym(const char* name) {
  void* p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "launch_c: libcuda.so.1 has no symbol %s\n", name);
    exit(1);
  }
  return p;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}
// Nearest-rank percentile of a sorted array.
static double pct(const double* s, int n, double p) {
  int i = (int)(p / 100.0 * (n - 1) + 0.5);
  return s[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "launch_c: cannot read %s\n", path); exit(1); }
  ((char*)buf)[n] = 0;  // lets the same code load a PTX file
  fclose(f);
  *size = (size_t)n;
  return buf;
}

enum { WARMUP = 1000, N_LAUNCH = 10000, SYNC_EVERY = 256, N_SYNC = 1000 };

int main(int argc, char** argv) {
  const char* image_path = argc > 1 ? argv[1] : "precompiled/norm.fatbin";
  size_t image_size = 0;
  void* image = read_file(image_path, &image_size);

  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "launch_c: dlopen(libcuda.so.1): %s\n", dlerror()); return 1; }
  p_cuGetErrorName = (fn_cuGetErrorName)sym("cuGetErrorName");
  fn_cuInit cuInit_ = (fn_cuInit)sym("cuInit");
  fn_cuDeviceGet cuDeviceGet_ = (fn_cuDeviceGet)sym("cuDeviceGet");
  fn_cuDevicePrimaryCtxRetain ctxRetain = (fn_cuDevicePrimaryCtxRetain)sym("cuDevicePrimaryCtxRetain");
  fn_cuDevicePrimaryCtxRelease ctxRelease = (fn_cuDevicePrimaryCtxRelease)sym("cuDevicePrimaryCtxRelease_v2");
  fn_cuCtxSetCurrent ctxSetCurrent = (fn_cuCtxSetCurrent)sym("cuCtxSetCurrent");
  fn_cuModuleLoadData moduleLoadData = (fn_cuModuleLoadData)sym("cuModuleLoadData");
  fn_cuModuleUnload moduleUnload = (fn_cuModuleUnload)sym("cuModuleUnload");
  fn_cuModuleGetFunction moduleGetFunction = (fn_cuModuleGetFunction)sym("cuModuleGetFunction");
  fn_cuMemAlloc memAlloc = (fn_cuMemAlloc)sym("cuMemAlloc_v2");
  fn_cuMemFree memFree = (fn_cuMemFree)sym("cuMemFree_v2");
  fn_cuMemcpyHtoD htod = (fn_cuMemcpyHtoD)sym("cuMemcpyHtoD_v2");
  fn_cuMemcpyDtoH dtoh = (fn_cuMemcpyDtoH)sym("cuMemcpyDtoH_v2");
  fn_cuStreamCreate streamCreate = (fn_cuStreamCreate)sym("cuStreamCreate");
  fn_cuStreamDestroy streamDestroy = (fn_cuStreamDestroy)sym("cuStreamDestroy_v2");
  fn_cuStreamSynchronize streamSync = (fn_cuStreamSynchronize)sym("cuStreamSynchronize");
  fn_cuLaunchKernel launchKernel = (fn_cuLaunchKernel)sym("cuLaunchKernel");

  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream stream;
  CUdeviceptr dx, dy;
  CK(cuInit_(0));
  CK(cuDeviceGet_(&dev, 0));
  CK(ctxRetain(&ctx, dev));
  CK(ctxSetCurrent(ctx));
  CK(moduleLoadData(&mod, image));
  CK(moduleGetFunction(&fn, mod, "scale_f32"));
  CK(memAlloc(&dx, 1024));
  CK(memAlloc(&dy, 1024));
  CK(streamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Argument block prepared once: scale_f32(const float* x, float* y, float a, long long n).
  float a = 2.0f;
  long long n = 256;
  void* params[] = {&dx, &dy, &a, &n};

  for (int i = 0; i < WARMUP; i++) {
    CK(launchKernel(fn, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL));
    if ((i + 1) % SYNC_EVERY == 0) CK(streamSync(stream));
  }
  CK(streamSync(stream));

  double* t = malloc(sizeof(double) * N_LAUNCH);
  if (!t) return 1;
  for (int i = 0; i < N_LAUNCH; i++) {
    double t0 = now_us();
    CUresult r = launchKernel(fn, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL);
    double t1 = now_us();
    CK(r);
    t[i] = t1 - t0;
    if ((i + 1) % SYNC_EVERY == 0) CK(streamSync(stream));
  }
  CK(streamSync(stream));
  qsort(t, N_LAUNCH, sizeof(double), cmp_double);
  double med = pct(t, N_LAUNCH, 50), p10 = pct(t, N_LAUNCH, 10), p90 = pct(t, N_LAUNCH, 90);
  printf("cuLaunchKernel host cost over %d launches: median %.3f us, p10 %.3f us, p90 %.3f us, "
         "min %.3f us, max %.3f us\n",
         N_LAUNCH, med, p10, p90, t[0], t[N_LAUNCH - 1]);

  double* s = malloc(sizeof(double) * N_SYNC);
  if (!s) return 1;
  for (int i = 0; i < N_SYNC; i++) {
    double t0 = now_us();
    CUresult r1 = launchKernel(fn, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL);
    CUresult r2 = streamSync(stream);
    double t1 = now_us();
    CK(r1);
    CK(r2);
    s[i] = t1 - t0;
  }
  qsort(s, N_SYNC, sizeof(double), cmp_double);
  double smed = pct(s, N_SYNC, 50);
  printf("launch + cuStreamSynchronize over %d iterations: median %.3f us, p10 %.3f us, p90 %.3f us\n",
         N_SYNC, smed, pct(s, N_SYNC, 10), pct(s, N_SYNC, 90));

  // Sanity: the kernel really ran (y = 2 * x on 256 floats).
  float hx[256], hy[256];
  for (int i = 0; i < 256; i++) hx[i] = (float)i - 100.5f;
  CK(htod(dx, hx, sizeof hx));
  CK(launchKernel(fn, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL));
  CK(streamSync(stream));
  CK(dtoh(hy, dy, sizeof hy));
  for (int i = 0; i < 256; i++) {
    if (hy[i] != 2.0f * hx[i]) {
      fprintf(stderr, "launch_c: scale_f32 wrong at %d: %g != %g\n", i, hy[i], 2.0f * hx[i]);
      return 1;
    }
  }

  CK(streamDestroy(stream));
  CK(memFree(dx));
  CK(memFree(dy));
  CK(moduleUnload(mod));
  CK(ctxRelease(dev));
  free(t);
  free(s);
  free(image);
  printf("launch_c median_us=%.3f p10_us=%.3f p90_us=%.3f launch_sync_median_us=%.3f\n", med, p10, p90,
         smed);
  return 0;
}
