// Compiled against a CUDA 12.4 runtime header (tests/compile_fail/old_cuda): devicekit must stop
// with a message that names the minimum toolkit, not fail later inside a header.
#include <devicekit/core/config.hpp>
