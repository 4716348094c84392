#pragma once
/// \file
/// The collectives on flat leaves, written once over a backend (MPI for host memory, NCCL for
/// device memory, one rank for `self_communicator`): the `collective_backend` concept and the
/// one communicator façade, `basic_communicator<Backend>`, that `mpi_communicator`,
/// `nccl_communicator` and `self_communicator` are made of. The operations themselves are in
/// detail/collectives.hpp (their checks in detail/checks.hpp, bucket packing in
/// detail/pack.hpp). Each operation:
///   1. compares a structure summary across all ranks (one small all-gather) and, when the
///      ranks disagree, throws structure_mismatch_error on every rank: no rank is left waiting
///      in a collective that the others never join;
///   2. checks the arguments (the same checks on every rank, on data the ranks agreed on, so the
///      same verdict everywhere);
///   3. plans buckets (bucket.hpp) and runs one backend collective per bucket; one-leaf buckets
///      go straight from and into the leaf, others are packed into a staging buffer that the
///      backend keeps between calls.
///
/// A backend may drive several local participants (NCCL's ncclCommInitAll: one process, one
/// rank per GPU); then every leaf list comes once per participant, and the calls of one bucket
/// are issued between group_begin() and group_end() (ncclGroupStart/End). Participants are
/// indexed by std::size_t; ranks are ints, as in MPI and NCCL.
///
/// A backend implements only the transport: the `collective_backend` concept below lists what
/// it provides, and `basic_communicator` checks it with a message that names a missing member.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/detail/backend_requirements.hpp>
#include <devicekit/distribute/detail/collectives.hpp>
#include <devicekit/distribute/errors.hpp>
#include <devicekit/distribute/leaf_span.hpp>
#include <devicekit/distribute/options.hpp>
#include <devicekit/distribute/structure.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// What the collectives need of a transport (mpi.hpp, nccl.hpp and self.hpp hold the models):
///
///   std::size_t participants() const;  int size() const;  int rank(std::size_t p) const;
///   static std::string_view name();    static bool can_reduce(element_type);
///   bool accepts(device, std::size_t p) const;  std::string memory_description(std::size_t p) const;
///   void set_operation(std::string_view);       // names the operation in errors; may refuse
///   void group_begin(); void group_end();
///   void* scratch(std::size_t p, int slot, std::size_t bytes);        // slot 0 or 1
///   void copy(std::size_t p, void* dst, const void* src, std::size_t bytes);
///   void exchange(const void* mine, std::size_t bytes_each, void* all);   // host memory
///   void broadcast(std::size_t p, void* buf, std::size_t count, element_type, int root);
///   void all_reduce(std::size_t p, const void* s, void* r, std::size_t count, element_type, reduce_op);
///   void all_gather(std::size_t p, const void* s, void* r, std::size_t count, element_type);
///   void reduce_scatter(std::size_t p, const void* s, void* r, std::size_t recv_count, element_type,
///                       reduce_op);
///   void scatter(std::size_t p, const void* s, const std::size_t* bytes, const std::size_t* displs,
///                void* r, std::size_t recv_bytes, int root);
///   void finish(std::string_view operation);                    // wait, poll errors
template <class B>
concept collective_backend = detail::backend_requirements::has_participants<B> &&
    detail::backend_requirements::has_size<B> && detail::backend_requirements::has_rank<B> &&
    detail::backend_requirements::has_name<B> && detail::backend_requirements::has_can_reduce<B> &&
    detail::backend_requirements::has_accepts<B> && detail::backend_requirements::has_memory_description<B> &&
    detail::backend_requirements::has_set_operation<B> && detail::backend_requirements::has_group_begin<B> &&
    detail::backend_requirements::has_group_end<B> && detail::backend_requirements::has_scratch<B> &&
    detail::backend_requirements::has_copy<B> && detail::backend_requirements::has_exchange<B> &&
    detail::backend_requirements::has_broadcast<B> && detail::backend_requirements::has_all_reduce<B> &&
    detail::backend_requirements::has_all_gather<B> && detail::backend_requirements::has_reduce_scatter<B> &&
    detail::backend_requirements::has_scatter<B> && detail::backend_requirements::has_finish<B>;

// --- the communicator façade ----------------------------------------------------------------------

namespace detail {
/// "nccl_communicator" for the backend named "NCCL": the public name, for messages.
inline std::string communicator_name(std::string_view backend) {
  std::string s;
  for (const char c : backend) s.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  return s + "_communicator";
}
}  // namespace detail

/// Collectives on flat leaf spans over a backend, written once: rank and size, the options, the
/// memory it accepts, and the five collectives in two forms, one leaf list (one local rank) and
/// one leaf list per local rank (a backend driving several, such as NCCL over the GPUs of one
/// process). `Self` is the derived public type (mpi_communicator, nccl_communicator) that the
/// setters return, so that calls chain; `void` when the façade is used as it is
/// (self_communicator). Tree forms (`dk::all_reduce(comm, tree)`) are in tree_collectives.hpp.
///
/// Every collective is called by every rank with leaves of the same structure; when they differ,
/// every rank throws structure_mismatch_error (see above).
template <class Backend, class Self = void>
class basic_communicator {
  static_assert(detail::backend_requirements::check_collective_backend<Backend>(),
                "basic_communicator<Backend>: Backend is not a collective_backend (the message above names what "
                "it lacks)");

 public:
  using backend_type = Backend;
  using self_type = std::conditional_t<std::is_void_v<Self>, basic_communicator, Self>;

