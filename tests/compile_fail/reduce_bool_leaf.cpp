// Must NOT compile: a bool leaf can be broadcast but not reduced; all_reduce says so at compile
// time.
#include <devicekit/distribute/self.hpp>
#include <devicekit/distribute/tree_collectives.hpp>

#include <tuple>
#include <vector>

int main() {
  devicekit::self_communicator comm;
  std::tuple<std::vector<float>, bool> t{{1.f}, true};
  devicekit::broadcast(comm, t);   // fine
  devicekit::all_reduce(comm, t);  // refused
  return 0;
}
