/* hostdev.h: QLT_HD marks a small static inline function that both the C host code and the CUDA kernels
 * compile (host and device under nvcc), so arithmetic that must agree bit for bit on both sides is written
 * once. */
#ifndef QLT_HOSTDEV_H
#define QLT_HOSTDEV_H

#if defined(__CUDACC__)
#define QLT_HD static __host__ __device__ __forceinline__
#else
#define QLT_HD static inline
#endif

#endif
