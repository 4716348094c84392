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

/// The one-rank model of collective_backend (see collectives.hpp).
class self_backend {
 public:
  [[nodiscard]] std::size_t participants() const noexcept { return 1; }
  [[nodiscard]] int size() const noexcept { return 1; }
  [[nodiscard]] int rank(std::size_t = 0) const noexcept { return 0; }
  [[nodiscard]] static std::string_view name() noexcept { return "self"; }
  /// Every arithmetic type, the reduced-precision floats included (see all_reduce).
  [[nodiscard]] static bool can_reduce(element_type t) noexcept { return t != element_type::opaque; }
  [[nodiscard]] bool accepts(device d, std::size_t = 0) const noexcept { return d.is_cpu(); }
  [[nodiscard]] std::string memory_description(std::size_t = 0) const {
    return "the self communicator cannot use: it works on host (cpu) memory";
  }
  void set_operation(std::string_view) noexcept {}
  void group_begin() noexcept {}
  void group_end() noexcept {}
  void* scratch(std::size_t, int slot, std::size_t bytes) {
    auto& s = scratch_[slot];
    if (s.size() < bytes) s.resize(bytes);
    return s.data();
  }
  void copy(std::size_t, void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void exchange(const void* mine, std::size_t bytes_each, void* all) noexcept { copy(0, all, mine, bytes_each); }
  void broadcast(std::size_t, void*, std::size_t, element_type, int) noexcept {}
  // One rank: the sum, minimum, maximum, product and average of one value is that value. For the
  // reduced-precision floats this is also what reducing in float gives: widening is exact, the
  // reduction of one float (x / 1 for the average) is that float, and narrowing a value the type
  // holds exactly returns its bits, so the copy is the widened computation, rounded once.
  void all_reduce(std::size_t, const void* s, void* r, std::size_t count, element_type t, reduce_op) noexcept {
    copy(0, r, s, count * size_of(t));
  }
  void all_gather(std::size_t, const void* s, void* r, std::size_t count, element_type t) noexcept {
    copy(0, r, s, count * size_of(t));
  }
  void reduce_scatter(std::size_t, const void* s, void* r, std::size_t recv_count, element_type t, reduce_op) noexcept {
    copy(0, r, s, recv_count * size_of(t));
  }
  void scatter(std::size_t, const void* s, const std::size_t*, const std::size_t* displs, void* r,
               std::size_t recv_bytes, int) noexcept {
    copy(0, r, byte_at(s, displs[0]), recv_bytes);
  }
  void finish(std::string_view) noexcept {}
  void barrier() noexcept {}

 private:
  std::vector<std::byte> scratch_[2];
};

static_assert(collective_backend<self_backend>);

}  // namespace detail

/// One rank, host memory, no MPI: see the file comment. The façade over the one-rank backend;
/// `self_communicator comm;` or `self_communicator comm(options);`.
using self_communicator = basic_communicator<detail::self_backend>;

}  // namespace devicekit
