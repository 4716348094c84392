#pragma once
/// \file
/// The machinery of the MPI communicator (distribute/mpi.hpp): whether MPI is running
/// (mpi_active), the MPI datatype of an element type, and mpi_backend, the MPI calls of
/// collective_backend on host memory with their error handling and int-count limits. Included by
/// mpi.hpp; available with DEVICEKIT_HAS_MPI.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_MPI
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/element_type.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/distribute/detail/mpi_arithmetic.hpp>
#  include <devicekit/distribute/detail/pack.hpp>
#  include <devicekit/distribute/errors.hpp>
#  include <devicekit/distribute/leaf_span.hpp>
#  include <devicekit/distribute/options.hpp>

#  include <mpi.h>

#  include <algorithm>
#  include <climits>
#  include <cstddef>
#  include <cstring>
#  include <span>
#  include <string>
#  include <string_view>
#  include <utility>
#  include <vector>

namespace devicekit {

/// Whether MPI_Init has run and MPI_Finalize has not.
[[nodiscard]] inline bool mpi_active() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

/// The MPI datatype of an element type; MPI_DATATYPE_NULL for the reduced-precision floats, which
/// the MPI standard lacks (see distribute/mpi.hpp for how they are reduced).
[[nodiscard]] inline MPI_Datatype mpi_datatype(element_type t) noexcept {
  switch (t) {
    case element_type::opaque: return MPI_BYTE;
    case element_type::int8: return MPI_INT8_T;
    case element_type::uint8: return MPI_UINT8_T;
    case element_type::int16: return MPI_INT16_T;
    case element_type::uint16: return MPI_UINT16_T;
    case element_type::int32: return MPI_INT32_T;
    case element_type::uint32: return MPI_UINT32_T;
    case element_type::int64: return MPI_INT64_T;
    case element_type::uint64: return MPI_UINT64_T;
    case element_type::float32: return MPI_FLOAT;
    case element_type::float64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

namespace detail {

/// The slice of a packed bucket that the MPI backend reduces at a time (see mpi_backend::
/// slice_bytes).
inline constexpr std::size_t mpi_slice_bytes = std::size_t{1} << 20;

/// The MPI model of collective_backend (see collectives.hpp): one participant, host memory.
class mpi_backend {
 public:
  mpi_backend() = default;
  explicit mpi_backend(MPI_Comm base) {
    if (!mpi_active()) {
      throw config_error(
          "mpi_communicator: MPI is not initialised; create a devicekit::mpi_environment in main() first");
    }
    check(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
    // Errors come back as return codes (and become exceptions) instead of aborting the job.
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  mpi_backend(const mpi_backend&) = delete;
  mpi_backend& operator=(const mpi_backend&) = delete;
  mpi_backend(mpi_backend&& o) noexcept { swap(o); }
  mpi_backend& operator=(mpi_backend&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~mpi_backend() { release(); }

  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  void set_operation(std::string_view op) noexcept { op_ = op; }

  // --- the backend interface ---
  [[nodiscard]] std::size_t participants() const noexcept { return 1; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int rank(std::size_t = 0) const noexcept { return rank_; }
  [[nodiscard]] static std::string_view name() noexcept { return "MPI"; }
  /// Every arithmetic type: the reduced-precision floats through float (see distribute/mpi.hpp).
  [[nodiscard]] static bool can_reduce(element_type t) noexcept { return t != element_type::opaque; }
  /// MPI moves host memory: leaves must be on the cpu (no CUDA-aware MPI is assumed).
  [[nodiscard]] bool accepts(device d, std::size_t = 0) const noexcept { return d.is_cpu(); }
  [[nodiscard]] std::string memory_description(std::size_t = 0) const {
    return "the MPI communicator cannot use: it moves host (cpu) memory; use an nccl_communicator for GPU leaves";
  }
  void group_begin() noexcept {}
  void group_end() noexcept {}
  void* scratch(std::size_t, int slot, std::size_t bytes) {
    auto& s = scratch_[slot];
    if (s.size() < bytes) s.resize(bytes);
    return s.data();
  }
  void copy(std::size_t, void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  void exchange(const void* mine, std::size_t bytes_each, void* all) {
    check(MPI_Allgather(mine, to_int(bytes_each, "MPI_Allgather"), MPI_BYTE, all, to_int(bytes_each, "MPI_Allgather"),
                        MPI_BYTE, comm_),
          "MPI_Allgather");
  }
  void broadcast(std::size_t, void* buf, std::size_t count, element_type t, int root) {
    as_bytes_if_untyped(count, t);
    // MPI counts are ints: large leaves go in pieces.
    const std::size_t es = size_of(t);
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min<std::size_t>(count - done, INT_MAX);
      check(MPI_Bcast(byte_at(buf, done * es), static_cast<int>(n), mpi_datatype(t), root, comm_), "MPI_Bcast");
      done += n;
    }
  }
  void all_reduce(std::size_t, const void* s, void* r, std::size_t count, element_type t, reduce_op op) {
    if (mpi_datatype(t) == MPI_DATATYPE_NULL) {
      all_reduce_widened(s, r, count, t, op);
      return;
    }
    const std::size_t es = size_of(t);
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min<std::size_t>(count - done, INT_MAX);
      const void* src = s == r ? MPI_IN_PLACE : byte_at(s, done * es);
      check(MPI_Allreduce(src, byte_at(r, done * es), static_cast<int>(n), mpi_datatype(t), mpi_op(op), comm_),
            "MPI_Allreduce");
      done += n;
    }
    if (op == reduce_op::average) divide_in_place(r, count, t, size_);
  }
  void all_gather(std::size_t, const void* s, void* r, std::size_t count, element_type t) {
    as_bytes_if_untyped(count, t);
    const int n = to_int(count, "MPI_Allgather");
    check(MPI_Allgather(s, n, mpi_datatype(t), r, n, mpi_datatype(t), comm_), "MPI_Allgather");
  }
  void reduce_scatter(std::size_t, const void* s, void* r, std::size_t recv_count, element_type t, reduce_op op) {
    if (mpi_datatype(t) == MPI_DATATYPE_NULL) {
      reduce_scatter_widened(s, r, recv_count, t, op);
      return;
    }
    check(MPI_Reduce_scatter_block(s, r, to_int(recv_count, "MPI_Reduce_scatter_block"), mpi_datatype(t), mpi_op(op),
                                   comm_),
          "MPI_Reduce_scatter_block");
    if (op == reduce_op::average) divide_in_place(r, recv_count, t, size_);
  }
  void scatter(std::size_t, const void* s, const std::size_t* bytes, const std::size_t* displs, void* r,
               std::size_t recv_bytes, int root) {
    std::vector<int> c, d;
    if (rank_ == root) {
      c.resize(static_cast<std::size_t>(size_));
      d.resize(static_cast<std::size_t>(size_));
      for (std::size_t i = 0; i < c.size(); ++i) {
        c[i] = to_int(bytes[i], "MPI_Scatterv");
        d[i] = to_int(displs[i], "MPI_Scatterv");
      }
    }
    check(MPI_Scatterv(s, c.data(), d.data(), MPI_BYTE, r, to_int(recv_bytes, "MPI_Scatterv"), MPI_BYTE, root, comm_),
          "MPI_Scatterv");
  }
  void finish(std::string_view) noexcept {}

  /// Packed buckets are reduced in slices of this many bytes (detail/collectives.hpp:
  /// all_reduce_sliced): each slice goes round the ring of all_reduce_leaves where that applies,
  /// else it is packed, reduced and unpacked before the next, so that no MPI_Allreduce is larger
  /// than a slice. Smaller slices keep more of a slice in cache, but every
  /// MPI_Allreduce is a handshake between the ranks, which costs more than the cache saves.
  /// Measured with 1 KiB float leaves, 2 processes on shared memory (Open MPI 4.1, 2 cores):
  /// 1000 KiB took about 170 us as one call and 270 us in 256 KiB slices; 8000 KiB in 1 MiB slices
  /// beat both 256 KiB slices and one call (one call was 2-4x slower, as one raw MPI_Allreduce of
  /// the 8000 KiB was). Overlapping slices with MPI_Iallreduce (pack slice k + 1 and MPI_Test
  /// while slice k is in flight) measured slower, since Open MPI's shared-memory transport moves
  /// the data on the same cores that pack it and its nonblocking collectives (libnbc) advance only
  /// inside MPI calls.
  [[nodiscard]] static constexpr std::size_t slice_bytes() noexcept { return mpi_slice_bytes; }

  /// The ring all-reduce (all_reduce_leaves) runs where each of its steps carries at least this
  /// much per rank; below, a step costs about its handshake, and one MPI_Allreduce of the packed
  /// slice wins.
  static constexpr std::size_t ring_min_segment_bytes = std::size_t{64} << 10;

  /// All-reduces leaves[i] for each i in `which` (all of element type `t`) where they lie, without
  /// packing them: a ring of MPI_Sendrecv calls (reduce-scatter, then all-gather, as NCCL's ring
  /// and Open MPI's large-message all-reduce go), whose sends and receives name the leaves through
  /// MPI datatypes (MPI_Type_create_hindexed at their addresses), so that MPI's own copy into its
  /// transport is the pack, and a received segment is combined straight into the leaves. Packing
  /// a slice, reducing it and unpacking it costs two more passes over the bytes: with 1,000 leaves
  /// of 1 KiB on two processes on shared memory (Open MPI 4.1, 2 cores), packing ran at 0.60 of
  /// one MPI_Allreduce of the same bytes already packed, the ring at 0.90; when that machine's
  /// copies ran at half speed, both were at 0.64-0.76 (bench_distribute). Each segment is reduced
  /// on one rank and then copied, so every rank ends with the same bits. A failed MPI call throws
  /// communication_error with the leaves of this call partly reduced, where the packed path leaves
  /// them as they were (after an error MPI's state is undefined by the standard, so the job cannot
  /// rely on either).
  /// Returns false, having sent nothing, where the ring does not apply: a type MPI has no datatype
  /// for (reduced-precision floats are widened instead), one rank, segments smaller than
  /// ring_min_segment_bytes, or counts beyond MPI's ints. That depends only on the leaves' types
  /// and counts, which the structure check has compared, so every rank takes the same path.
  bool all_reduce_leaves(std::span<const leaf_span> leaves, std::span<const std::size_t> which, element_type t,
                         reduce_op op) {
    const MPI_Datatype dt = mpi_datatype(t);
    if (dt == MPI_DATATYPE_NULL || size_ < 2 || which.size() > static_cast<std::size_t>(INT_MAX)) return false;
    const std::size_t es = size_of(t);
    const auto n = static_cast<std::size_t>(size_);
    // starts[j]: the first element of leaf which[j] with the leaves laid end to end.
    std::vector<std::size_t>& starts = ring_starts_;
    starts.assign(1, 0);
    for (const std::size_t i : which) {
      if (leaves[i].count > static_cast<std::size_t>(INT_MAX)) return false;
      starts.push_back(starts.back() + leaves[i].count);
    }
    const std::size_t total = starts.back();
    if (total * es / n < ring_min_segment_bytes || total / n >= static_cast<std::size_t>(INT_MAX)) return false;
    // Segment k: elements [lo(k), lo(k + 1)) of that line.
    auto lo = [&](std::size_t k) { return total / n * k + std::min(k, total % n); };
    auto for_each_piece = [&](std::size_t k, auto&& f) {
      const std::size_t a0 = lo(k), z0 = lo(k + 1);
      auto j = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), a0) - starts.begin()) - 1;
      for (; j < which.size() && starts[j] < z0; ++j) {
        const std::size_t a = std::max(a0, starts[j]), z = std::min(z0, starts[j + 1]);
        if (a < z) f(static_cast<std::byte*>(leaves[which[j]].data) + (a - starts[j]) * es, z - a);
      }
    };
    ring_types types(n);
    std::vector<int> lengths;
    std::vector<MPI_Aint> displs;
    for (std::size_t k = 0; k < n; ++k) {
      lengths.clear();
      displs.clear();
      for_each_piece(k, [&](std::byte* p, std::size_t count) {
        MPI_Aint at = 0;
        check(MPI_Get_address(p, &at), "MPI_Get_address");
        displs.push_back(at);
        lengths.push_back(static_cast<int>(count));
      });
      check(MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), displs.data(), dt, &types.v[k]),
            "MPI_Type_create_hindexed");
      check(MPI_Type_commit(&types.v[k]), "MPI_Type_commit");
    }
    auto* received = static_cast<std::byte*>(scratch(0, 1, (lo(1) - lo(0)) * es));
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    auto segment = [&](int k) { return static_cast<std::size_t>((k % size_ + size_) % size_); };
    // Reduce-scatter: at step s, segment rank - s goes right and segment rank - s - 1 comes from
    // the left, to be combined into the leaves; after size - 1 steps this rank holds segment
    // rank + 1 reduced over every rank.
    for (int step = 0; step + 1 < size_; ++step) {
      const std::size_t send = segment(rank_ - step), recv = segment(rank_ - step - 1);
      check(MPI_Sendrecv(MPI_BOTTOM, 1, types.v[send], right, ring_tag, received,
                         static_cast<int>(lo(recv + 1) - lo(recv)), dt, left, ring_tag, comm_, MPI_STATUS_IGNORE),
            "MPI_Sendrecv");
      std::size_t off = 0;
      for_each_piece(recv, [&](std::byte* p, std::size_t count) {
        combine_into(p, received + off * es, count, t, op);
        off += count;
      });
    }
    // All-gather: the reduced segments go round, received straight into the leaves.
    for (int step = 0; step + 1 < size_; ++step) {
      const std::size_t send = segment(rank_ + 1 - step), recv = segment(rank_ - step);
      check(MPI_Sendrecv(MPI_BOTTOM, 1, types.v[send], right, ring_tag, MPI_BOTTOM, 1, types.v[recv], left, ring_tag,
                         comm_, MPI_STATUS_IGNORE),
            "MPI_Sendrecv");
    }
    if (op == reduce_op::average) {
      for (const std::size_t i : which) divide_in_place(leaves[i].data, leaves[i].count, t, size_);
    }
    return true;
  }

  void barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void check(int rc, std::string_view call) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    throw communication_error("MPI", op_, call, rank_, size_, rc,
                              len > 0 ? std::string_view(text, static_cast<std::size_t>(len)) : "unknown MPI error");
  }

 private:
  static MPI_Op mpi_op(reduce_op op) noexcept {
    switch (op) {
      case reduce_op::min: return MPI_MIN;
      case reduce_op::max: return MPI_MAX;
      case reduce_op::product: return MPI_PROD;
      default: return MPI_SUM;  // sum, and average (= sum, then a division)
    }
  }
  /// A type MPI has no datatype for moves as its bytes.
  static void as_bytes_if_untyped(std::size_t& count, element_type& t) noexcept {
    if (mpi_datatype(t) != MPI_DATATYPE_NULL) return;
    count *= size_of(t);
    t = element_type::opaque;
  }
  float* float_scratch(std::size_t elements) {
    if (widened_.size() < elements) widened_.resize(elements);
    return widened_.data();
  }
  /// Reduced-precision all-reduce: widened to float, reduced with MPI_FLOAT, narrowed once.
  void all_reduce_widened(const void* s, void* r, std::size_t count, element_type t, reduce_op op) {
    const std::size_t es = size_of(t);
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min(count - done, widen_chunk_elements);
      float* f = float_scratch(n);
      widen_to_float(f, byte_at(s, done * es), n, t);
      check(MPI_Allreduce(MPI_IN_PLACE, f, static_cast<int>(n), MPI_FLOAT, mpi_op(op), comm_), "MPI_Allreduce");
      narrow_from_float(byte_at(r, done * es), f, n, t, op == reduce_op::average ? size_ : 1);
      done += n;
    }
  }
  /// Reduced-precision reduce-scatter: each rank's block widened into a float block of the same
  /// position (columns [done, done + n) of every rank's block at a time), reduced with
  /// MPI_Reduce_scatter_block on MPI_FLOAT, this rank's block narrowed once.
  void reduce_scatter_widened(const void* s, void* r, std::size_t recv_count, element_type t, reduce_op op) {
    const std::size_t es = size_of(t);
    const auto ranks = static_cast<std::size_t>(size_);
    const std::size_t step = std::max<std::size_t>(1, widen_chunk_elements / ranks);
    for (std::size_t done = 0; done < recv_count;) {
      const std::size_t n = std::min(recv_count - done, step);
      float* f = float_scratch(n * (ranks + 1));
      for (std::size_t k = 0; k < ranks; ++k) widen_to_float(f + k * n, byte_at(s, (k * recv_count + done) * es), n, t);
      float* mine = f + ranks * n;
      check(MPI_Reduce_scatter_block(f, mine, static_cast<int>(n), MPI_FLOAT, mpi_op(op), comm_),
            "MPI_Reduce_scatter_block");
      narrow_from_float(byte_at(r, done * es), mine, n, t, op == reduce_op::average ? size_ : 1);
      done += n;
    }
  }
  /// The ring's datatypes, freed however all_reduce_leaves leaves.
  struct ring_types {
    explicit ring_types(std::size_t n) : v(n, MPI_DATATYPE_NULL) {}
    ring_types(const ring_types&) = delete;
    ring_types& operator=(const ring_types&) = delete;
    ~ring_types() {
      for (auto& t : v) {
        if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
      }
    }
    std::vector<MPI_Datatype> v;
  };
  /// The communicator is this backend's own (MPI_Comm_dup), so no other message can match.
  static constexpr int ring_tag = 1;

  int to_int(std::size_t n, std::string_view call) const {
    if (n > static_cast<std::size_t>(INT_MAX)) {
      throw communication_error("MPI", op_, call, rank_, size_, 0,
                                "a count of " + std::to_string(n) +
                                    " does not fit MPI's int counts; split the leaf or lower the bucket size");
    }
    return static_cast<int>(n);
  }
  void swap(mpi_backend& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(op_, o.op_);
    std::swap(scratch_, o.scratch_);
    std::swap(widened_, o.widened_);
    std::swap(ring_starts_, o.ring_starts_);
  }
  void release() noexcept {
    if (comm_ != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  int size_ = 0;
  std::string_view op_ = "setup";
  std::vector<std::byte> scratch_[2];
  std::vector<float> widened_;            ///< reduced-precision elements widened to float
  std::vector<std::size_t> ring_starts_;  ///< all_reduce_leaves's offsets, kept between calls
};

}  // namespace detail

}  // namespace devicekit

#endif  // DEVICEKIT_HAS_MPI
