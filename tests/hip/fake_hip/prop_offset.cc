// The offset of gcnArchName in the installed header's hipDeviceProp_t, for fake_hip.c (HIP 5.x headers).
#include <hip/hip_runtime_api.h>
#include <cstddef>
extern "C" const size_t nk_gcn_arch_offset = offsetof(hipDeviceProp_t, gcnArchName);
