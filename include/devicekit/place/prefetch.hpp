#pragma once
/// \file
/// `prefetch(range_of_host_trees, device, depth = 2)`: a C++20 input view that places the
/// source's trees on `device` ahead of the consumer.
///
///   for (auto& batch : dk::prefetch(loader, dev, 2)) step(batch);   // batch: placed tree
///
/// A background thread walks the source, places each tree (pinned staging, copies on a copy
/// stream of its own) and queues it; the consumer's stream waits for that copy on an event, not
/// the host (pass the stream your kernels run on; by default the legacy default stream). Read a
/// tree on the consumer stream: kernels queued there, `to_host(tree, consumer)`, or, with the
/// default consumer, `to_host(tree)`, which is ordered after the legacy default stream (docs/placement.md,
/// "Calls without a stream"). A stream of yours that is neither must wait for the consumer first. At most
/// `depth` trees are placed ahead of the consumer (queued or being placed); on a GPU a tree the
/// loop has moved past is kept until the consumer stream has got past that point too (at most
/// `depth` of those), so memory is bounded and a caching pool never reuses memory a kernel reads.
///
/// An exception thrown by the source (or by placement) reaches the consumer, in order: the trees
/// placed before it are delivered first, then the increment that would pass it throws. Leaving
/// the loop early (break, exception) stops the thread and joins it when the view is destroyed;
/// a source blocked inside its own increment is waited for.
///
/// The source is iterated on the background thread only, and must allow that. The resource must
/// be thread-safe (devicekit's are).
#include <devicekit/place/place.hpp>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <thread>
#include <type_traits>
#include <utility>

namespace devicekit {

template <std::ranges::input_range R, placement_resource Res>
class prefetch_view : public std::ranges::view_interface<prefetch_view<R, Res>> {
 public:
  using source_reference = std::ranges::range_reference_t<R>;
  using placed_type = std::remove_cvref_t<decltype(place(std::declval<source_reference>(), device{},
                                                         std::declval<const stream&>(), std::declval<Res&>()))>;

 private:
  struct item {
    placed_type tree;
#if DEVICEKIT_HAS_CUDA
    cudaEvent_t ready = nullptr;
#endif
  };

  struct state {
    state(R src, device d, std::size_t n, Res* r, native_stream_handle consumer)
        : source(std::move(src)), dev(d), depth(n), resource(r), consumer_stream(consumer) {}
    R source;
    device dev;
    std::size_t depth;
    Res* resource;
    native_stream_handle consumer_stream;

    std::mutex mutex;
    std::condition_variable changed;
    std::deque<item> queue;
    std::optional<placed_type> current;
#if DEVICEKIT_HAS_CUDA
    // Trees the consumer has moved past, kept until the consumer stream has passed an event
    // recorded when it moved on: its kernels may still read them, and a caching pool would hand
    // their memory out again at once.
    std::deque<std::pair<placed_type, cudaEvent_t>> retired;
#endif
    bool started = false;
    bool finished = false;  // the worker has stopped producing
    bool stop = false;      // the consumer has gone
    std::exception_ptr error;
    std::thread worker;

    ~state() {
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      changed.notify_all();
      if (worker.joinable()) worker.join();
#if DEVICEKIT_HAS_CUDA
      // The consumer may still read the batch it holds (its kernels run after this returns): keep
      // the batch until the consumer stream gets past this point, as retire_current does, or a
      // caching pool would hand its memory out again under those reads.
      if (current && dev.is_cuda() && cuda_calls_allowed()) {
        scoped_device on(dev.ordinal(), std::nothrow);
        if (detail::cuda_events::wait_for(consumer_stream) != cudaSuccess) (void)cudaStreamSynchronize(consumer_stream);
      }
      current.reset();
      for (auto& it : queue) {
        if (it.ready != nullptr && cuda_calls_allowed()) (void)cudaEventDestroy(it.ready);
      }
      while (!retired.empty()) {
        if (cuda_calls_allowed()) {
          (void)cudaEventSynchronize(retired.front().second);
          (void)cudaEventDestroy(retired.front().second);
        }
        retired.pop_front();
      }
#endif
    }

#if DEVICEKIT_HAS_CUDA
    /// Keeps the current tree until the consumer stream gets past this point; frees the ones it
    /// has got past; never keeps more than `depth` (waits for the oldest instead).
    void retire_current() {
      scoped_device on(dev.ordinal());
      retired.emplace_back(std::move(*current), detail::record_event(consumer_stream));
      current.reset();
      while (!retired.empty()) {
        const cudaError_t r = cudaEventQuery(retired.front().second);
        if (r == cudaErrorNotReady) {  // a status, not the last error: nothing to clear
          if (retired.size() <= depth) break;
          DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(retired.front().second));
        }
        (void)cudaEventDestroy(retired.front().second);
        retired.pop_front();
      }
    }
#endif

