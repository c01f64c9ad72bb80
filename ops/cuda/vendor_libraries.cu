// cuBLASLt and cuDNN, opened on first use (Note [vendor libraries] in ember/cuda/vendor_library.h):
// each function ops/cuda calls, with its header's signature, forwarded to the library. A call
// of theirs added to ops/cuda without a line here fails to link (ember_ops links neither).
// The lines were written from the headers (cublasLt.h, cudnn_*.h) and are checked against them
// by the compiler.
#include <cublasLt.h>
#include <cudnn.h>

#include <string>

#include "vendor_libraries.h"

namespace ember::ops::cuda {

using ::ember::cuda::VendorLibrary;

VendorLibrary& cublaslt_library() {
  static VendorLibrary library(VendorLibrary::EmbersOwn{}, "cuBLASLt",
                               "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR), EMBER_CUBLASLT_DIR);
  return library;
}

VendorLibrary& cudnn_library() {
  static VendorLibrary library(VendorLibrary::EmbersOwn{}, "cuDNN",
                               "libcudnn.so." + std::to_string(CUDNN_MAJOR), EMBER_CUDNN_DIR);
  return library;
}

}  // namespace ember::ops::cuda

#define EMBER_CUBLASLT(name, params, args) \
  EMBER_VENDOR_FORWARD(::ember::ops::cuda::cublaslt_library, name, params, args)
#define EMBER_CUDNN(name, params, args) \
  EMBER_VENDOR_FORWARD(::ember::ops::cuda::cudnn_library, name, params, args)

// clang-format off
EMBER_CUBLASLT(cublasLtCreate, (cublasLtHandle_t* lightHandle), (lightHandle))
EMBER_CUBLASLT(cublasLtMatmul, (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream), (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspaceSizeInBytes, stream))
EMBER_CUBLASLT(cublasLtMatmulAlgoGetHeuristic, (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference, int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount), (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount, heuristicResultsArray, returnAlgoCount))
EMBER_CUBLASLT(cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType), (matmulDesc, computeType, scaleType))
EMBER_CUBLASLT(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))
EMBER_CUBLASLT(cublasLtMatmulDescSetAttribute, (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t sizeInBytes), (matmulDesc, attr, buf, sizeInBytes))
EMBER_CUBLASLT(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t* pref), (pref))
EMBER_CUBLASLT(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
EMBER_CUBLASLT(cublasLtMatmulPreferenceSetAttribute, (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t sizeInBytes), (pref, attr, buf, sizeInBytes))
EMBER_CUBLASLT(cublasLtMatrixLayoutCreate, (cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld), (matLayout, type, rows, cols, ld))
EMBER_CUBLASLT(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout))
EMBER_CUBLASLT(cublasLtMatrixLayoutSetAttribute, (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t sizeInBytes), (matLayout, attr, buf, sizeInBytes))
EMBER_CUBLASLT(cublasLtGetStatusString, (cublasStatus_t status), (status))

EMBER_CUDNN(cudnnConvolutionBackwardData, (cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx), (handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dxDesc, dx))
EMBER_CUDNN(cudnnConvolutionBackwardFilter, (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnFilterDescriptor_t dwDesc, void *dw), (handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dwDesc, dw))
EMBER_CUDNN(cudnnConvolutionForward, (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t yDesc, void *y), (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, yDesc, y))
EMBER_CUDNN(cudnnCreate, (cudnnHandle_t *handle), (handle))
EMBER_CUDNN(cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t *convDesc), (convDesc))
EMBER_CUDNN(cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t *filterDesc), (filterDesc))
EMBER_CUDNN(cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t *tensorDesc), (tensorDesc))
EMBER_CUDNN(cudnnDestroy, (cudnnHandle_t handle), (handle))
EMBER_CUDNN(cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t convDesc), (convDesc))
EMBER_CUDNN(cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t filterDesc), (filterDesc))
EMBER_CUDNN(cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t tensorDesc), (tensorDesc))
EMBER_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx, (cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes), (handle, wDesc, w, dyDesc, dy, convDesc, dxDesc, dx, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes))
EMBER_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *y, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes), (handle, xDesc, x, dyDesc, y, convDesc, dwDesc, dw, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes))
EMBER_CUDNN(cudnnFindConvolutionForwardAlgorithmEx, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes), (handle, xDesc, x, wDesc, w, convDesc, yDesc, y, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes))
EMBER_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7, (cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults), (handle, filterDesc, diffDesc, convDesc, gradDesc, requestedAlgoCount, returnedAlgoCount, perfResults))
EMBER_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize, (cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes), (handle, wDesc, dyDesc, convDesc, dxDesc, algo, sizeInBytes))
EMBER_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7, (cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults), (handle, srcDesc, diffDesc, convDesc, gradDesc, requestedAlgoCount, returnedAlgoCount, perfResults))
EMBER_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes), (handle, xDesc, dyDesc, convDesc, gradDesc, algo, sizeInBytes))
EMBER_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7, (cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults), (handle, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount, returnedAlgoCount, perfResults))
EMBER_CUDNN(cudnnGetConvolutionForwardWorkspaceSize, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes), (handle, xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes))
EMBER_CUDNN(cudnnGetErrorString, (cudnnStatus_t status), (status))
EMBER_CUDNN(cudnnGetStream, (cudnnHandle_t handle, cudaStream_t *streamId), (handle, streamId))
EMBER_CUDNN(cudnnSetConvolution2dDescriptor, (cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType), (convDesc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, computeType))
EMBER_CUDNN(cudnnSetConvolutionGroupCount, (cudnnConvolutionDescriptor_t convDesc, int groupCount), (convDesc, groupCount))
EMBER_CUDNN(cudnnSetConvolutionMathType, (cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType), (convDesc, mathType))
EMBER_CUDNN(cudnnSetFilter4dDescriptor, (cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType, cudnnTensorFormat_t format, int k, int c, int h, int w), (filterDesc, dataType, format, k, c, h, w))
EMBER_CUDNN(cudnnSetStream, (cudnnHandle_t handle, cudaStream_t streamId), (handle, streamId))
EMBER_CUDNN(cudnnSetTensor4dDescriptor, (cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format, cudnnDataType_t dataType, int n, int c, int h, int w), (tensorDesc, format, dataType, n, c, h, w))
// clang-format on
