#pragma once
/// \file
/// `device_buffer<T>`: an owning, move-only array of `count` T in a device's pool (RMM's
/// device_uvector without the copy helpers). No constructor runs on the elements: T must be
/// trivially copyable, as for anything that crosses to a GPU bytewise. A buffer made with a
/// stream is freed on that stream (stream-ordered), so the stream must outlive the buffer.
#include <devicekit/memory/device_memory.hpp>

#include <limits>
#include <source_location>
#include <span>
#include <type_traits>
#include <utility>

namespace devicekit {

template <class T>
class device_buffer {
  static_assert(
      std::is_trivially_copyable_v<T>,
      "device_buffer<T>: T must be trivially copyable (device memory is copied bytewise; no constructors run)");

 public:
  using value_type = T;

  device_buffer() noexcept = default;

  /// `count` elements from `memory`, synchronous (freed with no work in flight on them).
  device_buffer(std::size_t count, device_memory& memory, std::source_location where = std::source_location::current())
      : memory_(&memory), size_(count) {
    data_ = static_cast<T*>(memory.allocate(bytes_for(count), alignment(), where));
  }

  /// `count` elements, allocated and later freed in the order of stream `s`.
  device_buffer(std::size_t count, device_memory& memory, stream_ref s,
                std::source_location where = std::source_location::current())
      : memory_(&memory), size_(count), stream_(s.native_handle()), ordered_(true) {
    data_ = static_cast<T*>(memory.allocate_async(bytes_for(count), alignment(), stream_, where));
  }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& other) noexcept
      : memory_(std::exchange(other.memory_, nullptr)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_),
        ordered_(other.ordered_) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      memory_ = std::exchange(other.memory_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
      ordered_ = other.ordered_;
    }
    return *this;
  }
  ~device_buffer() { reset(); }

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// cpu:0 for an empty (default or moved-from) buffer.
  [[nodiscard]] device get_device() const noexcept {
    return memory_ != nullptr ? memory_->get_device() : device::cpu();
  }
  [[nodiscard]] device_memory* memory() const noexcept { return memory_; }
  [[nodiscard]] bool stream_ordered() const noexcept { return ordered_; }

  /// The elements as a span, for a buffer in host memory (cpu:0); config_error otherwise, since
  /// device memory cannot be read by the host.
  [[nodiscard]] std::span<T> host_span() {
    if (memory_ != nullptr && !memory_->get_device().is_cpu()) {
      throw config_error("device_buffer::host_span: the buffer is on " + memory_->get_device().str() +
                         ", which the host cannot read; copy it to the host first");
    }
    return {data_, size_};
  }

  /// Frees the elements now.
  void reset() noexcept {
    if (data_ != nullptr && memory_ != nullptr) {
      // Cannot fail: the pointer and size are the ones the pool handed out.
      if (ordered_) {
        memory_->deallocate_async(data_, size_bytes(), alignment(), stream_);
      } else {
        memory_->deallocate(data_, size_bytes(), alignment());
      }
    }
    data_ = nullptr;
    size_ = 0;
  }

 private:
  static constexpr std::size_t alignment() noexcept {
    return alignof(T) > detail::pool_granule ? alignof(T) : detail::pool_granule;
  }
  static std::size_t bytes_for(std::size_t count) {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
      throw invalid_request("device_buffer: " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                            " bytes overflow the size type");
    }
    return count * sizeof(T);
  }

  device_memory* memory_ = nullptr;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  native_stream_handle stream_{};
  bool ordered_ = false;
};

}  // namespace devicekit
