#pragma once
// Moved to devicekit/transfer/detail/planner.hpp; kept so existing includes work.
#include <devicekit/transfer/detail/planner.hpp>
