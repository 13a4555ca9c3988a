/* tests/gpu/emu/include/cudnn.h — the part of cuDNN 9 that runtime/cuda's
 * conv.cu calls (the legacy convolution API of libcudnn_cnn and the handle and
 * descriptors of libcudnn_graph / libcudnn_ops), for the emulated build:
 * cuDNN's names, values and signatures; the behaviour in
 * tests/gpu/emu/cudnn_emu.cc (convolutions by direct loops over their
 * definition, on the handle's stream). */
#ifndef PG_EMU_CUDNN_H
#define PG_EMU_CUDNN_H

#include <stddef.h>

#include "cuda_runtime.h"

/* the toolkit's cuDNN (cudnn_version.h), whose API this emulates */
#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

typedef enum {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_INITIALIZED = 1001,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
    CUDNN_STATUS_INTERNAL_ERROR = 4000,
    CUDNN_STATUS_EXECUTION_FAILED = 5000
} cudnnStatus_t;

typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum {
    CUDNN_DEFAULT_MATH = 0,
    CUDNN_TENSOR_OP_MATH = 1,
    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
    CUDNN_FMA_MATH = 3
} cudnnMathType_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;

typedef enum {
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1,
    CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2,
    CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3,
    CUDNN_CONVOLUTION_FWD_ALGO_FFT = 4,
    CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING = 5,
    CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD = 6,
    CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7,
    CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
} cudnnConvolutionFwdAlgo_t;
typedef enum {
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0, /* non-deterministic */
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT = 2,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3, /* non-deterministic */
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD = 4,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED = 5,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING = 6,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;
typedef enum {
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0, /* non-deterministic */
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT = 2,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING = 3,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD = 4,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED = 5,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
} cudnnConvolutionBwdDataAlgo_t;

struct cudnnContext;
typedef struct cudnnContext *cudnnHandle_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;

/* the heuristics' records (cudnnGetConvolution*Algorithm_v7) */
typedef struct cudnnConvolutionFwdAlgoPerfStruct {
    cudnnConvolutionFwdAlgo_t algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
    int reserved[3];
} cudnnConvolutionFwdAlgoPerf_t;
typedef struct cudnnConvolutionBwdDataAlgoPerfStruct {
    cudnnConvolutionBwdDataAlgo_t algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
    int reserved[3];
} cudnnConvolutionBwdDataAlgoPerf_t;
typedef struct cudnnConvolutionBwdFilterAlgoPerfStruct {
    cudnnConvolutionBwdFilterAlgo_t algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
    int reserved[3];
} cudnnConvolutionBwdFilterAlgoPerf_t;

size_t cudnnGetVersion(void);
const char *cudnnGetErrorString(cudnnStatus_t status);
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u,
                                              int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType);
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h,
                                                    int *w);

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int *returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
                                                          const cudnnFilterDescriptor_t filterDesc,
                                                          const cudnnTensorDescriptor_t diffDesc,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t gradDesc,
                                                          const int requestedAlgoCount, int *returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
                                                            const cudnnTensorDescriptor_t srcDesc,
                                                            const cudnnTensorDescriptor_t diffDesc,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t gradDesc,
                                                            const int requestedAlgoCount, int *returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes);
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle,
                                                             const cudnnTensorDescriptor_t xDesc,
                                                             const cudnnTensorDescriptor_t dyDesc,
                                                             const cudnnConvolutionDescriptor_t convDesc,
                                                             const cudnnFilterDescriptor_t gradDesc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                                             size_t *sizeInBytes);

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void *w,
                                           const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                           size_t workSpaceSizeInBytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxDesc, void *dx);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void *x,
                                             const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
                                             size_t workSpaceSizeInBytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwDesc, void *dw);

#endif
