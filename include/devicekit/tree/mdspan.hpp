#pragma once
/// \file
/// Which mdspan devicekit uses for shaped arrays: libcu++'s `cuda::std::mdspan` (CCCL, shipped
/// with the CUDA toolkit and on its own, e.g. PyPI's nvidia-cuda-cccl headers; it works in host
/// code compiled by g++ as well as under nvcc, and needs no CUDA runtime), else the standard
/// library's `std::mdspan` where it has one (libstdc++ from GCC 14 on). `devicekit::md` names that
/// namespace (`md::extents`, `md::dextents`, `md::layout_right`, `md::layout_left`,
/// `md::layout_stride`, `md::mdspan`, `md::dynamic_extent`).
///
/// Without a toolkit, the CMake target puts CCCL's headers on the include path where it finds them
/// (devicekit_find_cccl: DEVICEKIT_CCCL_ROOT, CCCL_ROOT, or .deps/cccl as scripts/lib.sh fetches
/// it). DEVICEKIT_HAS_MDSPAN is 0 when neither is visible: shaped arrays are then unavailable,
/// and every other leaf and node still works.
#include <devicekit/core/config.hpp>

#if !defined(DEVICEKIT_HAS_MDSPAN)
#  if __has_include(<cuda/std/mdspan>)
#    include <cuda/std/mdspan>
#    define DEVICEKIT_HAS_MDSPAN 1
#    define DEVICEKIT_MDSPAN_NAMESPACE ::cuda::std
#  elif __has_include(<mdspan>)
#    include <mdspan>
#    if defined(__cpp_lib_mdspan)
#      define DEVICEKIT_HAS_MDSPAN 1
#      define DEVICEKIT_MDSPAN_NAMESPACE ::std
#    else
#      define DEVICEKIT_HAS_MDSPAN 0
#    endif
#  else
#    define DEVICEKIT_HAS_MDSPAN 0
#  endif
#endif

#if DEVICEKIT_HAS_MDSPAN
namespace devicekit {
namespace md = DEVICEKIT_MDSPAN_NAMESPACE;
}  // namespace devicekit
#endif
