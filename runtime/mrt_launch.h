/*
 * mrt_launch.h — the one spelling of a kernel launch in the runtime's CUDA code
 * (rt_cuda_kernels.cu) and in the NAME.cu files modelc generates:
 *
 *     MRT_LAUNCH(kernel, grid, block, shmem, stream, args...);
 *
 * is kernel<<<grid, block, shmem, stream>>>(args...) under nvcc. The tests also compile the same
 * sources with the host C++ compiler against the CUDA simulator (tests/cudasim, whose headers
 * define CUDASIM), which cannot parse <<<...>>>; there it is the simulator's cudasim_launch. A
 * launch is checked afterwards with cudaGetLastError, as before.
 */
#ifndef MRT_LAUNCH_H
#define MRT_LAUNCH_H

#include <cuda_runtime.h> /* the toolkit's, or the simulator's (which defines CUDASIM) */

#if defined(CUDASIM) && !defined(__CUDACC__)
#define MRT_LAUNCH(kernel, grid, block, shmem, stream, ...)                                     \
    cudasim_launch(#kernel, kernel, (grid), (block), (shmem), (stream), __VA_ARGS__)
#else
#define MRT_LAUNCH(kernel, grid, block, shmem, stream, ...)                                     \
    kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#endif

#endif /* MRT_LAUNCH_H */
