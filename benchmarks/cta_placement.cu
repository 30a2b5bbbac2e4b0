// Where a launch's CTAs land (benchmarks/cta_placement.py builds and runs this, and reads its
// JSON): (1) each CTA's SM and start time in launch order, one CTA per SM (200 KB of shared
// memory each, four waves, three launches); (2) the SMs of each cluster of 2, 4, 8 and 16 CTAs
// (a cluster's CTAs run on one GPC), four launches of each size.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
__device__ unsigned smid() { unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r)); return r; }
__device__ unsigned long long gtimer() { unsigned long long r; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(r)); return r; }
__global__ void place(int* sm, unsigned long long* t0, int spin_ns) {
  extern __shared__ char buf[];
  if (threadIdx.x == 0) {
    unsigned long long s = gtimer();
    sm[blockIdx.x] = smid(); t0[blockIdx.x] = s;
    buf[0] = 1;
    while (gtimer() - s < (unsigned long long)spin_ns) {}
  }
}
__global__ void cl(int* sm, int spin_ns) {
  extern __shared__ char buf[];
  if (threadIdx.x == 0) {
    unsigned long long s = gtimer();
    sm[blockIdx.x] = smid(); buf[0] = 1;
    while (gtimer() - s < (unsigned long long)spin_ns) {}
  }
}
int main() {
  int smem = 200 * 1024;
  cudaFuncSetAttribute(place, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(cl, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(cl, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  int n = 132 * 4;
  int* dsm; unsigned long long* dt; cudaMalloc(&dsm, n * sizeof(int)); cudaMalloc(&dt, n * 8);
  std::vector<int> hs(n); std::vector<unsigned long long> ht(n);
  printf("{\"place\": [");
  for (int rep = 0; rep < 3; ++rep) {
    place<<<n, 128, smem>>>(dsm, dt, 20000);
    cudaDeviceSynchronize();
    cudaMemcpy(hs.data(), dsm, n * sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(ht.data(), dt, n * 8, cudaMemcpyDeviceToHost);
    unsigned long long t = ht[0]; for (auto x : ht) t = x < t ? x : t;
    printf("%s{\"sm\": [", rep ? ", " : "");
    for (int i = 0; i < n; ++i) printf("%s%d", i ? "," : "", hs[i]);
    printf("], \"t\": [");
    for (int i = 0; i < n; ++i) printf("%s%llu", i ? "," : "", ht[i] - t);
    printf("]}");
  }
  printf("], \"clusters\": {");
  int first = 1;
  for (int size : {2, 4, 8, 16}) {
    for (int rep = 0; rep < 4; ++rep) {
      int grid = size * (132 / size);
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(grid); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension;
      a[0].val.clusterDim.x = size; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1;
      cfg.attrs = a; cfg.numAttrs = 1;
      cudaError_t e = cudaLaunchKernelEx(&cfg, cl, dsm, 20000);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      printf("%s\"%d-%d\": ", first ? "" : ", ", size, rep); first = 0;
      if (e != cudaSuccess) { printf("\"%s\"", cudaGetErrorString(e)); cudaGetLastError(); continue; }
      cudaMemcpy(hs.data(), dsm, grid * sizeof(int), cudaMemcpyDeviceToHost);
      printf("[");
      for (int i = 0; i < grid; ++i) printf("%s%d", i ? "," : "", hs[i]);
      printf("]");
    }
  }
  printf("}}\n");
  return 0;
}
