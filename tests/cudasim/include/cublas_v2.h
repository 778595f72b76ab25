/* cublas_v2.h — the CUDA simulator's cuBLAS header (tests/cudasim); see cublas_api.h. */
#ifndef CUDASIM_CUBLAS_V2_H
#define CUDASIM_CUBLAS_V2_H
#include "cublas_api.h"
#endif
