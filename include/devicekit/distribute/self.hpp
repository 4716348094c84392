#pragma once
/// \file
/// `self_communicator`: a one-rank communicator on host memory that needs neither MPI nor NCCL.
/// Every collective behaves as it does on one rank of a larger job (all_reduce and broadcast
/// leave the data as it is, all_gather and scatter copy), through the same bucketing and checks
/// as the real backends; so a data-parallel program written for N ranks runs unchanged as one
/// plain process.
#include <devicekit/core/device.hpp>
#include <devicekit/distribute/collectives.hpp>

#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace devicekit {

namespace detail {

/// The one-rank model of the collectives' backend (see collectives.hpp).
class self_backend {
 public:
  void set_operation(std::string_view) noexcept {}

  [[nodiscard]] int participants() const noexcept { return 1; }
  [[nodiscard]] int size() const noexcept { return 1; }
  [[nodiscard]] int rank(int = 0) const noexcept { return 0; }
  [[nodiscard]] static std::string_view name() noexcept { return "self"; }
  [[nodiscard]] static bool can_reduce(element_type t) noexcept {
    return t != element_type::opaque && t != element_type::float16 && t != element_type::bfloat16;
  }
  void group_begin() noexcept {}
  void group_end() noexcept {}
  void* scratch(int, int slot, std::size_t bytes) {
    auto& s = scratch_[slot];
    if (s.size() < bytes) s.resize(bytes);
    return s.data();
  }
  void copy(int, void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void exchange(const void* mine, std::size_t bytes_each, void* all) noexcept { copy(0, all, mine, bytes_each); }
  void broadcast(int, void*, std::size_t, element_type, int) noexcept {}
  // One rank: the sum, minimum, maximum, product and average of one value is that value.
  void all_reduce(int, const void* s, void* r, std::size_t count, element_type t, reduce_op) noexcept {
    copy(0, r, s, count * size_of(t));
  }
  void all_gather(int, const void* s, void* r, std::size_t count, element_type t) noexcept {
    copy(0, r, s, count * size_of(t));
  }
  void reduce_scatter(int, const void* s, void* r, std::size_t recv_count, element_type t, reduce_op) noexcept {
    copy(0, r, s, recv_count * size_of(t));
  }
  void scatter(int, const void* s, const std::size_t*, const std::size_t* displs, void* r, std::size_t recv_bytes,
               int) noexcept {
    copy(0, r, byte_at(s, displs[0]), recv_bytes);
  }
  void finish(std::string_view) noexcept {}

 private:
  std::vector<std::byte> scratch_[2];
};

}  // namespace detail

/// One rank, host memory, no MPI: see the file comment.
class self_communicator {
 public:
  explicit self_communicator(collective_options options = {}) : options_(options) {}

  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return 1; }
  [[nodiscard]] const collective_options& options() const noexcept { return options_; }
  self_communicator& set_options(const collective_options& o) noexcept {
    options_ = o;
    return *this;
  }
  self_communicator& set_bucket_bytes(std::size_t bytes) noexcept {
    options_.bucket_bytes = bytes;
    return *this;
  }
  [[nodiscard]] bool accepts(device d, int = 0) const noexcept { return d.is_cpu(); }
  [[nodiscard]] std::string memory_description(int = 0) const {
    return "the self communicator cannot use: it works on host (cpu) memory";
  }

  void broadcast(std::span<const leaf_span> leaves, int root = 0) {
    detail::broadcast(backend_, one(leaves), root, options_);
  }
  void all_reduce(std::span<const leaf_span> leaves, reduce_op op = reduce_op::sum) {
    detail::all_reduce(backend_, one(leaves), op, options_);
  }
  void all_gather(std::span<const const_leaf_span> in, std::span<const leaf_span> out) {
    detail::all_gather(backend_, one(in), one(out), options_);
  }
  void reduce_scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out,
                      reduce_op op = reduce_op::sum) {
    detail::reduce_scatter(backend_, one(in), one(out), op, options_);
  }
  void scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out, int root = 0) {
    detail::scatter(backend_, one(in), one(out), root, options_);
  }
  void barrier() noexcept {}

  [[nodiscard]] detail::self_backend& backend() noexcept { return backend_; }

 private:
  template <class T>
  static std::span<const std::span<const T>, 1> one(std::span<const T>& s) noexcept {
    return std::span<const std::span<const T>, 1>(&s, 1);
  }

  detail::self_backend backend_;
  collective_options options_;
};

}  // namespace devicekit
