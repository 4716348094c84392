/* The C entry points (include/devicekit/c/allocator.h) as another runtime uses them: the library is
 * loaded with dlopen and each function found by name, as PyTorch's CUDAPluggableAllocator and CuPy's
 * CFunctionAllocator do. Run on simulated GPUs: argv[1] is the library, built with the simulator in
 * it (which also gives cudaStreamCreate and cudaStreamDestroy by name). Exits 0 when every check
 * holds, 1 naming the first that does not. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef void* (*torch_alloc_fn)(ssize_t, int, cudaStream_t);
typedef void (*torch_free_fn)(void*, ssize_t, int, cudaStream_t);
typedef void* (*cupy_malloc_fn)(void*, size_t, int);
typedef void (*cupy_free_fn)(void*, void*, int);
typedef const char* (*last_error_fn)(void);
typedef size_t (*count_fn)(void);
typedef size_t (*in_use_fn)(int);
typedef cudaError_t (*stream_create_fn)(cudaStream_t*);
typedef cudaError_t (*stream_destroy_fn)(cudaStream_t);
typedef cudaError_t (*device_count_fn)(int*);

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static void* find(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "%s is not exported by the library: %s\n", name, dlerror());
    exit(1);
  }
  return f;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 1;
  }
  torch_alloc_fn torch_alloc = (torch_alloc_fn)find(lib, "devicekit_malloc");
  torch_free_fn torch_free = (torch_free_fn)find(lib, "devicekit_free");
  cupy_malloc_fn cupy_malloc = (cupy_malloc_fn)find(lib, "devicekit_cupy_malloc");
  cupy_free_fn cupy_free = (cupy_free_fn)find(lib, "devicekit_cupy_free");
  last_error_fn last_error = (last_error_fn)find(lib, "devicekit_last_error");
  count_fn refused_frees = (count_fn)find(lib, "devicekit_refused_frees");
  in_use_fn bytes_in_use = (in_use_fn)find(lib, "devicekit_bytes_in_use");
  stream_create_fn stream_create = (stream_create_fn)find(lib, "cudaStreamCreate");
  stream_destroy_fn stream_destroy = (stream_destroy_fn)find(lib, "cudaStreamDestroy");
  device_count_fn device_count = (device_count_fn)find(lib, "cudaGetDeviceCount");

  /* PyTorch's shape, on a stream of its own and on the default stream. */
  cudaStream_t s = NULL;
  CHECK(stream_create(&s) == cudaSuccess);
  void* a = torch_alloc(1 << 20, 0, s);
  void* b = torch_alloc(4096, 0, NULL);
  CHECK(a != NULL && b != NULL && a != b);
  CHECK(bytes_in_use(0) == (1 << 20) + 4096);
  torch_free(a, 1 << 20, 0, s);
  torch_free(b, 4096, 0, NULL);
  CHECK(bytes_in_use(0) == 0);
  CHECK(torch_alloc(0, 0, s) == NULL && strcmp(last_error(), "") == 0); /* nothing asked, nothing wrong */

  /* CuPy's shape: no stream, no size on free. */
  void* c = cupy_malloc(NULL, 3000, 0);
  CHECK(c != NULL);
  CHECK(bytes_in_use(0) == 3000);
  cupy_free(NULL, c, 0);
  CHECK(bytes_in_use(0) == 0);

  /* Past the budget: NULL, and why, naming the client. */
  CHECK(torch_alloc((ssize_t)1 << 50, 0, s) == NULL);
  CHECK(strstr(last_error(), "out of memory") != NULL);
  CHECK(strstr(last_error(), "c_api") != NULL);
  CHECK(bytes_in_use(0) == 0);

  /* Bad input: refused with a reason, the pool unchanged. */
  CHECK(torch_alloc(-5, 0, s) == NULL && strstr(last_error(), "negative") != NULL);
  CHECK(torch_alloc(64, 99, s) == NULL && strstr(last_error(), "cuda:99") != NULL);
  void* kept = torch_alloc(8192, 0, s);
  int foreign = 0;
  torch_free(&foreign, sizeof foreign, 0, s); /* a pointer the pool never made */
  CHECK(refused_frees() == 1 && strstr(last_error(), "not allocated by this pool") != NULL);
  torch_free(kept, 100, 0, s); /* the wrong size */
  CHECK(refused_frees() == 2 && strstr(last_error(), "wrong size") != NULL);
  cupy_free(NULL, &foreign, 0); /* CuPy's free of a foreign pointer */
  CHECK(refused_frees() == 3 && strstr(last_error(), "not a live allocation") != NULL);
  CHECK(bytes_in_use(0) == 8192);
  torch_free(kept, 8192, 0, s);
  CHECK(bytes_in_use(0) == 0);
  torch_free(NULL, 0, 0, s); /* as free(NULL) */
  CHECK(refused_frees() == 3);

  /* Every GPU its own pool. */
  int gpus = 0;
  CHECK(device_count(&gpus) == cudaSuccess);
  for (int d = 1; d < gpus; ++d) {
    void* p = cupy_malloc(NULL, 1024 * (size_t)d, d);
    CHECK(p != NULL && bytes_in_use(d) == 1024 * (size_t)d && bytes_in_use(0) == 0);
    cupy_free(NULL, p, d);
    CHECK(bytes_in_use(d) == 0);
  }
  CHECK(stream_destroy(s) == cudaSuccess);
  if (failures != 0) return 1;
  printf("c allocator: every check held on %d GPU(s)\n", gpus);
  return 0;
}
