// Must NOT compile: a fraction outside (0, 1]. CTest checks that the compiler's message is the
// readable one from custom_fraction's static_assert (tests/CMakeLists.txt, compile_fail.*).
#include <devicekit/memory/strategy.hpp>

double f = devicekit::custom_fraction<3, 2>::fraction();
