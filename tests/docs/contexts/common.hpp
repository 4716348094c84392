// What the fragments of the docs use without declaring it: declared here and never defined, since
// the fragments are compiled, not linked. Included after <devicekit/devicekit.hpp> and
// `namespace dk = devicekit;` (tests/docs/extract.py writes that prelude).
#pragma once

using manager =
    dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced, dk::single_device>;
extern manager dm;
extern dk::device dev;
extern dk::device gpu;
extern dk::stream stream;
extern std::vector<dk::device> devices;
extern std::vector<dk::device> gpus;
extern std::size_t n;
extern std::size_t bytes;
extern std::uint64_t weights_bytes;
extern std::vector<std::string> all_texts;
extern int steps;
extern float lr;

// A tree of host data.
using host_tree = std::pair<std::vector<float>, std::vector<double>>;
extern host_tree tree;
extern host_tree params;
extern host_tree grads;
host_tree load_batch(int step);
void train_step(const auto& placed, dk::stream_ref s);