    void run() noexcept {
      detail::scoped_range range("devicekit.prefetch");
#if DEVICEKIT_HAS_CUDA
      std::optional<stream> copy_stream;  // outlives the try: synchronised on every way out
#endif
      try {
#if DEVICEKIT_HAS_CUDA
        // This thread is ours and works for `dev` alone: make it its current device for good, so
        // that the events recorded here belong to the copy stream's device (cudaEventRecord
        // refuses an event of another device). Nothing to restore: the thread ends with the view.
        if (dev.is_cuda()) DEVICEKIT_CUDA_CHECK(cudaSetDevice(dev.ordinal()));
        if (dev.is_cuda()) copy_stream.emplace(dev);
        const stream host_stream;
        const stream& s = copy_stream ? *copy_stream : host_stream;
#else
        const stream s;
#endif
        auto it = std::ranges::begin(source);
        const auto end = std::ranges::end(source);
        for (;;) {
          {
            // A slot first, then the next tree: at most `depth` trees ahead of the consumer.
            std::unique_lock lock(mutex);
            changed.wait(lock, [&] { return stop || queue.size() < depth; });
            if (stop) break;
          }
          if (it == end) break;
          auto&& tree = *it;
#if DEVICEKIT_HAS_CUDA
          // A source tree on a GPU is read as a call without a stream reads it: after the work
          // queued on its device's legacy default stream (detail::order_after_default_stream).
          if (const auto from = detail::source_device(tree, "prefetch"); from && s.get_device().is_cuda()) {
            detail::order_after_default_stream(s.native_handle(), *from);
          }
#endif
          item next{place(tree, dev, s, *resource)};
#if DEVICEKIT_HAS_CUDA
          if (dev.is_cuda()) next.ready = detail::record_event(s.native_handle());
#endif
          ++it;
          {
            std::lock_guard lock(mutex);
            queue.push_back(std::move(next));
          }
          changed.notify_all();
        }
      } catch (...) {
        std::lock_guard lock(mutex);
        error = std::current_exception();
      }
#if DEVICEKIT_HAS_CUDA
      // The copy stream goes away with this thread, on the error path too: its queued copies
      // must be done by then (the events recorded on it stay valid after it is destroyed).
      if (copy_stream) {
        try {
          detail::host_wait(*copy_stream);
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!error) error = std::current_exception();
        }
      }
#endif
      {
        std::lock_guard lock(mutex);
        finished = true;
      }
      changed.notify_all();
    }

    /// Drops the current tree and takes the next one (nullopt at the end). Rethrows the source's
    /// exception once everything placed before it has been handed out.
    void advance() {
#if DEVICEKIT_HAS_CUDA
      if (current && dev.is_cuda()) retire_current();
#endif
      current.reset();
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return !queue.empty() || finished; });
      if (queue.empty()) {
        if (error) std::rethrow_exception(std::exchange(error, nullptr));
        return;
      }
      item next = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      changed.notify_all();
#if DEVICEKIT_HAS_CUDA
      if (next.ready != nullptr) {
        scoped_device on(dev.ordinal());
        const cudaError_t r = cudaStreamWaitEvent(consumer_stream, next.ready, 0);
        (void)cudaEventDestroy(next.ready);
        DEVICEKIT_CUDA_CHECK(r);
      }
#endif
      current.emplace(std::move(next.tree));
    }
  };

 public:
  class iterator {
   public:
    using value_type = placed_type;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(state* s) noexcept : state_(s) {}
    [[nodiscard]] placed_type& operator*() const { return *state_->current; }
    [[nodiscard]] placed_type* operator->() const { return &*state_->current; }
    iterator& operator++() {
      state_->advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& i, std::default_sentinel_t) noexcept {
      return i.state_ == nullptr || !i.state_->current.has_value();
    }

   private:
    state* state_ = nullptr;
  };

  prefetch_view() = default;
  prefetch_view(R source, device dev, std::size_t depth, Res& resource, native_stream_handle consumer = nullptr) {
    if (depth == 0) throw config_error("prefetch: depth must be at least 1 (trees placed ahead of the consumer)");
    state_ = std::make_unique<state>(std::move(source), dev, depth, &resource, consumer);
  }

  /// Starts the background thread and waits for the first tree. Single pass: once only.
  [[nodiscard]] iterator begin() {
    if (!state_) throw config_error("prefetch_view: begin() on an empty (moved-from) view");
    if (state_->started) throw config_error("prefetch_view: begin() called twice; a prefetch view is single-pass");
    state_->started = true;
    state_->worker = std::thread([s = state_.get()] { s->run(); });
    state_->advance();
    return iterator(state_.get());
  }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

  /// The device trees are placed on and the most trees placed ahead of the consumer.
  [[nodiscard]] device target() const noexcept { return state_ ? state_->dev : device{}; }
  [[nodiscard]] std::size_t depth() const noexcept { return state_ ? state_->depth : 0; }

 private:
  std::unique_ptr<state> state_;
};

/// A view placing the trees of `source` on `dev`, up to `depth` ahead, allocating from
/// `resource`; the consumer's stream `consumer` (cuda) waits for each tree's copy.
template <std::ranges::viewable_range R, placement_resource Res>
[[nodiscard]] auto prefetch(R&& source, device dev, std::size_t depth, Res& resource,
                            native_stream_handle consumer = nullptr) {
  detail::check_device_exists(dev, "prefetch");
  return prefetch_view<std::views::all_t<R>, Res>(std::views::all(std::forward<R>(source)), dev, depth, resource,
                                                  consumer);
}

/// prefetch with the default resource of `dev`; the consumer stream `consumer` waits for each
/// copy (cuda; the legacy default stream if none).
template <std::ranges::viewable_range R>
[[nodiscard]] auto prefetch(R&& source, device dev, std::size_t depth = 2, native_stream_handle consumer = nullptr) {
  detail::check_device_exists(dev, "prefetch");
  return prefetch(std::forward<R>(source), dev, depth, default_placement_resource(dev), consumer);
}

/// prefetch for kernels on `consumer` (a stream of `dev`).
template <std::ranges::viewable_range R>
[[nodiscard]] auto prefetch(R&& source, device dev, std::size_t depth, stream_ref consumer) {
  detail::check_device_exists(dev, "prefetch");
  detail::check_stream(consumer, dev, "prefetch");
  return prefetch(std::forward<R>(source), dev, depth, default_placement_resource(dev), consumer.native_handle());
}

}  // namespace devicekit
