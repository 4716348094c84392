/* devicekit's pools for other runtimes: C entry points in a shared library (libdevicekit_allocator.so,
 * the CMake target devicekit::allocator), in the shapes that PyTorch's CUDAPluggableAllocator and
 * CuPy's CFunctionAllocator load by name. Each device's memory comes from the process's pool of that
 * GPU (devicekit::default_memory), under its budget (the memory strategy, DEVICEKIT_STRATEGY), and
 * is counted there as the client "c_api" (memory/clients.hpp). docs/c-allocator.md has the Python
 * lines.
 *
 * No entry point throws or aborts. An allocation that cannot be served returns NULL, and
 * devicekit_last_error() (per thread) says why: past the budget (devicekit's out_of_memory text,
 * which names the client), a negative size, a device that does not exist. A free the pool refuses
 * (a pointer it did not hand out, a wrong size) leaves the pool unchanged, is counted
 * (devicekit_refused_frees) and written to stderr the first time. */
#ifndef DEVICEKIT_C_ALLOCATOR_H
#define DEVICEKIT_C_ALLOCATOR_H

#include <cuda_runtime_api.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch (torch.cuda.memory.CUDAPluggableAllocator): `size` bytes on GPU `device`, ordered on
 * `stream` (NULL: the legacy default stream). NULL for size 0, and on failure. */
void* devicekit_malloc(ssize_t size, int device, cudaStream_t stream);
/* Frees what devicekit_malloc returned, with the same size and device, ordered on `stream`: the
 * memory is reused by other streams once the work queued on `stream` so far is done. */
void devicekit_free(void* ptr, ssize_t size, int device, cudaStream_t stream);

/* CuPy (cupy.cuda.CFunctionAllocator): `param` is not used. CuPy passes no stream: the memory is
 * ordered on the legacy default stream, which waits for the work of every blocking stream. */
void* devicekit_cupy_malloc(void* param, size_t size, int device);
/* CuPy passes no size: the pool knows it. */
void devicekit_cupy_free(void* param, void* ptr, int device);

/* Why the calling thread's last allocation failed or free was refused ("" when none did). */
const char* devicekit_last_error(void);
/* Frees refused since the library was loaded (nothing was changed by any of them). */
size_t devicekit_refused_frees(void);
/* Bytes the C entry points have live on `device` now (the client "c_api"), 0 for a bad device. */
size_t devicekit_bytes_in_use(int device);

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_C_ALLOCATOR_H */
