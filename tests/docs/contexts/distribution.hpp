// docs/distribution.md: the batch its fragments distribute (see common.hpp).
#pragma once
#include "common.hpp"

extern host_tree batch;
