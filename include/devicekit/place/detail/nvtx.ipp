#pragma once
/// \file
/// The definitions behind place/detail/nvtx.hpp: the NVTX domain and the range push and pop, the
/// only code that includes NVTX's header.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/nvtx.hpp>

#if DEVICEKIT_HAS_NVTX
#  include <nvtx3/nvToolsExt.h>
#endif

namespace devicekit::detail {

#if DEVICEKIT_HAS_NVTX
[[nodiscard]] DEVICEKIT_DECL nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("devicekit");
  return domain;
}
#endif

DEVICEKIT_DECL void nvtx_range_push([[maybe_unused]] const char* name) noexcept {
#if DEVICEKIT_HAS_NVTX
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain(), &attr);
#endif
}

DEVICEKIT_DECL void nvtx_range_pop() noexcept {
#if DEVICEKIT_HAS_NVTX
  nvtxDomainRangePop(nvtx_domain());
#endif
}

}  // namespace devicekit::detail
