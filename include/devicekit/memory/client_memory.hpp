#pragma once
/// \file
/// `client_memory`: memory a library takes from a devicekit pool on its own behalf. Every adaptor
/// that lets a library allocate from a pool (rmm_resource, exec_policy's Thrust allocator,
/// cub_temp_storage, cublas_workspace, the C entry points) goes through one: each allocation is
/// counted in the pool's ledger of that client (memory/clients.hpp), and a request past the budget
/// is an out_of_memory whose message starts with the client's name ("client cublas: ..."), the
/// pool's figures kept (what RAPIDS and PyTorch show when they run out: who asked, and what the
/// pool held).
///
///   devicekit::client_memory mine(pool, "my-library");
///   void* p = mine.allocate(bytes, 256, stream);   // counted as "my-library"
///   mine.deallocate(p, bytes, 256, stream);
///   pool.client_stats();                           // ..., {"my-library", ...}
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/detail/memory_trace.hpp>
#include <devicekit/memory/errors.hpp>

#include <cstddef>
#include <source_location>
#include <string>

namespace devicekit {

/// A client's route into a pool: the pool and the client's ledger in it. Two pointers, copied
/// freely (Thrust copies its allocator in host-device code, where a shared_ptr's copy may not be
/// called). The pool keeps its ledgers as long as it lives, and must outlive every copy.
class client_memory {
 public:
  /// `client`'s share of `pool` (device_memory::client_ledger_for: one ledger per name and pool).
  client_memory(device_memory& pool, const std::string& client)
      : pool_(&pool), ledger_(pool.client_ledger_for(client).get()) {}

  /// `bytes` in the order of stream `s`, counted as the client's. out_of_memory naming the
  /// client when the pool refuses for want of memory; the pool's other errors as they are.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment, native_stream_handle s,
                               std::source_location where = std::source_location::current()) const {
    return counted(guarded([&] { return pool_->allocate_async(bytes, alignment, s, where); }), bytes);
  }
  /// `bytes` without a stream (no work in flight may use it once it is freed), counted as above.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment,
                               std::source_location where = std::source_location::current()) const {
    return counted(guarded([&] { return pool_->allocate(bytes, alignment, where); }), bytes);
  }
  /// Gives `p` back in the order of `s`, then takes it off the client's count. Throws as the pool
  /// does for a bad free (nothing is then changed or counted); null does nothing.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment, native_stream_handle s) const {
    if (p == nullptr) return;
    pool_->deallocate_async(p, bytes, alignment, s);
    ledger_->freed(bytes);
  }
  /// Gives `p` back without a stream, as the pool's deallocate, then takes it off the count.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) const {
    if (p == nullptr) return;
    pool_->deallocate(p, bytes, alignment);
    ledger_->freed(bytes);
  }

  [[nodiscard]] device_memory& pool() const noexcept { return *pool_; }
  [[nodiscard]] client_ledger& ledger() const noexcept { return *ledger_; }
  /// The client's name, as its ledger and its out_of_memory messages give it.
  [[nodiscard]] const std::string& client() const noexcept { return ledger_->name(); }

 private:
  /// Runs the pool's allocation with the client named to a memory trace (memory/trace.hpp), which
  /// records it with the allocation; then out_of_memory names the client as well.
  template <class F>
  void* guarded(F&& f) const {
    const detail::trace_client_scope named(ledger_->name());
    try {
      return f();
    } catch (const out_of_memory& e) {
      throw out_of_memory(e, ledger_->name());  // the client in the message, the figures kept
    }
  }
  void* counted(void* p, std::size_t bytes) const noexcept {
    if (p != nullptr) ledger_->allocated(bytes);
    return p;
  }

  device_memory* pool_;
  client_ledger* ledger_;
};

}  // namespace devicekit
