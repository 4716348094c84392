// data_parallel: replicate the weights, shard the batch, compute, all-reduce the gradients.
//
// A linear model y = w.x + b learns from synthetic batches. Every replica holds the same
// weights (broadcast from rank 0), gets its own rows of each batch (scatter, uneven when the
// batch does not divide), computes gradient sums on its rows, and the sums are all-reduced so
// every replica takes the same step. At the end the replicas compare their weights (all_gather)
// and the program fails if they differ or the loss did not fall.
//
// It runs on what it finds:
//   mpirun -np 2 build/examples/data_parallel   CPU processes over MPI (gradients: MPI all-reduce)
//   build/examples/data_parallel                one process: the self communicator (no MPI)
//   with GPUs                                   gradients go through NCCL: one rank per process
//                                               (device = visible[local_rank % n], NCCL id sent
//                                               through MPI), or, in one process, one rank per GPU
//                                               (ncclCommInitAll) with the batch sharded over them
//                                               by the manager's shard_batch plan.
#include <devicekit/devicekit.hpp>

#include <boost/hana/define_struct.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dk = devicekit;

namespace {

constexpr std::size_t features = 8;
constexpr std::size_t rows_per_batch = 30;  // 30 rows over 4 processes: 8, 8, 7, 7
constexpr int steps = 60;
constexpr float learning_rate = 0.1f;

struct model {
  BOOST_HANA_DEFINE_STRUCT(model, (std::vector<float>, w), (float, b));
};
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (std::vector<float>, x), (std::vector<float>, y));  // x: rows x features
};
/// Gradient sums over a replica's rows, and its loss sum (a tree, all-reduced in one call).
struct gradients {
  BOOST_HANA_DEFINE_STRUCT(gradients, (std::vector<float>, dw), (float, db), (float, loss));
};

/// The batch of step `step`, made on rank 0 only: y = w_true . x + b_true.
batch make_batch(int step) {
  std::mt19937 rng(1234u + static_cast<unsigned>(step));
  std::normal_distribution<float> n(0.f, 1.f);
  batch out;
  out.x.resize(rows_per_batch * features);
  out.y.resize(rows_per_batch);
  for (std::size_t r = 0; r < rows_per_batch; ++r) {
    float y = 0.5f;  // b_true
    for (std::size_t f = 0; f < features; ++f) {
      const float x = n(rng);
      out.x[r * features + f] = x;
      y += x * (static_cast<float>(f) * 0.25f - 1.0f);  // w_true
    }
    out.y[r] = y;
  }
  return out;
}

/// Gradient sums of the squared error over rows [begin, begin + count) of `b`.
gradients compute(const model& m, const batch& b, std::size_t begin, std::size_t count) {
  gradients g{std::vector<float>(features, 0.f), 0.f, 0.f};
  for (std::size_t r = begin; r < begin + count; ++r) {
    float pred = m.b;
    for (std::size_t f = 0; f < features; ++f) pred += m.w[f] * b.x[r * features + f];
    const float err = pred - b.y[r];
    for (std::size_t f = 0; f < features; ++f) g.dw[f] += err * b.x[r * features + f];
    g.db += err;
    g.loss += err * err;
  }
  return g;
}

/// Sums the replicas' gradients. `host` is the process communicator (MPI or self); with NCCL the
/// sums go through the GPUs instead, as they would if the gradients had been computed there.
template <class HostComm>
class gradient_reducer {
 public:
  gradient_reducer(HostComm& host, std::vector<dk::device> gpus_here) : host_(host), gpus_(std::move(gpus_here)) {
#if DEVICEKIT_HAS_NCCL
    if (gpus_.empty()) return;
    if (host_.size() > 1) {
#  if DEVICEKIT_HAS_MPI
      if constexpr (std::is_same_v<HostComm, dk::mpi_communicator>) {
        try {
          nccl_.emplace(dk::nccl_communicator::from_mpi(host_, gpus_.front()));
        } catch (const dk::config_error& e) {
          // More processes than GPUs on a node (every rank sees this alike): reduce over MPI.
          if (host_.rank() == 0) std::printf("data_parallel: not using NCCL: %s\n", e.what());
          gpus_.clear();
        }
      }
#  endif
    } else {
      nccl_.emplace(dk::nccl_communicator::init_all(gpus_));
    }
#endif
  }

  [[nodiscard]] std::string engine() const {
#if DEVICEKIT_HAS_NCCL
    if (nccl_) return "NCCL over " + std::to_string(gpus_.size()) + " GPU(s) in this process";
#endif
    return host_.size() > 1 ? "MPI" : "the self communicator";
  }

  /// One gradient tree per local replica in, their sum over every replica everywhere out.
  gradients reduce(std::vector<gradients> local) {
#if DEVICEKIT_HAS_NCCL
    if (nccl_) return reduce_on_gpus(local);
#endif
    for (std::size_t i = 1; i < local.size(); ++i) add(local[0], local[i]);
    dk::all_reduce(host_, local[0], dk::reduce_op::sum);
    return local[0];
  }

