// The smallest cluster kernels, none of normkit's code: does synccheck itself survive a cluster of C CTAs?
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o minimal minimal.cu     Usage: ./minimal MODE C T CLUSTERS [PAD]
// PAD: dynamic shared memory bytes a CTA reserves and does not use (fewer CTAs to an SM, the same code).
//   sync   : two cluster barriers (cooperative_groups cluster.sync()), nothing else
//   dsmem  : each CTA writes its rank into rank 0's shared memory, cluster barrier, rank 0 checks the sum
//   stasync: 8 rounds of an all-to-all over mbarriers (each CTA st.async's a value into every rank's shared memory,
//            completing its bytes on that rank's mbarrier; two barriers alternate), then a cluster barrier
// A mode that dies under synccheck at some C and not at others, with 0 errors reported, is the tool's fault: no
// kernel here has a barrier that is not reached by every thread of every CTA.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
namespace cg = cooperative_groups;

__global__ void k_sync(int* out) {
  cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  cl.sync();
  if (threadIdx.x == 0) out[blockIdx.x] = (int)cl.block_rank();
}

__global__ void k_dsmem(int* out) {
  __shared__ int cell;
  cg::cluster_group cl = cg::this_cluster();
  if (threadIdx.x == 0) cell = 0;
  cl.sync();
  if (threadIdx.x == 0) atomicAdd(cl.map_shared_rank(&cell, 0), (int)cl.block_rank() + 1);
  cl.sync();
  if (threadIdx.x == 0) out[blockIdx.x] = cl.block_rank() == 0 ? cell : -1;
}

__device__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ unsigned mapa(unsigned a, unsigned r) {
  unsigned o;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(o) : "r"(a), "r"(r));
  return o;
}
__device__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ void wait_parity(unsigned bar, unsigned parity) {
  asm volatile("{\n\t.reg .pred p;\nW:\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n\t"
               "@!p bra W;\n}" ::"r"(bar), "r"(parity) : "memory");
}

constexpr int ROUNDS = 8, MAX_RANKS = 16;
__global__ void k_stasync(int* out) {
  __shared__ alignas(8) unsigned long long bars[2];
  __shared__ float slots[2][MAX_RANKS];
  unsigned C, me;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(C));
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(me));
  if (threadIdx.x == 0) {
    for (int h = 0; h < 2; ++h) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[h])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_barrier();
  int ok = 1;
  for (int k = 0; k < ROUNDS; ++k) {
    const int h = k & 1;
    const unsigned bar = smem_addr(&bars[h]);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(C * 4) : "memory");
      const float v = (float)(k * 100 + (int)me);
      for (unsigned r = 0; r < C; ++r)
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(mapa(smem_addr(&slots[h][me]), r)),
                     "r"(__float_as_uint(v)), "r"(mapa(bar, r)) : "memory");
    }
    wait_parity(bar, (k >> 1) & 1);
    for (unsigned r = 0; r < C; ++r) ok &= slots[h][r] == (float)(k * 100 + (int)r);
    __syncthreads();  // every thread has read this half before a rank can write it again (two rounds on)
  }
  cluster_barrier();
  if (threadIdx.x == 0) out[blockIdx.x] = ok ? (int)me : -2;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s -> %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc < 5) { printf("usage: %s sync|dsmem|stasync C T CLUSTERS\n", argv[0]); return 2; }
  const bool dsmem = !strcmp(argv[1], "dsmem");
  const int C = atoi(argv[2]), T = atoi(argv[3]), n = atoi(argv[4]), pad = argc > 5 ? atoi(argv[5]) : 0;
  void* fn = dsmem ? (void*)k_dsmem : !strcmp(argv[1], "stasync") ? (void*)k_stasync : (void*)k_sync;
  if (C > 8) CK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.attrs = at, cfg.numAttrs = 1, cfg.blockDim = dim3(T), cfg.gridDim = dim3(C * n), cfg.dynamicSmemBytes = pad;
  int* out;
  CK(cudaMalloc(&out, C * n * sizeof(int)));
  int* args_out = out;
  void* args[] = {&args_out};
  CK(cudaLaunchKernelExC(&cfg, fn, args));
  CK(cudaDeviceSynchronize());
  int* h = (int*)malloc(C * n * sizeof(int));
  CK(cudaMemcpy(h, out, C * n * sizeof(int), cudaMemcpyDeviceToHost));
  const int want = C * (C + 1) / 2;
  for (int b = 0; b < C * n; ++b) {
    const int r = b % C, expect = dsmem ? (r == 0 ? want : -1) : r;
    if (h[b] != expect) { printf("block %d: %d, expected %d\n", b, h[b], expect); return 1; }
  }
  int active = 0;
  CK(cudaOccupancyMaxActiveClusters(&active, fn, &cfg));
  printf("%s C=%d T=%d clusters=%d pad=%d (at most %d clusters at once) ok\n", argv[1], C, T, n, pad, active);
  return 0;
}
