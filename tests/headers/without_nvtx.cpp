// DEVICEKIT_DISABLE_NVTX leaves NVTX's header (and its compile time) out of placement: built by
// the test headers.self_contained with the other header checks.
#define DEVICEKIT_DISABLE_NVTX
#include <devicekit/place.hpp>

static_assert(DEVICEKIT_HAS_NVTX == 0, "DEVICEKIT_DISABLE_NVTX must turn the NVTX ranges off");
#if defined(NVTX_VERSION)
#  error "nvtx3/nvToolsExt.h was included although DEVICEKIT_DISABLE_NVTX is defined"
#endif
