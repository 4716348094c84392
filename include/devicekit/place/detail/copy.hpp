#pragma once
// Moved to devicekit/transfer/copy.hpp; kept so existing includes work.
#include <devicekit/transfer/copy.hpp>
