// devicekit::compiled: the definitions of devicekit's non-template functions, compiled once
// (include/devicekit/src.hpp). The target defines DEVICEKIT_SEPARATE_COMPILATION for this file
// and for every target that links it.
#include <devicekit/src.hpp>
