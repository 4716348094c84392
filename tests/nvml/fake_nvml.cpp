// A stand-in for libnvidia-ml.so.1 with the functions nvml_detector calls, configured through
// the environment (read at nvmlInit_v2), so that the detector's paths run on machines without
// an NVIDIA driver. Like NVML, every query fails with NVML_ERROR_UNINITIALIZED outside an
// nvmlInit_v2 / nvmlShutdown pair. Signatures follow the NVML API Reference.
//
//   DEVICEKIT_FAKE_NVML_GPUS=N           GPUs listed (default 0)
//   DEVICEKIT_FAKE_NVML_INIT_ERROR=code  nvmlInit_v2 returns this nvmlReturn_t
//   DEVICEKIT_FAKE_NVML_NAMES="a;b"      names per GPU (default "NVIDIA H100 80GB HBM3")
//   DEVICEKIT_FAKE_NVML_UUIDS="u0;u1"    UUIDs per GPU (default GPU-fa4e0000-0000-0000-0000-00000000000<i>)
//   DEVICEKIT_FAKE_NVML_MEMORY_MIB=M     total memory of every GPU (default 81559)
//   DEVICEKIT_FAKE_NVML_CC=9.0           compute capability of every GPU
//   DEVICEKIT_FAKE_NVML_LOST=i           nvmlDeviceGetHandleByIndex_v2(i) fails (NVML_ERROR_GPU_IS_LOST)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int nvml_success = 0;
constexpr int nvml_error_uninitialized = 1;
constexpr int nvml_error_invalid_argument = 2;
constexpr int nvml_error_insufficient_size = 7;
constexpr int nvml_error_gpu_is_lost = 15;

struct gpu {
  std::string name;
  std::string uuid;
  unsigned long long memory_bytes = 0;
  int cc_major = 9;
  int cc_minor = 0;
  bool lost = false;
};

struct state {
  int live_inits = 0;  // nvmlInit_v2 minus nvmlShutdown, as NVML reference-counts them
  int total_inits = 0;
  std::vector<gpu> gpus;
};

state& fake() {
  static state s;
  return s;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string(fallback);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (!text.empty() && pos <= text.size()) {
    const std::size_t semi = text.find(';', pos);
    out.push_back(text.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos));
    if (semi == std::string::npos) break;
    pos = semi + 1;
  }
  return out;
}

int copy_text(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return nvml_error_invalid_argument;
  if (text.size() + 1 > length) return nvml_error_insufficient_size;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return nvml_success;
}

struct nvml_device {
  int index;
};
nvml_device handles[64];

const gpu* lookup(const nvml_device* d) {
  if (fake().live_inits == 0 || d == nullptr) return nullptr;
  const auto i = static_cast<std::size_t>(d->index);
  return i < fake().gpus.size() ? &fake().gpus[i] : nullptr;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() {
  const int error = std::atoi(env_or("DEVICEKIT_FAKE_NVML_INIT_ERROR", "0").c_str());
  if (error != 0) return error;
  auto& s = fake();
  ++s.total_inits;
  if (s.live_inits++ > 0) return nvml_success;
  s.gpus.clear();
  const int n = std::atoi(env_or("DEVICEKIT_FAKE_NVML_GPUS", "0").c_str());
  const auto names = split(env_or("DEVICEKIT_FAKE_NVML_NAMES", ""));
  const auto uuids = split(env_or("DEVICEKIT_FAKE_NVML_UUIDS", ""));
  const unsigned long long mib = std::strtoull(env_or("DEVICEKIT_FAKE_NVML_MEMORY_MIB", "81559").c_str(), nullptr, 10);
  const std::string cc = env_or("DEVICEKIT_FAKE_NVML_CC", "9.0");
  const int lost = std::atoi(env_or("DEVICEKIT_FAKE_NVML_LOST", "-1").c_str());
  for (int i = 0; i < n && i < 64; ++i) {
    gpu g;
    const auto k = static_cast<std::size_t>(i);
    g.name = k < names.size() ? names[k] : "NVIDIA H100 80GB HBM3";
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-0000-0000-%012d", i);
    g.uuid = k < uuids.size() ? uuids[k] : uuid;
    g.memory_bytes = mib << 20;
    std::sscanf(cc.c_str(), "%d.%d", &g.cc_major, &g.cc_minor);
    g.lost = i == lost;
    s.gpus.push_back(g);
    handles[i].index = i;
  }
  return nvml_success;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
  if (fake().live_inits == 0) return nvml_error_uninitialized;
  --fake().live_inits;
  return nvml_success;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int result) {
  switch (result) {
    case nvml_success: return "Success";
    case nvml_error_uninitialized: return "Uninitialized";
    case 9: return "Driver Not Loaded";
    case nvml_error_gpu_is_lost: return "GPU is lost";
    default: return "Unknown Error";
  }
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (fake().live_inits == 0) return nvml_error_uninitialized;
  if (count == nullptr) return nvml_error_invalid_argument;
  *count = static_cast<unsigned int>(fake().gpus.size());
  return nvml_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvml_device** out) {
  if (fake().live_inits == 0) return nvml_error_uninitialized;
  if (out == nullptr || index >= fake().gpus.size()) return nvml_error_invalid_argument;
  if (fake().gpus[index].lost) return nvml_error_gpu_is_lost;
  *out = &handles[index];
  return nvml_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetName(nvml_device* d, char* name, unsigned int length) {
  const gpu* g = lookup(d);
  return g == nullptr ? nvml_error_uninitialized : copy_text(g->name, name, length);
}

__attribute__((visibility("default"))) int nvmlDeviceGetUUID(nvml_device* d, char* uuid, unsigned int length) {
  const gpu* g = lookup(d);
  return g == nullptr ? nvml_error_uninitialized : copy_text(g->uuid, uuid, length);
}

struct nvml_memory {
  unsigned long long total, free, used;
};
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(nvml_device* d, nvml_memory* m) {
  const gpu* g = lookup(d);
  if (g == nullptr) return nvml_error_uninitialized;
  if (m == nullptr) return nvml_error_invalid_argument;
  *m = {g->memory_bytes, g->memory_bytes - (512ull << 20), 512ull << 20};
  return nvml_success;
}

__attribute__((visibility("default"))) int nvmlDeviceGetCudaComputeCapability(nvml_device* d, int* major, int* minor) {
  const gpu* g = lookup(d);
  if (g == nullptr) return nvml_error_uninitialized;
  *major = g->cc_major;
  *minor = g->cc_minor;
  return nvml_success;
}

struct nvml_pci_info {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_sub_system_id;
  char bus_id[32];
};
__attribute__((visibility("default"))) int nvmlDeviceGetPciInfo_v3(nvml_device* d, nvml_pci_info* pci) {
  const gpu* g = lookup(d);
  if (g == nullptr) return nvml_error_uninitialized;
  std::memset(pci, 0, sizeof *pci);
  pci->bus = static_cast<unsigned int>(0x19 + d->index);
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02X:00.0", pci->bus);
  return nvml_success;
}

__attribute__((visibility("default"))) int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (fake().live_inits == 0) return nvml_error_uninitialized;
  *version = std::atoi(env_or("DEVICEKIT_FAKE_NVML_CUDA_DRIVER", "13000").c_str());
  return nvml_success;
}

/// For the tests: nvmlInit_v2 calls not yet matched by nvmlShutdown.
__attribute__((visibility("default"))) int devicekit_fake_nvml_live_inits() { return fake().live_inits; }

}  // extern "C"
