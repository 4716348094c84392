#pragma once
/// \file
/// Trees: the PyTree-like structure of tuples, arrays, aggregates and Boost.Hana structs, and
/// their leaves.
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/tree/array.hpp>
#include <devicekit/tree/errors.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/mdspan.hpp>
#include <devicekit/tree/node.hpp>
#include <devicekit/tree/path.hpp>
#include <devicekit/tree/tree.hpp>

// Hana structs as tree nodes: host code only (Hana does not support nvcc).
#if !defined(__CUDACC__) && __has_include(<boost/hana/accessors.hpp>)
#  include <devicekit/tree/hana.hpp>
#endif