 private:
  static void add(gradients& a, const gradients& b) {
    for (std::size_t f = 0; f < features; ++f) a.dw[f] += b.dw[f];
    a.db += b.db;
    a.loss += b.loss;
  }

#if DEVICEKIT_HAS_NCCL
  /// Copies each replica's gradients to its GPU (as one flat buffer), all-reduces there, and
  /// copies replica 0's result back. A real program computes them on the GPU to begin with.
  gradients reduce_on_gpus(const std::vector<gradients>& local) {
    const std::size_t n = features + 2;
    std::vector<std::unique_ptr<float, std::function<void(float*)>>> bufs;
    std::vector<std::vector<dk::leaf_span>> leaves;
    for (std::size_t i = 0; i < gpus_.size(); ++i) {
      dk::scoped_device on(gpus_[i].ordinal());
      // From the process's pool of the GPU (what placement uses too): inside its budget and stats.
      dk::device_memory& pool = dk::default_memory(gpus_[i]);
      auto* p = static_cast<float*>(pool.allocate(n * sizeof(float)));
      bufs.emplace_back(p, [&pool, n](float* q) { pool.deallocate(q, n * sizeof(float)); });
      std::vector<float> flat(local[i].dw);
      flat.push_back(local[i].db);
      flat.push_back(local[i].loss);
      DEVICEKIT_CUDA_CHECK(cudaMemcpy(p, flat.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      leaves.push_back({dk::leaf_span{p, n, dk::element_type::float32}});
    }
    if (leaves.size() == 1) {
      nccl_->all_reduce(std::span<const dk::leaf_span>(leaves[0]));
    } else {
      nccl_->all_reduce(std::span<const std::vector<dk::leaf_span>>(leaves));
    }
    std::vector<float> flat(n);
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(flat.data(), bufs[0].get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    return {std::vector<float>(flat.begin(), flat.begin() + static_cast<std::ptrdiff_t>(features)), flat[features],
            flat[features + 1]};
  }
  std::optional<dk::nccl_communicator> nccl_;
#endif
  HostComm& host_;
  std::vector<dk::device> gpus_;
};

template <class Comm>
int train(Comm& comm) {
  const int rank = comm.rank(), size = comm.size();
  // The manager shards the process's rows over its own devices (several GPUs in one process).
  dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced, dk::shard_batch> dm;
  std::vector<dk::device> gpus_here;
  if (dm.has_gpu()) {
    if (size > 1) {
      gpus_here = {dk::assign_device(dm.gpu_devices())};  // one GPU per process
    } else {
      gpus_here = dm.gpu_devices();  // every GPU, one replica each
    }
  }
#if !DEVICEKIT_HAS_NCCL
  gpus_here.clear();  // no NCCL: the gradients stay on the host
#endif
  gradient_reducer<Comm> reducer(comm, gpus_here);
  if (rank == 0) {
    std::printf("data_parallel: %d process(es), %zu replica(s) in each; gradients via %s\n", size,
                std::max<std::size_t>(1, gpus_here.size()), reducer.engine().c_str());
    if (gpus_here.size() > 1)
      std::printf("device assignment: %s\n", dm.plan({rows_per_batch, 2, 0}).assignment().str().c_str());
  }

  // Replicate the weights: rank 0 initialises, everyone receives the same.
  model m{std::vector<float>(features, 0.f), 0.f};
  if (rank == 0) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (auto& w : m.w) w = u(rng);
  }
  dk::broadcast(comm, m, 0);

  const auto counts = dk::split_counts(rows_per_batch, static_cast<std::size_t>(size));
  const std::size_t mine = counts[static_cast<std::size_t>(rank)];
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    // Shard the batch: rank 0 makes it, every rank receives its rows (uneven when they do not divide).
    const batch full = rank == 0 ? make_batch(step) : batch{};
    batch part{std::vector<float>(mine * features), std::vector<float>(mine)};
    dk::scatter(comm, full, part, 0);

    // Compute: one gradient tree per local replica, over its rows of this process's part.
    std::vector<gradients> local;
    if (gpus_here.size() > 1) {
      for (const auto& share : dm.plan({mine, 2, 0}).shares)
        local.push_back(compute(m, part, share.begin, share.count));
    } else {
      local.push_back(compute(m, part, 0, mine));
    }

    // All-reduce the gradients, then every replica takes the same step.
    const gradients g = reducer.reduce(std::move(local));
    const float scale = learning_rate / static_cast<float>(rows_per_batch);
    for (std::size_t f = 0; f < features; ++f) m.w[f] -= scale * g.dw[f];
    m.b -= scale * g.db;
    const float loss = g.loss / static_cast<float>(rows_per_batch);
    if (step == 0) first_loss = loss;
    last_loss = loss;
    if (rank == 0 && (step % 15 == 0 || step == steps - 1)) std::printf("step %2d  loss %.5f\n", step, loss);
  }

  // Every replica must hold the same weights.
  const auto all = dk::all_gathered(comm, m);
  bool same = true;
  const auto& w_all = all.template get<"w">();
  const auto& b_all = all.template get<"b">();
  for (int r = 0; r < size; ++r) {
    for (std::size_t f = 0; f < features; ++f)
      same = same && w_all[static_cast<std::size_t>(r) * features + f] == m.w[f];
    same = same && b_all[static_cast<std::size_t>(r)] == m.b;
  }
  const bool learned = last_loss < 0.1f * first_loss;
  if (rank == 0) {
    std::printf("loss %.5f -> %.5f (%s); weights identical on all %d process(es): %s\n", first_loss, last_loss,
                learned ? "learned" : "NOT learned", size, same ? "yes" : "NO");
  }
  return same && learned ? 0 : 1;
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
#if DEVICEKIT_HAS_MPI
  if (launched_by_mpi()) {
    dk::mpi_environment env(&argc, &argv);
    dk::mpi_communicator comm;
    return train(comm);
  }
#else
  if (launched_by_mpi()) std::printf("data_parallel: built without MPI; running as one process\n");
#endif
  (void)argc;
  (void)argv;
  dk::self_communicator comm;
  return train(comm);
} catch (const std::exception& e) {
  std::fprintf(stderr, "data_parallel: %s\n", e.what());
  return 1;
}
