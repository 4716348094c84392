// place/prefetch.hpp on the CPU: trees delivered in order, at most depth ahead
// of a slow consumer, the source's exceptions after the trees before them, and
// an early exit that stops and joins the thread. The cases every backend runs
// are in tests/common/place_cases.hpp.
#include <catch2/catch.hpp>

#include <devicekit/place/prefetch.hpp>
#include <devicekit/tree/hana.hpp>

#include "place_test_support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <iterator>
#include <ranges>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dk = devicekit;

// The batches are shaped arrays, which need an mdspan (test_place.cpp says how
// its absence is reported).
#if DEVICEKIT_HAS_MDSPAN
using namespace place_test;

// --- prefetch
// -----------------------------------------------------------------------------------

namespace {
/// An input range of host trees that counts how far it has been pulled and can
/// throw.
class counting_source : public std::ranges::view_interface<counting_source> {
 public:
  struct shared {
    std::atomic<int> pulled{0};
    int count = 0;
    int throw_at = -1;
  };
  class iterator {
   public:
    using value_type = std::vector<int>;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(shared* s) : s_(s) {}
    value_type operator*() const {
      if (i_ == s_->throw_at) throw std::runtime_error("source failed at " + std::to_string(i_));
      s_->pulled = i_ + 1;
      return std::vector<int>(16, i_);
    }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    void operator++(int) { ++i_; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) { return it.i_ >= it.s_->count; }

   private:
    shared* s_ = nullptr;
    int i_ = 0;
  };
  explicit counting_source(shared* s) : s_(s) {}
  iterator begin() const { return iterator(s_); }
  std::default_sentinel_t end() const { return {}; }

 private:
  shared* s_;
};
}  // namespace

TEST_CASE("prefetch delivers the source's trees in order, placed", "[prefetch]") {
  std::vector<batch> batches;
  for (int i = 0; i < 6; ++i) batches.push_back(make_batch(2, i + 1));
  auto view = dk::prefetch(batches, dk::device::cpu(), 3);
  STATIC_REQUIRE(std::ranges::input_range<decltype(view)>);
  STATIC_REQUIRE(std::ranges::view<decltype(view)>);
  int k = 0;
  for (auto& placed : view) {
    CHECK(placed.get<"labels">().data()[0] == batches[static_cast<std::size_t>(k)].labels[0]);
    CHECK(placed.get<"labels">().data() != batches[static_cast<std::size_t>(k)].labels.data());
    ++k;
  }
  CHECK(k == 6);

  std::vector<std::vector<int>> none;
  int n = 0;
  for (auto& x : dk::prefetch(none, dk::device::cpu())) {
    (void)x;
    ++n;
  }
  CHECK(n == 0);
  CHECK_THROWS_AS(dk::prefetch(none, dk::device::cpu(), 0), dk::config_error);
  auto once = dk::prefetch(none, dk::device::cpu());
  (void)once.begin();
  CHECK_THROWS_AS(once.begin(), dk::config_error);
}

TEST_CASE("prefetch keeps at most depth trees ahead of a slow consumer", "[prefetch]") {
  for (const int depth : {1, 2, 4}) {
    counting_source::shared s;
    s.count = 12;
    int consumed = 0;
    int worst_ahead = 0;
    for (auto& tree : dk::prefetch(counting_source(&s), dk::device::cpu(), static_cast<std::size_t>(depth))) {
      ++consumed;
      CHECK(tree.data()[0] == consumed - 1);
      // Give the producer every chance to run ahead.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      worst_ahead = std::max(worst_ahead, s.pulled.load() - consumed);
    }
    CHECK(consumed == 12);
    CHECK(worst_ahead <= depth);
    CHECK(worst_ahead == std::min(depth, 12 - 1));  // it does run ahead, as far as allowed
  }
}

TEST_CASE(
    "an exception from the source reaches the consumer after the trees "
    "before it",
    "[prefetch]") {
  counting_source::shared s;
  s.count = 10;
  s.throw_at = 3;
  std::vector<int> seen;
  auto consume = [&] {
    for (auto& tree : dk::prefetch(counting_source(&s), dk::device::cpu(), 2)) seen.push_back(tree.data()[0]);
  };
  CHECK_THROWS_WITH(consume(), "source failed at 3");
  CHECK(seen == std::vector<int>{0, 1, 2});
}

TEST_CASE("leaving a prefetch loop early stops the thread and joins it", "[prefetch]") {
  counting_source::shared s;
  s.count = 1000000;
  {
    int taken = 0;
    for (auto& tree : dk::prefetch(counting_source(&s), dk::device::cpu(), 2)) {
      (void)tree;
      if (++taken == 3) break;
    }
  }
  // The view is gone and its thread joined: the source is not pulled any more.
  const int after = s.pulled.load();
  CHECK(after <= 3 + 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(s.pulled.load() == after);

  // An exception in the loop body leaves the same way.
  auto body_throws = [&] {
    for (auto& tree : dk::prefetch(counting_source(&s), dk::device::cpu(), 2)) {
      if (tree.data()[0] == 1) throw std::logic_error("consumer failed");
    }
  };
  CHECK_THROWS_AS(body_throws(), std::logic_error);
}

#endif  // DEVICEKIT_HAS_MDSPAN
