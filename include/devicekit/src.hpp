#pragma once
/// \file
/// The compiled part of devicekit, for programs built with DEVICEKIT_SEPARATE_COMPILATION:
/// include this header in exactly one translation unit of the program (the CMake target
/// devicekit::compiled does it in src/devicekit.cpp), compiled with the same feature macros and
/// flags as the rest of the program. It defines every non-template function that the headers only
/// declare in that mode (the `.ipp` files beside them); a program that defines the macro and
/// compiles no such unit fails to link, naming the missing devicekit functions.
///
/// It must come first in its translation unit: each header decides when it is first included
/// whether to bring its definitions.
#if defined(DEVICEKIT_VERSION_MAJOR)
#  error \
      "<devicekit/src.hpp> must be the first devicekit header in its translation unit (each header decides when it is first included whether to bring its definitions)"
#endif
#if !defined(DEVICEKIT_SEPARATE_COMPILATION)
#  error \
      "<devicekit/src.hpp> compiles devicekit's functions once for a program built with DEVICEKIT_SEPARATE_COMPILATION; define it here and in every translation unit that includes devicekit (the CMake target devicekit::compiled does both)"
#endif
#define DEVICEKIT_SOURCE 1

#include <devicekit/compute.hpp>
#include <devicekit/devicekit.hpp>
