// A stand-in for the runtime header of CUDA 12.4, for compile_fail.cuda_older_than_12_8.
#pragma once
#define CUDART_VERSION 12040
