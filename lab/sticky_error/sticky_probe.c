// Probe: can a process recover from a sticky CUDA error (illegal address) without restarting?
// Usage: sticky_probe A|B|C|D|E   (A: cuDevicePrimaryCtxReset then retain; B: set no current context, reset,
// retain; C: release the primary context to refcount 0, then retain; D: fault in the primary context, then a
// new context from cuCtxCreate; E: fault in a cuCtxCreate context, destroy it, create another). Prints each
// step's result code, and after recovery runs the kernel on a valid address and reads the value back.
// Build: gcc -O2 -I/usr/local/cuda/include -o lab/sticky_error/sticky_probe lab/sticky_error/sticky_probe.c -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define SYM(name) static __typeof__(&name) p_##name;
SYM(cuInit) SYM(cuDeviceGet) SYM(cuDevicePrimaryCtxRetain) SYM(cuDevicePrimaryCtxRelease)
SYM(cuDevicePrimaryCtxReset) SYM(cuCtxSetCurrent) SYM(cuModuleLoadData) SYM(cuModuleGetFunction)
SYM(cuLaunchKernel) SYM(cuCtxSynchronize) SYM(cuMemAlloc) SYM(cuMemFree) SYM(cuCtxDestroy_v2) SYM(cuMemcpyDtoH_v2)
// cuda.h 13 declares only cuCtxCreate_v4; the v2 entry point (flags, device) is still exported by the driver.
static CUresult (*p_cuCtxCreate_v2)(CUcontext*, unsigned, CUdevice);

static const char* PTX = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry f(.param .u64 p)\n{\n"
                         ".reg .u64 %rd<2>;\n.reg .u32 %r<2>;\nld.param.u64 %rd1, [p];\nmov.u32 %r1, 42;\n"
                         "st.global.u32 [%rd1], %r1;\nret;\n}\n";

int main(int argc, char** argv) {
  const char mode = argc > 1 ? argv[1][0] : 'A';
  setvbuf(stdout, NULL, _IONBF, 0);  // every step's line survives a crash inside the driver
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return 2;
#define LOAD(name, sym) p_##name = (__typeof__(p_##name))dlsym(h, sym);
  LOAD(cuInit, "cuInit") LOAD(cuDeviceGet, "cuDeviceGet") LOAD(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
  LOAD(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") LOAD(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2")
  LOAD(cuCtxSetCurrent, "cuCtxSetCurrent") LOAD(cuModuleLoadData, "cuModuleLoadData")
  LOAD(cuModuleGetFunction, "cuModuleGetFunction") LOAD(cuLaunchKernel, "cuLaunchKernel")
  LOAD(cuCtxSynchronize, "cuCtxSynchronize") LOAD(cuMemAlloc, "cuMemAlloc_v2") LOAD(cuMemFree, "cuMemFree_v2")
  LOAD(cuCtxCreate_v2, "cuCtxCreate_v2") LOAD(cuCtxDestroy_v2, "cuCtxDestroy_v2") LOAD(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2")
  CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUdeviceptr p;
  printf("init %d\n", p_cuInit(0));
  p_cuDeviceGet(&dev, 0);
  if (mode == 'E') printf("create %d\n", p_cuCtxCreate_v2(&ctx, 0, dev));
  else printf("retain %d\n", p_cuDevicePrimaryCtxRetain(&ctx, dev));
  p_cuCtxSetCurrent(ctx);
  printf("load %d\n", p_cuModuleLoadData(&mod, PTX));
  p_cuModuleGetFunction(&fn, mod, "f");
  unsigned long long bad = 0x10;
  void* args[] = {&bad};
  printf("launch %d\n", p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, args, 0));
  printf("sync (expect 700) %d\n", p_cuCtxSynchronize());
  if (mode == 'B') printf("set no current %d\n", p_cuCtxSetCurrent(NULL));
  if (mode == 'A' || mode == 'B') printf("reset %d\n", p_cuDevicePrimaryCtxReset(dev));
  if (mode == 'C') printf("release %d\n", p_cuDevicePrimaryCtxRelease(dev));
  if (mode == 'E') printf("destroy %d\n", p_cuCtxDestroy_v2(ctx));
  if (mode == 'D' || mode == 'E') printf("create new %d\n", p_cuCtxCreate_v2(&ctx, 0, dev));
  else printf("retain again %d\n", p_cuDevicePrimaryCtxRetain(&ctx, dev));
  printf("set current %d\n", p_cuCtxSetCurrent(ctx));
  printf("alloc %d\n", p_cuMemAlloc(&p, 1 << 20));
  printf("sync %d\n", p_cuCtxSynchronize());
  printf("load %d\n", p_cuModuleLoadData(&mod, PTX));
  printf("function %d\n", p_cuModuleGetFunction(&fn, mod, "f"));
  void* good[] = {&p};
  printf("launch on a valid address %d\n", p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, good, 0));
  unsigned v = 0;
  printf("sync %d\n", p_cuCtxSynchronize());
  printf("read back %d value %u (expect 42)\n", p_cuMemcpyDtoH_v2(&v, p, 4), v);
  return 0;
}
