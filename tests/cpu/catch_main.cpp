// The Catch2 runner of the host tests (compiled once; the test files only include catch.hpp).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
