// data_parallel: replicate the weights, shard the batch, compute the gradients on the devices,
// all-reduce them in reduced precision, clip by the global norm, update - on devicekit's pieces.
//
// The model is a diagonal linear one (two layers of per-feature gains, y = gain * x element by
// element), so that every step is a tree operation: each replica computes its rows' gradients
// with tree_transform (one launch over every leaf per row), casts them to the precision the
// generative-model preset chose (bf16 on GPUs that have it, like PyTorch DDP's bf16 compression
// hook), all-reduces them over every replica, clips them by the global norm (tree_global_norm:
// clip_grad_norm_'s rule) and updates its fp32 master weights with tree_axpy. At the end the
// replicas compare their weights (all_gather), and the program checks them against what a plain
// host loop says: the first step's loss, and the gains the data was made with. It prints what is
// wrong and exits with status 1 when the replicas differ, the loss did not fall or a check fails.
//
// It runs on what it finds:
//   build/examples/data_parallel                one process (the self communicator, no MPI)
//   mpirun -np 2 build/examples/data_parallel   CPU processes; gradients by MPI all-reduce
//                                               (so too for processes that share a GPU: NCCL
//                                               needs a GPU of its own for each rank)
//   --grads bf16|fp16|fp32                      the gradients' precision instead of the preset's
//   with GPUs                                   one replica per GPU of the process (dm.replicate,
//                                               dm.distribute); gradients through NCCL. The
//                                               kernels need this file compiled by nvcc (CMake
//                                               does so when it has a CUDA compiler): compiled
//                                               by g++, the replicas compute on the CPU instead.
#include <devicekit/devicekit.hpp>
#include <devicekit/compute.hpp>
#if DEVICEKIT_CUDA_COMPILER
#  include <devicekit/compute/kernels.cuh>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#if !DEVICEKIT_HAS_MDSPAN  // tests/CMakeLists.txt leaves this example out of such a build
#  error "this example's shaped arrays need an mdspan: CCCL's headers (scripts/lib.sh fetches them) or <mdspan>"
#endif

namespace dk = devicekit;

namespace {

constexpr std::size_t encoder_width = 8;
constexpr std::size_t decoder_width = 24;
constexpr std::size_t rows_per_batch = 30;  // 30 rows over 4 processes: 8, 8, 7, 7
constexpr int steps = 60;
constexpr float learning_rate = 0.3f;
constexpr double max_grad_norm = 2.0;    // of the batch-mean gradient, as clip_grad_norm_'s max_norm
constexpr float gain_tolerance = 0.01f;  // how close the learned gains must come to true_gain

/// Whether this translation unit has the kernels of the tree algorithms (compiled by nvcc).
constexpr bool kernels_here = DEVICEKIT_CUDA_COMPILER != 0;

using matrix = dk::md::mdspan<float, dk::md::dextents<std::size_t, 2>>;

// The trees are tuples: nvcc compiles this file for the kernels, and Boost.Hana structs are
// host-only (tree/hana.hpp). Element 0 is the encoder layer, element 1 the decoder layer.

/// The fp32 master weights: each layer's per-feature gains.
using params = std::tuple<std::vector<float>, std::vector<float>>;
/// A batch's inputs (or targets) for each layer, rows x width: host views that placement turns into
/// shaped arrays and shard_batch splits by rows.
using features = std::tuple<matrix, matrix>;
/// Inputs x and targets y.
using batch = std::tuple<features, features>;

/// The host memory behind a batch of `rows` rows.
struct batch_storage {
  std::size_t rows;
  std::vector<float> xe = std::vector<float>(rows * encoder_width), xd = std::vector<float>(rows * decoder_width),
                     ye = std::vector<float>(rows * encoder_width), yd = std::vector<float>(rows * decoder_width);
  batch view() {
    return {{matrix(xe.data(), rows, encoder_width), matrix(xd.data(), rows, decoder_width)},
            {matrix(ye.data(), rows, encoder_width), matrix(yd.data(), rows, decoder_width)}};
  }
};

/// The true gain of feature f of a layer (what the model must learn).
float true_gain(std::size_t f, std::size_t width) { return 1.5f - 2.f * static_cast<float>(f) / float(width); }

/// The batch of step `step` (made on rank 0 only): y = true_gain * x + a little noise.
batch_storage make_batch(int step) {
  std::mt19937 rng(1234u + static_cast<unsigned>(step));
  std::normal_distribution<float> n(0.f, 1.f);
  batch_storage b{rows_per_batch};
  const auto fill = [&](std::vector<float>& x, std::vector<float>& y, std::size_t width) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = n(rng);
      y[i] = true_gain(i % width, width) * x[i] + 0.01f * n(rng);
    }
  };
  fill(b.xe, b.ye, encoder_width);
  fill(b.xd, b.yd, decoder_width);
  return b;
}

