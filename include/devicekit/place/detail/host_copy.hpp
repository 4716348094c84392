#pragma once
// Moved to devicekit/transfer/detail/host_copy.hpp; kept so existing includes work.
#include <devicekit/transfer/detail/host_copy.hpp>
