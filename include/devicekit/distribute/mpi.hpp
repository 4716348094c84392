#pragma once
/// \file
/// MPI for host memory: `mpi_environment` (MPI_Init / MPI_Finalize, once per process) and
/// `mpi_communicator`, which runs devicekit's bucketed collectives over MPI on CPU processes and
/// bootstraps NCCL across processes (nccl.hpp). The MPI calls themselves, with their datatypes,
/// errors and int-count limits, are in detail/mpi_transport.hpp (mpi_backend), as NCCL's are in
/// detail/nccl_transport.hpp.
///
/// Reduced-precision leaves (float16, bfloat16, float8_e4m3fn, float8_e5m2: core/float_types.hpp)
/// have no datatype in the MPI standard (MPI 4.1 §3.2.2 lists none; MPI_Float16 etc. are only
/// proposals). Broadcast, gather and scatter move them as bytes. Reductions widen them to float
/// into a scratch buffer, reduce that with MPI_FLOAT and the predefined MPI_Op, and narrow the
/// result back (round to nearest even; fp8 saturating): every element is computed in float over
/// all ranks and rounded once, and an average is divided in float before that one rounding. We
/// chose this over a user-defined MPI_Op on a byte type because such an op combines two
/// operands at a time and would round after every step of MPI's reduction tree (log2 or n - 1
/// roundings, in an order that depends on the algorithm MPI picks); the cost is 2x (16-bit) or
/// 4x (fp8) the bytes on the wire, on host memory, where these types are rare.
///
/// Available when MPI is (DEVICEKIT_HAS_MPI: link devicekit::mpi in CMake, or compile with the
/// MPI include path). Without MPI this header declares nothing.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_MPI
#  include <devicekit/distribute/collectives.hpp>
#  include <devicekit/distribute/detail/mpi_transport.hpp>

#  include <mpi.h>

namespace devicekit {

/// Initialises MPI unless it already is, and finalises it on destruction if it initialised it.
/// Create one in main(), before any communicator, and let it outlive them.
class mpi_environment {
 public:
  /// `required` thread level: MPI_THREAD_FUNNELED suffices when one thread makes the MPI calls.
  mpi_environment(int* argc, char*** argv, int required = MPI_THREAD_FUNNELED) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized != 0) {
      MPI_Query_thread(&provided_);
      return;
    }
    const int rc = MPI_Init_thread(argc, argv, required, &provided_);
    if (rc != MPI_SUCCESS) {
      throw communication_error("MPI", "init", "MPI_Init_thread", -1, 0, rc, "MPI could not start");
    }
    owner_ = true;
  }
  mpi_environment() : mpi_environment(nullptr, nullptr) {}
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (owner_ && mpi_active()) MPI_Finalize();
  }

  /// The thread level MPI provides.
  [[nodiscard]] int thread_level() const noexcept { return provided_; }
  /// True when this object initialised MPI (and will finalise it).
  [[nodiscard]] bool owner() const noexcept { return owner_; }

 private:
  bool owner_ = false;
  int provided_ = 0;
};

namespace detail {
static_assert(collective_backend<mpi_backend>);
}  // namespace detail

/// Collectives over MPI on host memory. Works on a duplicate of the given communicator (so its
/// messages never mix with the application's), with errors returned as exceptions
/// (communication_error naming the operation, the MPI call, the rank and MPI's error string).
/// Every collective is called by every rank with trees of the same structure; when they differ,
/// every rank throws structure_mismatch_error (see collectives.hpp).
///
/// The collectives, options and rank queries are basic_communicator's; tree forms
/// (`dk::all_reduce(comm, tree)`) are in tree_collectives.hpp.
class mpi_communicator : public basic_communicator<detail::mpi_backend, mpi_communicator> {
 public:
  /// A communicator over `base` (default: every process). MPI must be initialised.
  explicit mpi_communicator(MPI_Comm base = MPI_COMM_WORLD, collective_options options = {})
      : basic_communicator(detail::mpi_backend(base), options) {}

  [[nodiscard]] MPI_Comm native_handle() const noexcept { return backend().comm(); }
};

}  // namespace devicekit

#endif  // DEVICEKIT_HAS_MPI