/// The mean loss of weights `w` on batch `b` (sum of err^2 / 2 over rows_per_batch), by a plain
/// loop on the host: what the replicas must find at step 0, whatever devices they run on.
double host_loss(const params& w, const batch_storage& b) {
  double sum = 0;
  const auto add = [&](const std::vector<float>& gain, const std::vector<float>& x, const std::vector<float>& y) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double err = gain[i % gain.size()] * x[i] - y[i];
      sum += err * err / 2;
    }
  };
  add(std::get<0>(w), b.xe, b.ye);
  add(std::get<1>(w), b.xd, b.yd);
  return sum / rows_per_batch;
}

// The elementwise steps, as __host__ __device__ functors (lambdas work too, with nvcc
// --extended-lambda): one definition runs on the GPU and on the CPU.
struct residual {  // err = w * x - y
  DEVICEKIT_HOST_DEVICE float operator()(float w, float x, float y) const { return w * x - y; }
};
struct accumulate_gradient {  // g += err * x: the gradient of err^2 / 2
  DEVICEKIT_HOST_DEVICE float operator()(float g, float err, float x) const { return g + err * x; }
};

/// Row `r` of every leaf of a placed `features` shard, as views (no copy): a tree with params'
/// structure, so it meets the weights in tree_transform.
template <class Shard>
auto row_of(const Shard& m, std::size_t r) {
  return dk::tree_map(
      [r](const auto& leaf) {
        const std::size_t width = leaf.extent(1);
        return dk::device_array<float>::view(leaf.data() + r * width, width, leaf.device());
      },
      m);
}

/// What the command line asks for the gradients' precision ("" = the preset's choice).
std::string_view requested_precision(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "--grads") return argv[i + 1];
  return {};
}

#if DEVICEKIT_HAS_NCCL && DEVICEKIT_HAS_MPI
/// Whether two ranks of `world` would give NCCL the same GPU (`gpu` is this rank's). NCCL needs a
/// distinct GPU for each rank of a communicator (ncclCommInitRank fails on a duplicate, and
/// nccl_communicator::from_mpi refuses it with a config_error), as when more processes run on a
/// node than it has GPUs. The ranks of each node (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED:
/// the processes that can share memory, MPI 3.1 section 6.4.2) compare their GPUs' PCI addresses,
/// which name a GPU on its node where an ordinal does not (CUDA_VISIBLE_DEVICES renumbers them).
/// The answer is then all-reduced (max) over every rank: each must take the same path, or the
/// ranks that chose NCCL would wait forever for those that chose MPI.
bool ranks_share_a_gpu(dk::mpi_communicator& world, dk::device gpu) {
  MPI_Comm node_handle = MPI_COMM_NULL;
  const int rc =
      MPI_Comm_split_type(world.native_handle(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node_handle);
  if (rc != MPI_SUCCESS) {
    throw dk::communication_error("MPI", "finding the ranks of this node", "MPI_Comm_split_type", world.rank(),
                                  world.size(), rc, "");
  }
  dk::mpi_communicator node(node_handle);  // works on a duplicate of it
  MPI_Comm_free(&node_handle);
  std::vector<int> pci(3);
  DEVICEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&pci[0], cudaDevAttrPciDomainId, gpu.ordinal()));
  DEVICEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&pci[1], cudaDevAttrPciBusId, gpu.ordinal()));
  DEVICEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&pci[2], cudaDevAttrPciDeviceId, gpu.ordinal()));
  const std::vector<int> all = dk::all_gathered(node, pci);  // rank-major: 3 numbers per rank
  int shared = 0;
  for (int r = 0; r < node.size(); ++r) {
    if (r != node.rank() && std::equal(pci.begin(), pci.end(), all.begin() + 3 * r)) shared = 1;
  }
  dk::all_reduce(world, shared, dk::reduce_op::max);
  return shared != 0;
}
#endif

