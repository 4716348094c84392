#pragma once
/// \file
/// The errors of distribute/ (the layer's only exception types; argument errors are core's
/// config_error): communication_error, a failed MPI or NCCL call, and structure_mismatch_error,
/// ranks that passed different trees.
#include <devicekit/core/error.hpp>

#include <string>
#include <string_view>

namespace devicekit {

/// An MPI or NCCL call failed. Says which collective, which call, on which rank, and the
/// library's error string.
class communication_error : public error {
 public:
  communication_error(std::string_view backend, std::string_view operation, std::string_view call, int rank, int size,
                      int code, std::string_view detail)
      : error(format(backend, operation, call, rank, size, code, detail)),
        backend_(backend),
        operation_(operation),
        call_(call),
        detail_(detail),
        rank_(rank),
        size_(size),
        code_(code) {}

  [[nodiscard]] const std::string& backend() const noexcept { return backend_; }
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  static std::string format(std::string_view backend, std::string_view operation, std::string_view call, int rank,
                            int size, int code, std::string_view detail);

  std::string backend_, operation_, call_, detail_;
  int rank_ = -1, size_ = 0, code_ = 0;
};

/// The ranks passed trees (or arguments) that do not agree; thrown on every rank with the same
/// description of who passed what.
class structure_mismatch_error : public error {
 public:
  structure_mismatch_error(std::string_view operation, int rank, std::string_view detail)
      : error(std::string(operation) + " on rank " + std::to_string(rank) + ": " + std::string(detail)),
        operation_(operation),
        rank_(rank) {}
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }

 private:
  std::string operation_;
  int rank_ = -1;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/distribute/errors.ipp>
#endif
