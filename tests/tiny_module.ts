/**
 * Small modules for the reliability tests (leaks, recovery, sanitizer runs).
 *
 * TINY_FATBIN: SASS for sm_80 and sm_90 (no PTX, so loading it needs no JIT: 10 000 loads take seconds, where
 * PTX would JIT each time). Built with nvcc 13.0 from
 *   extern "C" __global__ void nk_tiny(float* p, int n) { const int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }
 * by: nvcc -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Xfatbin -compress-all
 *
 * FAULT_PTX: a hand-written kernel that stores to the address it is given: launched with a bad address it
 * faults (CUDA_ERROR_ILLEGAL_ADDRESS, a sticky error). PTX, so the JIT targets whatever GPU runs the test.
 */
export const TINY_FATBIN: string =
  "UO1VugEAEAD4BwAAAAAAAAIAAQFAAAAAgAMAAAAAAAB8AwAAAAAAAAgAAQBQAAAAAAAAAAAAAAARgAAAAAAAAAAAAAAAAAAAqAwAAAAAAAAotS/9YKgLlRsAFmN9RxDNNmM3gdFRkcJGUFkRFolSCOBKQQQyIojfcbmxoBYrS9uT9SCVLA4AK0QxPhHiUbPe6hR3i9915IbNrVcLtBQ7OoxNSilTaQBqAGkAoNv/IGDI2p0Wyx3ucBRXoh5tvk9rr6XHGs7GReOpPm8kbVBvEgw7lTfqFVmCrM3dgNt+eXvDcXVhDci62RsOuHk7BLe/VOCK5Frldhq9x02uyA3jqNufjpp46pra6Tm8PkuhtLYoQAAhozcyclrl6rLqY7lUfjptMTmEtJWQZI/U3ueNOYT8wnBn/bHEVthlrXKtnNSvLc78N/2nqBfHcCWnuLC4xCz4KXj+VxBw70vZyMw5s49MM0fDD+7tRed5ntTM2PgpfsUtAJ+7o2G4gJlAea+HaS/w4RQWqq0VJjqG6L+HLUPHGP3/KEPH+BRWK4sJ9A+Nk+d5jiBRQud/6hmB+3P25wB7j5hGjHLcayF7jc5kFfc3ofdk4xo3G4nwlP3JJVNuiWTSiWuRedWNWuQkrkRyUjJQMpVsAVaGZhombmYW5hupTLgdv4cMUGaR/fhcpC6gZkR33yU3QLkZdECoaFE7HRmIVQAOysDiP0bddhx3uJUQ+8sE5YuWEbr1JYVjmdeK83HM85b/wjYc9xwAvepxz3nabXIs4tZ8OQ5xG6MRfwcBgL+oQUlnRkhERlJQkDQGoIKhGuK0ARLg8jwVUogRhJxUMwpSUkb5FCodzQN7u4+IVextHHebMDOfZPbdWMDvZ/QVEmC3d0sKEW+gRZn9wf9VxVd2j7CjmYNmQ7SShKzrZYtfab0eiIBkq3D4swE63tfz6mwb4TDYs3SxcKpitGpQqfR3ksl5wEEZ3EBN8TPf/HP9EtOuzL67xHAPSRVOsLp+SjIQUQ4YGqFrtHzQ6ojFtKARLQuXzMxjax3nNktfHcpx4YfA5/UvPmfS/EXzzAqhCn2OTlMCDGR++TROVuTZFbhwoCAAUdv+1y9+C24ayVjk1w1SscmemsnEO//oKAgvIk9/MiwBnBAN+pkRu/2ifp1OSnCMbNmUMdgw+ewRYFpZoNesiNVTLLzMtXMGnusY75MFY6zxtdGvDce4721nLz04Ft+m0dsc5ONOBhJVhW58GkWmZH+pI0GmOu4NNE9YbnAQaKAAyGfa0bBn0Wzft8LEqS4YpYTPAAAAAAIAAQFAAAAA+AMAAAAAAAD3AwAAAAAAAAgAAQBaAAAAAAAAAAAAAAARgAAAAAAAAAAAAAAAAAAAeA4AAAAAAAAotS/9YHgNbR8ARmmRSQDNOGMXArMZnWVmWTCZTy5hl/B3nNN3lbWBfA1X6lu3FlvLdfTLz9p7Ed67YIDLIXALIIF+FfcKSKmFVNk6D4hPC+rW2sotZQp8AHwAfQCiGG5SdblOHSNjD8Jtjls1T3Td5z5T9IWOaU1ZjmNJpvpkbExdYo2Mhmzph7pFzlJSJdMWmY4vdTVhW7Qx9aaRW3+PaOxk6ZmMdbpMmM3WM1OT+zT1aS3zpYqxVZ9m3OlWX6r+njr3lKdCj8kWPRkzv/c5frdyL06w4EVCYKuEyViekqJhwJFQn5iApDqSJZmCI2p5nhs0T9geSxg4tmQtV0faRlH/RfhoeraAKyoXFQyDXwTif4UA+T+YP9KFsDlt9xCWzfE+nPzN1LZtOzq5rEfa+G+Bi/tlEs/oAf/75I//PJ5MSOXct/8i6ggrRzEUxdXLSpyZARE43APo3w7OHIdj+sjE3dQ+Cv+DrD8f6ZXjH1B7b2rYJYWKFRmV72HSu4t8jwN915HvFbe3A7a/wfaPII2gKyCj5B8j/4bwv+F7Rds5Dv9i/FvgjWtcdCW1x2wlwBMKjJGAoYoYU8EXKx1JHoonE5STgRPqRKdkSSqOLRkr//+/C7H3lmZCuIPlxEXsxnN2C8nkkoWfbgO5LcKDcK4DtTmKOzCFQFUcqCGlcuGZJHJfWwYMJRy0AYDqmhii1LfSvw7fJrRtilXBuvJIHBl/1bnHh4t2MMY0kH9AtdsiYP9WtA98RIDCW3xT+2fiG/uv/o04RhANehzvnwedPweA1KhBTUhkREYkSUqSDsCCGaIZtQESYOI4V3JIIWIYZDMiIiVF5RSUJMMYUxmxwpvFFRaQhI1Wbx9meqDW7krr9SLYDAb+y5aGUtkofkk/lG2whniOcBAbQr8CEr2FljT97HhGGFXZ92WAwTx1XZxedgYkXglecIBm6bo337gY+KHhg1SqMWfmOUHzLQEM4x+Hx9jhzQzTFC8yxXmcKOLOem6+9k3nEtvxjqR5bwg7V8ccCuYaDPpGw2RE+CRMiECLUl2D3Ab8mAIMaOwPC/6qdY4LH5XPJGo/rYz6Se2dhChsY1pS8Ak0AiqcFWMUfa6RCxB6Gqo3WBp5QXsHXgDjgE141PAaRHaf9p9AaIZs0em5H2xYNbNJq7SwBh1AruWoidsYniLMstNwijaozH5Y3ler6iJaAsMHqzwzwqsAf3Z8Dt8xC+KHl1mITjrkwfOYTUJZtIdj8QVZJg/0tpSmzzVRZ4EOjYu5dk+oLV2bpsCbTlIqN55vKsX+iHnt9LJdbf42AdcQhTq1IViodjsEHih8Q+TbxmRpP06SWkBBTmsehAdnAA==";

export const tinyFatbin = (): Uint8Array => Uint8Array.from(atob(TINY_FATBIN), (c) => c.charCodeAt(0));

export const FAULT_PTX = `
.version 7.0
.target sm_80
.address_size 64

.visible .entry nk_fault(.param .u64 p)
{
  .reg .u64 %rd<2>;
  .reg .u32 %r<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 42;
  st.global.u32 [%rd1], %r1;
  ret;
}
`;