/// Adds up the replicas' gradients over every replica of every process: NCCL when they are on
/// GPUs (one communicator for the process's GPUs, or one rank per process through MPI), the
/// process communicator (MPI, or self) otherwise. `staging_gpu`: replicas on the CPU in a program
/// that has GPUs but not the kernels (compiled by g++) still add their gradients up on that GPU
/// through NCCL, placed there and back. Processes that share a GPU reduce over MPI instead.
template <class HostComm>
class gradient_reducer {
 public:
  gradient_reducer(HostComm& host, const std::vector<dk::device>& replicas, std::optional<dk::device> staging_gpu)
      : host_(host) {
#if DEVICEKIT_HAS_NCCL
    std::vector<dk::device> gpus = replicas;
    if (staging_gpu) {
      gpus = {*staging_gpu};
      staging_ = staging_gpu;
    }
    if (!gpus.front().is_cuda()) return;
    if (host_.size() == 1) {
      nccl_.emplace(dk::nccl_communicator::init_all(gpus));
      return;
    }
#  if DEVICEKIT_HAS_MPI
    if constexpr (std::is_same_v<HostComm, dk::mpi_communicator>) {
      if (gpus.size() == 1) {
        shared_gpu_ = ranks_share_a_gpu(host_, gpus.front());
        if (!shared_gpu_) nccl_.emplace(dk::nccl_communicator::from_mpi(host_, gpus.front()));
      }
    }
#  endif
#else
    (void)replicas;
    (void)staging_gpu;
#endif
  }

  [[nodiscard]] std::string engine() const {
#if DEVICEKIT_HAS_NCCL
    if (nccl_ && staging_) return "NCCL on " + staging_->str();
    if (nccl_) return "NCCL";
    if (shared_gpu_) return "MPI on the host: ranks share a GPU, and NCCL needs one per rank";
#endif
    return host_.size() > 1 ? "MPI" : "the self communicator";
  }

  /// `grads[i]`: replica i's gradients (on its device); on return every one holds the sum.
  template <class Tree>
  void all_reduce(std::vector<Tree>& grads) {
#if DEVICEKIT_HAS_NCCL
    if (nccl_ && !staging_) {
      if (grads.size() == 1) {
        dk::all_reduce(*nccl_, grads.front(), dk::reduce_op::sum);
      } else {
        dk::all_reduce(*nccl_, dk::one_per_device(grads), dk::reduce_op::sum);
      }
      return;
    }
#endif
    // Host memory: add the process's replicas, all-reduce over the processes, hand the sum back.
    for (std::size_t i = 1; i < grads.size(); ++i) dk::tree_axpy(1.f, grads[i], grads[0]);
#if DEVICEKIT_HAS_NCCL
    if (nccl_) {  // with staging_: the CPU replicas' sum, added up on the staging GPU
      auto on_gpu = dk::place(grads[0], *staging_);
      dk::all_reduce(*nccl_, on_gpu, dk::reduce_op::sum);
      dk::tree_cast(grads[0], dk::to_host(on_gpu));
    } else
#endif
    {
      all_reduce_on_host(grads[0]);
    }
    for (std::size_t i = 1; i < grads.size(); ++i) dk::tree_cast(grads[i], grads[0]);
  }

 private:
  /// The host communicator reads host memory only (devicekit does not assume a CUDA-aware MPI):
  /// a sum on a GPU (replicas of processes that share it) goes to the host and back.
  template <class Tree>
  void all_reduce_on_host(Tree& sum) {
    if (dk::device_of(sum).value_or(dk::device::cpu()).is_cuda()) {
      auto on_host = dk::to_host(sum);
      dk::all_reduce(host_, on_host, dk::reduce_op::sum);
      dk::copy(on_host, sum);
    } else {
      dk::all_reduce(host_, sum, dk::reduce_op::sum);
    }
  }

  HostComm& host_;
#if DEVICEKIT_HAS_NCCL
  std::optional<dk::nccl_communicator> nccl_;
  std::optional<dk::device> staging_;
  bool shared_gpu_ = false;  // some ranks share a GPU: no NCCL
#endif
};

