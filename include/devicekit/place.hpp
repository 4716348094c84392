#pragma once
/// \file
/// Placement: moving trees to a device, replicating and sharding them, prefetching, copying.
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/place/copy.hpp>
#include <devicekit/place/default_device.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/place/ready.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/place/shard.hpp>
#include <devicekit/place/sharded.hpp>
#include <devicekit/place/split.hpp>
#include <devicekit/place/uneven.hpp>
