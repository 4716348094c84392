#pragma once
// Moved to devicekit/transfer/batched_copy.cuh; kept so existing includes work (placement too,
// which this public header brought along before).
#include <devicekit/place/place.hpp>
#include <devicekit/transfer/batched_copy.cuh>
