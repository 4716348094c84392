#pragma once
/// \file
/// The device report and the engines it lists. JSON is not included here: include
/// <devicekit/report/json.hpp> where JSON is written (it needs nlohmann-json, which
/// costs more to compile than the rest of the report).
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/report/engines.hpp>
#include <devicekit/report/report.hpp>