  /// A communicator over a default backend (for self_communicator: the one-rank backend).
  explicit basic_communicator(collective_options options = {}) requires std::default_initializable<Backend>
      : options_(options) {}
  basic_communicator(Backend backend, collective_options options) : backend_(std::move(backend)), options_(options) {}

  /// This process's rank (of local rank `local` when it drives several).
  [[nodiscard]] int rank(int local = 0) const { return backend_.rank(index(local)); }
  [[nodiscard]] int size() const noexcept { return backend_.size(); }
  /// How many ranks this process drives (NCCL init_all: one per device; otherwise 1).
  [[nodiscard]] int local_ranks() const noexcept { return static_cast<int>(backend_.participants()); }

  [[nodiscard]] const collective_options& options() const noexcept { return options_; }
  self_type& set_options(const collective_options& o) noexcept {
    options_ = o;
    return self();
  }
  self_type& set_bucket_bytes(std::size_t bytes) noexcept {
    options_.bucket_bytes = bytes;
    return self();
  }

  /// Whether local rank `local` can use memory of device `d` (MPI and self: host memory; NCCL:
  /// the local rank's GPU), and in words what it cannot use.
  [[nodiscard]] bool accepts(device d, int local = 0) const { return backend_.accepts(d, index(local)); }
  [[nodiscard]] std::string memory_description(int local = 0) const {
    return backend_.memory_description(index(local));
  }

  // --- one local rank: one leaf list ---

  /// Root's leaves to every rank, in place.
  void broadcast(std::span<const leaf_span> leaves, int root = 0) {
    single("broadcast");
    detail::broadcast(backend_, one(leaves), root, options_);
  }
  /// Every rank's leaves become the element-wise reduction over all ranks, in place.
  void all_reduce(std::span<const leaf_span> leaves, reduce_op op = reduce_op::sum) {
    single("all_reduce");
    detail::all_reduce(backend_, one(leaves), op, options_);
  }
  /// out[i] = in[i] of rank 0, then of rank 1, ... (out[i] holds size() x in[i]).
  void all_gather(std::span<const const_leaf_span> in, std::span<const leaf_span> out) {
    single("all_gather");
    detail::all_gather(backend_, one(in), one(out), options_);
  }
  /// out[i] = part rank() of the reduction of in[i] over all ranks (in[i] holds size() x out[i]).
  void reduce_scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out,
                      reduce_op op = reduce_op::sum) {
    single("reduce_scatter");
    detail::reduce_scatter(backend_, one(in), one(out), op, options_);
  }
  /// Root's in[i] split in rank order, each rank receiving out[i].count elements (sizes may
  /// differ across ranks; they must add up to in[i].count). `in` is read on the root only.
  void scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out, int root = 0) {
    single("scatter");
    detail::scatter(backend_, one(in), one(out), root, options_);
  }

  // --- several local ranks: one leaf list per local rank, in local rank order ---

  void broadcast(std::span<const std::vector<leaf_span>> per_rank, int root = 0) {
    multi("broadcast", per_rank.size());
    detail::broadcast(backend_, views(per_rank), root, options_);
  }
  void all_reduce(std::span<const std::vector<leaf_span>> per_rank, reduce_op op = reduce_op::sum) {
    multi("all_reduce", per_rank.size());
    detail::all_reduce(backend_, views(per_rank), op, options_);
  }
  void all_gather(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out) {
    multi("all_gather", in.size());
    multi("all_gather", out.size());
    detail::all_gather(backend_, views(in), views(out), options_);
  }
  void reduce_scatter(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out,
                      reduce_op op = reduce_op::sum) {
    multi("reduce_scatter", in.size());
    multi("reduce_scatter", out.size());
    detail::reduce_scatter(backend_, views(in), views(out), op, options_);
  }
  void scatter(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out,
               int root = 0) {
    multi("scatter", in.size());
    multi("scatter", out.size());
    detail::scatter(backend_, views(in), views(out), root, options_);
  }

  /// Waits until every rank has reached it (where the backend has a barrier: MPI, self).
  void barrier() requires requires(Backend& b) { b.barrier(); }
  {
    backend_.set_operation("barrier");
    backend_.barrier();
  }

  /// The backend, for the tree forms and for tests.
  [[nodiscard]] Backend& backend() noexcept { return backend_; }
  [[nodiscard]] const Backend& backend() const noexcept { return backend_; }

 private:
  static std::size_t index(int local) noexcept { return static_cast<std::size_t>(local); }
  self_type& self() noexcept { return static_cast<self_type&>(*this); }

  void single(std::string_view op) {
    backend_.set_operation(op);
    if (backend_.participants() != 1) {
      throw config_error(detail::communicator_name(Backend::name()) + "::" + std::string(op) +
                         ": this communicator drives " + std::to_string(local_ranks()) +
                         " local ranks; pass one leaf list per local rank");
    }
  }
  void multi(std::string_view op, std::size_t given) {
    backend_.set_operation(op);
    if (given != backend_.participants()) {
      throw config_error(detail::communicator_name(Backend::name()) + "::" + std::string(op) + ": " +
                         std::to_string(given) + " leaf lists for " + std::to_string(local_ranks()) + " local ranks");
    }
  }
  template <class T>
  static std::span<const std::span<const T>, 1> one(std::span<const T>& s) noexcept {
    return std::span<const std::span<const T>, 1>(&s, 1);
  }
  template <class T>
  static std::vector<std::span<const T>> views(std::span<const std::vector<T>> lists) {
    return {lists.begin(), lists.end()};
  }

  Backend backend_;
  collective_options options_;
};

}  // namespace devicekit
