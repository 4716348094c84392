// How the headers of cases in tests/common are compiled per backend (as Kokkos's unit tests are:
// a header of cases that each backend's test file includes after naming its execution space).
// The including file defines, before the include:
//   DEVICEKIT_CASES_BACKEND   a string literal, "cpu", "sim" or "gpu": the cases' name prefix and tag
//   DEVICEKIT_CASES_DEVICE()  the device the cases run on (cpu:0, a simulated GPU, cuda:0)
// Include each header of cases once per executable: the case names carry the backend, not the file.
#pragma once

#if !defined(DEVICEKIT_CASES_BACKEND) || !defined(DEVICEKIT_CASES_DEVICE)
#  error "define DEVICEKIT_CASES_BACKEND and DEVICEKIT_CASES_DEVICE() before including a header of cases"
#endif

/// "<backend>: <rule>", the name of a case compiled per backend.
#define DEVICEKIT_CASE_NAME(rule) DEVICEKIT_CASES_BACKEND ": " rule
/// The tags of a case compiled per backend: its own and the backend's.
#define DEVICEKIT_CASE_TAGS(tags) tags "[" DEVICEKIT_CASES_BACKEND "]"
