#pragma once
/// \file
/// Moved to <devicekit/compute.hpp> (one header per operation in compute/); kept so existing
/// includes work.
#include <devicekit/compute.hpp>