/// One training run on `dm`'s devices, with gradients all-reduced in precision `Grad`.
template <class Grad, class Comm, class Manager>
int train(Comm& comm, Manager& dm, std::string_view precision, std::optional<dk::device> staging_gpu) {
  const int rank = comm.rank(), size = comm.size();
  const std::vector<dk::device> replicas = dm.devices();
  gradient_reducer<Comm> reducer(comm, replicas, staging_gpu);
  if (rank == 0) {
    std::printf("data_parallel: %d process(es) x %zu replica(s) on %s; gradients in %.*s via %s\n", size,
                replicas.size(), replicas.front().str().c_str(), static_cast<int>(precision.size()), precision.data(),
                reducer.engine().c_str());
  }

  // The fp32 master weights: rank 0 initialises them, every process receives them, and the
  // manager replicates them onto each of its devices.
  params init{std::vector<float>(encoder_width, 0.f), std::vector<float>(decoder_width, 0.f)};
  if (rank == 0) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (auto& w : std::get<0>(init)) w = u(rng);
    for (auto& w : std::get<1>(init)) w = u(rng);
  }
  dk::broadcast(comm, init, 0);
  auto weights = dm.replicate(init);

  const auto counts = dk::split_counts(rows_per_batch, static_cast<std::size_t>(size));
  batch_storage part{counts[static_cast<std::size_t>(rank)]};
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    // Rank 0 makes the batch; each process receives its rows, and the manager shards them over
    // its devices (shard_batch: rows in balanced, ragged shares).
    batch_storage full = rank == 0 ? make_batch(step) : batch_storage{0};
    batch mine_rows = part.view();
    dk::scatter(comm, full.view(), mine_rows, 0);
    auto shards = dm.distribute(mine_rows);

    // Each replica: its rows' gradients, one tree_transform over every leaf per row.
    std::vector<decltype(dk::tree_cast<Grad>(weights[0]))> grads;
    double loss = 0;
    for (std::size_t i = 0; i < replicas.size(); ++i) {
      const auto& w = weights[i];
      const auto& shard = shards[i];
      auto g = dk::zeros_like(w, replicas[i]);
      auto err = dk::zeros_like(w, replicas[i]);
      const auto& [x_rows, y_rows] = shard;
      for (std::size_t r = 0; r < std::get<0>(x_rows).extent(0); ++r) {
        const auto x = row_of(x_rows, r);
        dk::tree_transform(err, residual{}, w, x, row_of(y_rows, r));
        dk::tree_transform(g, accumulate_gradient{}, g, err, x);
        loss += dk::tree_reduce(err, dk::reduce::sumsq) / 2;
      }
      grads.push_back(dk::tree_cast<Grad>(g));  // fp32 -> the communication precision
    }

    // All-reduce the gradients over every replica, clip by the global norm, update.
    reducer.all_reduce(grads);
    const double mean_norm = dk::tree_global_norm(grads[0]) / rows_per_batch;
    const double clip = std::min(1.0, max_grad_norm / (mean_norm + 1e-6));
    const auto scale = static_cast<float>(-learning_rate * clip / rows_per_batch);
    for (std::size_t i = 0; i < replicas.size(); ++i) dk::tree_axpy(scale, grads[i], weights[i]);

    // The loss is each replica's, added over the processes (a scalar tree).
    dk::all_reduce(comm, loss, dk::reduce_op::sum);
    loss /= rows_per_batch;
    if (step == 0) first_loss = static_cast<float>(loss);
    last_loss = static_cast<float>(loss);
    if (rank == 0 && (step % 15 == 0 || step == steps - 1))
      std::printf("step %2d  loss %.5f  gradient norm %.4f%s\n", step, loss, mean_norm, clip < 1 ? " (clipped)" : "");
  }

  // Every replica of every process must hold the same weights.
  bool same = true;
  const params mine = dk::to_host(weights[0]);
  for (std::size_t i = 1; i < replicas.size(); ++i) {
    const params other = dk::to_host(weights[i]);
    same = same && other == mine;
  }
  const params all = dk::all_gathered(comm, mine);  // each leaf: every process's, rank-major
  for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r) {
    for (std::size_t f = 0; f < encoder_width; ++f)
      same = same && std::get<0>(all)[r * encoder_width + f] == std::get<0>(mine)[f];
    for (std::size_t f = 0; f < decoder_width; ++f)
      same = same && std::get<1>(all)[r * decoder_width + f] == std::get<1>(mine)[f];
  }
  const bool learned = last_loss < 0.1f * first_loss;
  if (rank == 0) {
    std::printf("loss %.5f -> %.5f (%s); weights identical on every replica: %s\n", first_loss, last_loss,
                learned ? "learned" : "NOT learned", same ? "yes" : "NO");
  }

  // Against the host: the first step's loss as a plain loop computes it from the same weights and
  // batch (to float rounding: the devices may add up in another order), and the gains the data
  // was made with, which 60 steps must have found to within the noise's and the gradients'
  // precision.
  int failures = 0;
  const double expected_first_loss = host_loss(init, make_batch(0));
  if (std::abs(first_loss - expected_first_loss) > 1e-4 * expected_first_loss) {
    if (rank == 0)
      std::printf("data_parallel: FAILED: step 0 loss %.7f, expected %.7f\n", first_loss, expected_first_loss);
    ++failures;
  }
  const auto check_gains = [&](const char* layer, const std::vector<float>& gains) {
    for (std::size_t f = 0; f < gains.size(); ++f) {
      const float expected = true_gain(f, gains.size());
      if (std::abs(gains[f] - expected) > gain_tolerance) {
        if (rank == 0)
          std::printf("data_parallel: FAILED: %s gain %zu = %.4f, expected %.4f\n", layer, f, gains[f], expected);
        ++failures;
        return;
      }
    }
  };
  check_gains("encoder", std::get<0>(mine));
  check_gains("decoder", std::get<1>(mine));
  return same && learned && failures == 0 ? 0 : 1;
}

