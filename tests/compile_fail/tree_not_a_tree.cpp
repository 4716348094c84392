// Must NOT compile: opaque_widget is neither a leaf nor a node. The check (tests/CMakeLists.txt)
// requires the compiler's output to name it through devicekit::neither_leaf_nor_node<...>.
#include <devicekit/tree/tree.hpp>

#include <tuple>
#include <vector>

struct opaque_widget {
  int handle;
};

int main() {
  const std::tuple<std::vector<float>, opaque_widget> t{{1.f}, {2}};
  return static_cast<int>(devicekit::leaf_count(t));
}
