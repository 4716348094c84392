#pragma once
/// \file
/// Distribution: schemes, device assignment and collectives over self, MPI and NCCL
/// (distribute/mpi.hpp and distribute/nccl.hpp are empty without MPI or NCCL).
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/collectives.hpp>
#include <devicekit/distribute/errors.hpp>
#include <devicekit/distribute/leaf_span.hpp>
#include <devicekit/distribute/mpi.hpp>
#include <devicekit/distribute/nccl.hpp>
#include <devicekit/distribute/options.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/distribute/self.hpp>
#include <devicekit/distribute/structure.hpp>
#include <devicekit/distribute/summary.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