/// Picks the gradients' precision (the generative-model preset's, unless --grads says) and runs.
template <class Comm, class Manager>
int train_with_precision(Comm& comm, Manager& dm, std::string_view requested, const dk::generative_preset& preset,
                         std::optional<dk::device> staging_gpu = std::nullopt) {
  const std::string_view precision = requested.empty() ? preset.compute_dtype : requested;
  if (precision == "bf16") return train<dk::bfloat16_t>(comm, dm, precision, staging_gpu);
  if (precision == "fp16") return train<dk::float16_t>(comm, dm, precision, staging_gpu);
  if (precision == "fp32") return train<float>(comm, dm, precision, staging_gpu);
  throw dk::config_error("--grads takes bf16, fp16 or fp32, not '" + std::string(precision) + "'");
}

template <class Comm>
int run(Comm& comm, std::string_view requested) {
  // The replicas compute where the tree algorithms can run: the GPUs when this file has the
  // kernels, the CPU otherwise.
  using gpu_or_cpu =
      dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced, dk::shard_batch>;
  gpu_or_cpu dm;
  // The precision the hardware suits (bf16 where every GPU has it), whatever computes.
  const dk::generative_preset preset = dk::generative_model_preset(dm);
  if (dm.has_gpu() && (!kernels_here || !DEVICEKIT_HAS_NCCL)) {
    if (comm.rank() == 0) {
      std::printf("data_parallel: %s: the replicas compute on the CPU\n",
                  kernels_here ? "no NCCL to all-reduce GPU memory" : "compiled without the CUDA kernels (g++)");
    }
    dk::device_manager<dk::cpu_detector, dk::balanced, dk::shard_batch> cpu;
    std::optional<dk::device> staging;
    if (DEVICEKIT_HAS_NCCL) staging = comm.size() > 1 ? dk::assign_device(dm.gpu_devices()) : dm.gpu_devices().front();
    return train_with_precision(comm, cpu, requested, preset, staging);
  }
  if (dm.has_gpu() && comm.size() > 1 && dm.devices().size() > 1) {
    throw dk::config_error("each process sees " + std::to_string(dm.devices().size()) +
                           " GPUs; NCCL over MPI takes one GPU per process: give each its own (CUDA_VISIBLE_DEVICES) "
                           "or run one process for all of them");
  }
  return train_with_precision(comm, dm, requested, preset);
}

/// True when an MPI launcher started this process.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string_view requested = requested_precision(argc, argv);
#if DEVICEKIT_HAS_MPI
  if (launched_by_mpi()) {
    dk::mpi_environment env(&argc, &argv);
    dk::mpi_communicator comm;
    return run(comm, requested);
  }
#else
  if (launched_by_mpi()) std::printf("data_parallel: built without MPI; running as one process\n");
#endif
  dk::self_communicator comm;
  return run(comm, requested);
} catch (const std::exception& e) {
  std::fprintf(stderr, "data_parallel: %s\n", e.what());
  return 1;
}
