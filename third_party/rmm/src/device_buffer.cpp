/*
 * SPDX-FileCopyrightText: Copyright (c) 2019-2026, NVIDIA CORPORATION.
 * SPDX-License-Identifier: Apache-2.0
 */

#include <rmm/aligned.hpp>
#include <rmm/detail/error.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/error.hpp>

#include <cuda_runtime_api.h>

#include <memory>

namespace rmm {

device_buffer::device_buffer() : _mr{rmm::mr::get_current_device_resource_ref()} {}

device_buffer::device_buffer(std::size_t size,
                             cuda_stream_view stream,
                             cuda::mr::any_resource<cuda::mr::device_accessible> mr)
  : device_buffer::device_buffer(size, rmm::CUDA_ALLOCATION_ALIGNMENT, stream, std::move(mr))
{
}

device_buffer::device_buffer(std::size_t size,
                             std::size_t alignment,
                             cuda_stream_view stream,
                             cuda::mr::any_resource<cuda::mr::device_accessible> mr)
  : _alignment{alignment}, _stream{stream}, _mr{std::move(mr)}
{
  RMM_EXPECTS(rmm::is_supported_alignment(alignment),
              "Requested alignment is not a power of 2",
              rmm::invalid_argument);
  cuda_set_device_raii dev{_device};
  allocate_async(size);
}

device_buffer::device_buffer(void const* source_data,
                             std::size_t size,
                             cuda_stream_view stream,
                             cuda::mr::any_resource<cuda::mr::device_accessible> mr)
  : device_buffer::device_buffer(
      source_data, size, rmm::CUDA_ALLOCATION_ALIGNMENT, stream, std::move(mr))
{
}

device_buffer::device_buffer(void const* source_data,
                             std::size_t size,
                             std::size_t alignment,
                             cuda_stream_view stream,
                             cuda::mr::any_resource<cuda::mr::device_accessible> mr)
  : _alignment{alignment}, _stream{stream}, _mr{std::move(mr)}
{
  RMM_EXPECTS(rmm::is_supported_alignment(alignment),
              "Requested alignment is not a power of 2",
              rmm::invalid_argument);
  cuda_set_device_raii dev{_device};
  allocate_async(size);
  copy_async(source_data, size);
}

device_buffer::device_buffer(device_buffer const& other,
                             cuda_stream_view stream,
                             cuda::mr::any_resource<cuda::mr::device_accessible> mr)
  : device_buffer{other.data(), other.size(), other.alignment(), stream, std::move(mr)}
{
}

device_buffer::device_buffer(device_buffer&& other) noexcept
  : _data{other._data},
    _size{other._size},
    _alignment{other._alignment},
    _capacity{other._capacity},
    _stream{other.stream()},
    _mr{std::move(other._mr)},
    _device{other._device}
{
  other._data      = nullptr;
  other._size      = 0;
  other._alignment = 1;
  other._capacity  = 0;
  other.set_stream(cuda_stream_view{});
  other._device = cuda_device_id{-1};
}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept
{
  if (this != std::addressof(other)) {
    cuda_set_device_raii dev{_device};
    deallocate_async();

    _data      = other._data;
    _size      = other._size;
    _alignment = other._alignment;
    _capacity  = other._capacity;
    set_stream(other.stream());
    _mr     = std::move(other._mr);
    _device = other._device;

    other._data      = nullptr;
    other._size      = 0;
    other._alignment = 1;
    other._capacity  = 0;
    other.set_stream(cuda_stream_view{});
    other._device = cuda_device_id{-1};
  }
  return *this;
}

device_buffer::~device_buffer() noexcept
{
  cuda_set_device_raii dev{_device};
  deallocate_async();
  _stream = cuda_stream_view{};
}

void device_buffer::allocate_async(std::size_t bytes)
{
  _size     = bytes;
  _capacity = bytes;
  _data     = (bytes > 0) ? _mr.allocate(stream(), bytes, alignment()) : nullptr;
}

void device_buffer::deallocate_async() noexcept
{
  if (capacity() > 0) { _mr.deallocate(stream(), data(), capacity(), alignment()); }
  _size      = 0;
  _alignment = 1;
  _capacity  = 0;
  _data      = nullptr;
}

void device_buffer::copy_async(void const* source, std::size_t bytes)
{
  if (bytes > 0) {
    RMM_EXPECTS(nullptr != source, "Invalid copy from nullptr.");
    RMM_EXPECTS(nullptr != _data, "Invalid copy to nullptr.");

    RMM_CUDA_TRY(cudaMemcpyAsync(_data, source, bytes, cudaMemcpyDefault, stream().value()));
  }
}

void device_buffer::reserve(std::size_t new_capacity, cuda_stream_view stream)
{
  set_stream(stream);
  if (new_capacity > capacity()) {
    cuda_set_device_raii dev{_device};
    auto tmp            = device_buffer{new_capacity, alignment(), stream, _mr};
    auto const old_size = size();
    RMM_CUDA_TRY(cudaMemcpyAsync(tmp.data(), data(), size(), cudaMemcpyDefault, stream.value()));
    *this = std::move(tmp);
    _size = old_size;
  }
}

void device_buffer::resize(std::size_t new_size, cuda_stream_view stream)
{
  set_stream(stream);
  // If the requested size is smaller than the current capacity, just update
  // the size without any allocations
  if (new_size <= capacity()) {
    _size = new_size;
  } else {
    cuda_set_device_raii dev{_device};
    auto tmp = device_buffer{new_size, alignment(), stream, _mr};
    RMM_CUDA_TRY(cudaMemcpyAsync(tmp.data(), data(), size(), cudaMemcpyDefault, stream.value()));
    *this = std::move(tmp);
  }
}

void device_buffer::shrink_to_fit(cuda_stream_view stream)
{
  set_stream(stream);
  if (size() != capacity()) {
    cuda_set_device_raii dev{_device};
    // Invoke copy ctor on self which only copies `[0, size())` and swap it
    // with self. The temporary `device_buffer` will hold the old contents
    // which will then be destroyed
    auto tmp = device_buffer{*this, stream, _mr};
    std::swap(tmp, *this);
  }
}

}  // namespace rmm
