#pragma once
/// \file
/// Feature macros and the library version. Every devicekit header includes this first.
///
/// The macros can be forced by the build (the CMake target defines them); left alone, each one
/// is deduced from which headers the compiler can see, so a plain `-I include` build works too.

#if __cplusplus < 202002L
#  error "devicekit needs C++20: compile with -std=c++20 (nvcc: -std=c++20)"
#endif

#define DEVICEKIT_VERSION_MAJOR 0
#define DEVICEKIT_VERSION_MINOR 1
#define DEVICEKIT_VERSION_PATCH 0
#define DEVICEKIT_VERSION_STRING "0.1.0"

#if !defined(DEVICEKIT_HAS_CUDA)
#  if __has_include(<cuda_runtime_api.h>)
#    define DEVICEKIT_HAS_CUDA 1
#  else
#    define DEVICEKIT_HAS_CUDA 0
#  endif
#endif

// cudaStreamGetDevice is new in CUDA 12.8 (cudaGetDriverEntryPointByVersion in 12.5): with an
// older toolkit say so here rather than deep inside the headers that call them.
#if DEVICEKIT_HAS_CUDA
#  include <cuda_runtime_api.h>
#  if defined(CUDART_VERSION) && CUDART_VERSION < 12080
#    error \
        "devicekit needs the CUDA toolkit 12.8 or later (cudaStreamGetDevice); this one is older. Use CUDA 12.8+, or build without CUDA (-DDEVICEKIT_HAS_CUDA=0)."
#  endif
#endif

// NCCL and MPI are only claimed when CUDA (for NCCL) is there too and the header is visible;
// linking them is the build's business (the CMake target links what it found).
#if !defined(DEVICEKIT_HAS_NCCL)
#  if DEVICEKIT_HAS_CUDA && __has_include(<nccl.h>)
#    define DEVICEKIT_HAS_NCCL 1
#  else
#    define DEVICEKIT_HAS_NCCL 0
#  endif
#endif

// MPI's header is not on the default include path on Debian (or most systems): it is visible
// when the build links MPI (the devicekit::mpi target, or mpicxx).
#if !defined(DEVICEKIT_HAS_MPI)
#  if __has_include(<mpi.h>)
#    define DEVICEKIT_HAS_MPI 1
#  else
#    define DEVICEKIT_HAS_MPI 0
#  endif
#endif

// True while nvcc (or another CUDA compiler) compiles device code or a .cu file.
#if defined(__CUDACC__)
#  define DEVICEKIT_CUDA_COMPILER 1
#else
#  define DEVICEKIT_CUDA_COMPILER 0
#endif

#if DEVICEKIT_HAS_CUDA
#  include <cuda_runtime_api.h>
#endif

// Separate compilation (opt-in; header-only is the default). Most of devicekit is ordinary
// functions (detection, the pools, the copy engine, errors, the report) that a header-only library
// compiles again in every translation unit that uses them: about half of what a file that builds a
// manager pays. Defining DEVICEKIT_SEPARATE_COMPILATION (or linking the CMake target
// devicekit::compiled, which defines it) keeps their definitions, which live in `.ipp` files beside
// their headers, out of the user's translation units; one translation unit compiles them all by
// including <devicekit/src.hpp>, as Boost.Asio's BOOST_ASIO_SEPARATE_COMPILATION and spdlog's
// SPDLOG_COMPILED_LIB do. Templates stay in the headers either way.
//   DEVICEKIT_HEADER_ONLY   1 unless DEVICEKIT_SEPARATE_COMPILATION is defined
//   DEVICEKIT_DECL          what an `.ipp` definition is declared with: `inline` header-only
//   DEVICEKIT_DEFINE_IMPL   1 where a header includes its `.ipp`: header-only builds, and the one
//                           translation unit that compiles the library (DEVICEKIT_SOURCE)
#if defined(DEVICEKIT_SEPARATE_COMPILATION)
#  define DEVICEKIT_HEADER_ONLY 0
#  define DEVICEKIT_DECL
#else
#  define DEVICEKIT_HEADER_ONLY 1
#  define DEVICEKIT_DECL inline
#endif
#if DEVICEKIT_HEADER_ONLY || defined(DEVICEKIT_SOURCE)
#  define DEVICEKIT_DEFINE_IMPL 1
#else
#  define DEVICEKIT_DEFINE_IMPL 0
#endif
