#pragma once
// A small harness for tests that run on every rank of an MPI job. Catch2 is not used: a failed
// REQUIRE on one rank would skip collectives the other ranks still enter, and hang them. Here a
// failed check is only recorded; every rank runs every test body to the end, a barrier separates
// the tests, and main() sums the failures over the ranks.
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <mpi.h>

namespace mpitest {

struct registry {
  struct test {
    std::string name;
    std::function<void()> body;
  };
  std::vector<test> tests;
  std::string current;
  int failures = 0;
  int checks = 0;
  int rank = 0;
};

inline registry& get() {
  static registry r;
  return r;
}

inline void fail(const char* file, int line, const std::string& what) {
  auto& r = get();
  ++r.failures;
  std::fprintf(stderr, "FAILED [rank %d] %s: %s:%d: %s\n", r.rank, r.current.c_str(), file, line, what.c_str());
}

struct add {
  add(const char* name, std::function<void()> body) { get().tests.push_back({name, std::move(body)}); }
};

/// Runs every test on every rank; returns the number of failed checks summed over the ranks.
inline int run_all(MPI_Comm world) {
  auto& r = get();
  MPI_Comm_rank(world, &r.rank);
  int total_checks = 0;
  for (const auto& t : r.tests) {
    r.current = t.name;
    const int before = r.failures;
    try {
      t.body();
    } catch (const std::exception& e) {
      fail(__FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
    }
    MPI_Barrier(world);
    int mine = r.failures - before, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, world);
    if (r.rank == 0) std::printf("%-72s %s\n", t.name.c_str(), all == 0 ? "passed" : "FAILED");
  }
  MPI_Allreduce(&r.checks, &total_checks, 1, MPI_INT, MPI_SUM, world);
  int failures = 0;
  MPI_Allreduce(&r.failures, &failures, 1, MPI_INT, MPI_SUM, world);
  if (r.rank == 0) {
    std::printf("%zu tests, %d checks over all ranks, %d failed\n", r.tests.size(), total_checks, failures);
  }
  return failures;
}

}  // namespace mpitest

#define MPITEST_CAT2(a, b) a##b
#define MPITEST_CAT(a, b) MPITEST_CAT2(a, b)
#define MPI_TEST(name)                                                                                          \
  static void MPITEST_CAT(mpitest_body_, __LINE__)();                                                           \
  static const ::mpitest::add MPITEST_CAT(mpitest_add_, __LINE__)(name, &MPITEST_CAT(mpitest_body_, __LINE__)); \
  static void MPITEST_CAT(mpitest_body_, __LINE__)()

#define CHECK(cond)                                                       \
  do {                                                                    \
    ++::mpitest::get().checks;                                            \
    if (!(cond)) ::mpitest::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

#define CHECK_EQ(a, b)                                                                \
  do {                                                                                \
    ++::mpitest::get().checks;                                                        \
    const auto& mpitest_a = (a);                                                      \
    const auto& mpitest_b = (b);                                                      \
    if (!(mpitest_a == mpitest_b)) {                                                  \
      std::ostringstream mpitest_os;                                                  \
      mpitest_os << "CHECK_EQ(" #a ", " #b "): " << mpitest_a << " != " << mpitest_b; \
      ::mpitest::fail(__FILE__, __LINE__, mpitest_os.str());                          \
    }                                                                                 \
  } while (0)

/// Checks that `expr` throws `type` and that its message contains `text`.
#define CHECK_THROWS_WITH(expr, type, text)                                                                      \
  do {                                                                                                           \
    ++::mpitest::get().checks;                                                                                   \
    bool mpitest_thrown = false;                                                                                 \
    try {                                                                                                        \
      expr;                                                                                                      \
    } catch (const type& mpitest_e) {                                                                            \
      mpitest_thrown = true;                                                                                     \
      if (std::string(mpitest_e.what()).find(text) == std::string::npos) {                                       \
        ::mpitest::fail(__FILE__, __LINE__, std::string("message lacks '") + (text) + "': " + mpitest_e.what()); \
      }                                                                                                          \
    }                                                                                                            \
    if (!mpitest_thrown) ::mpitest::fail(__FILE__, __LINE__, "expected " #type " from " #expr);                  \
  } while (0)
