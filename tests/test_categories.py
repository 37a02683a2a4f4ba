"""Kernel name -> category (analyzer/core/categories.toml): every communication family on real kernel names.

Each name is one that a library launches, with its source beside it: a public trace (the name exactly as
recorded), or the library's source file that declares the kernel (repository, path, commit). A name from
source is written as nsys demangles it (template values as `(int)8` and `(bool)1`, the anonymous namespace
as `<unnamed>`, as this project's captures show; a long template or parameter list that no rule reads is
abbreviated), and is also checked as the short name nsys stores beside it, unless the family needs its
namespace to be told apart (DeepEP's and Mooncake's kernels are called `dispatch` and `combine`: their short
names say nothing, and stay uncategorised).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from specprof.analyzer.cli import main
from specprof.analyzer.core import categories
from specprof.analyzer.core.attribution import attribute
from specprof.analyzer.core.categories import categorize, default_rules, function_name, kinds_of
from specprof.analyzer.derived.analysis import analyse
from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.model.labels import COMMUNICATION
from specprof.analyzer.readers.load import load_trace
from conftest import FIXTURES, SHARED

RULES = default_rules()
KINDS = {"allreduce", "all_to_all", "allgather", "reduce_scatter", "p2p"}

# Sources (repository @ commit: path)
NCCL = "NVIDIA/nccl @ 5067397c2676 (2.30): src/device/generate.py, ncclDevKernel_<coll>_<redop>_<type>_<algo>_<proto>"
NCCL_GENERIC = "NVIDIA/nccl @ 5067397c2676: src/device/common.cu, ncclDevKernel_Generic"
NCCL_218 = "NVIDIA/nccl v2.18.3-1 @ ea383122: src/include/collectives.h, NCCL_KERN_NAME = ncclKernel_<func>_<algo>_..."
NCCL_27 = ("NVIDIA/nccl v2.7.8-1 @ 033d7995: src/include/collectives.h, NCCL_KERN_NAME = "
           "<coll><Algo><Proto>Kernel_<op>_<type>")
NCCL_SYM = ("NVIDIA/nccl v2.27.3-1 @ 72d24320: src/device/symmetric/generate.py, "
            "ncclSymDevKernel_<coll>_<algo>[_<red>_<type>]")
NCCL_SYMK = ("NVIDIA/nccl v2.28.3-1 @ f1308997: src/device/symmetric/generate.py, "
             "ncclSymkDevKernel_<coll>_<algo>[_<red>_<type>]")
TP2 = "fixtures/reference-k4-tp2/run.sqlite (this project's TP = 2 capture)"
NSYSAI = "GindaChen/nsys-ai @ ab196ea2: tests/fixtures/mfu_2gpu_before.sqlite (shared/traces/nsys_sqlite)"
HTA_NCCL = "facebookresearch/HolisticTraceAnalysis @ f4d0062c: tests/data/nccl_parser_config/nccl_data.json.gz"
HTA_QUEUE = ("facebookresearch/HolisticTraceAnalysis @ f4d0062c: "
             "tests/data/negative_queue_length_values_check/rank0.json.gz")
HTA_DIFF = "facebookresearch/HolisticTraceAnalysis @ f4d0062c: tests/data/trace_diff/control/control.json.gz"
SGL_CAR = "sgl-project/sglang @ 0bb5d5e9: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh (namespace vllm)"
SGL_TRT = "sgl-project/sglang @ 2ab5a586: sgl-kernel/csrc/allreduce/trt_reduce_internal.cu (namespace trt_llm)"
SGL_MSCCLPP = "sgl-project/sglang @ 013dc74e: sgl-kernel/csrc/allreduce/mscclpp_allreduce.cuh"
SGL_JIT_PULL = "sgl-project/sglang @ 0ba3cdd4: python/sglang/jit_kernel/csrc/distributed/custom_all_reduce_pull.cuh"
SGL_JIT_PUSH = "sgl-project/sglang @ 233f402c: python/sglang/jit_kernel/csrc/distributed/custom_all_reduce_push.cuh"
SGL_JIT_V2 = "sgl-project/sglang @ 320af530: python/sglang/jit_kernel/csrc/distributed/custom_all_reduce.cuh"
SGL_JIT_V3 = "sgl-project/sglang @ 03fd6d59: python/sglang/kernels/jit/csrc/distributed/custom_all_reduce.cuh"
SGL_NVLINK = ("sgl-project/sglang: python/sglang/kernels/jit/csrc/distributed/nvlink_comm.cuh (both versions: "
              "with and without kHasResidual)")
SGL_MOE_AR = "sgl-project/sglang @ 171d5a9c: python/sglang/kernels/jit/csrc/distributed/all_reduce_fusion.cuh"
SGL_WHEEL = "sglang 0.5.23 (the PyPI wheel): sglang/kernels/jit/csrc/distributed/"
SGL_TRITON_AG = "sgl-project/sglang: python/sglang/srt/distributed/device_communicators/triton_symm_mem_ag.py"
FI = "flashinfer-ai/flashinfer @ fb28d724: include/flashinfer/comm/"
FI_A2A = ("flashinfer-ai/flashinfer @ fb28d724: "
          "csrc/nv_internal/tensorrt_llm/kernels/communicationKernels/moeAlltoAllKernels.cu")
TRTLLM = "NVIDIA/TensorRT-LLM @ 04c74656: cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.cu"
TORCH = "pytorch/pytorch @ 03a4032b: torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu"
TORCH_WHEEL = ("torch 2.14.1+cu130 (the PyPI wheel): torch/lib/libtorch_cuda.so, a kernel's symbol demangled by "
               "c++filt as Kineto demangles it (its parameter list not recovered)")
MSCCLPP = ("microsoft/mscclpp @ 1f5f065d: src/ext/collectives/allreduce/allreduce_packet.cu, "
           "src/core/include/execution_kernel.hpp")
DEEPEP = "deepseek-ai/DeepEP v1.2.1 @ 9af0e0d0: csrc/kernels/{intranode,internode,internode_ll,layout}.cu"
DEEPEP_V2 = "deepseek-ai/DeepEP @ dd758caf (EPv2): csrc/kernels/legacy/*.cu, deep_ep/include/deep_ep/impls/*.cuh"
MOONCAKE = "kvcache-ai/Mooncake @ c5829aad: mooncake-ep/src/mooncake_ep_kernel.cu"
MOONCAKE_NEW = "kvcache-ai/Mooncake @ 3b5a5941: mooncake-ep/src/mooncake_ep_kernel.cu, mooncake-ep/include/elastic/"

NCCL_ARGS = "(ncclDevKernelArgsStorage<(unsigned long)4096>)"

# MoE (compute): SGLang's own kernels, in the wheel installed here and in sgl-kernel's sources, and vLLM's
SGL_MOE = "sglang 0.5.23 (the PyPI wheel): sglang/kernels/"
SGLK_ALIGN = "sgl-project/sglang @ ce378154: sgl-kernel/csrc/moe/moe_align_kernel.cu"
SGLK_TOPK = "sgl-project/sglang @ a535425d: sgl-kernel/csrc/moe/moe_topk_softmax_kernels.cu"
SGLK_SUM = "sgl-project/sglang @ 0ba3cdd4: sgl-kernel/csrc/moe/moe_sum_reduce.cu"
SGLK_GATE = "sgl-project/sglang @ 6e2b2c9d: sgl-kernel/csrc/moe/moe_fused_gate.cu"
VLLM_MOE = "vllm-project/vllm @ 1377b4e0: csrc/moe/moe_align_sum_kernels.cu (namespace vllm::moe)"
VLLM_TOPK = "vllm-project/vllm @ ad471555: csrc/moe/topk_softmax_kernels.cu (namespace vllm::moe)"
MOE_CAPTURE = "fixtures/sglang-moe-k4/run.sqlite (SGLang 0.5.16, sglang-kernel 0.4.5, --moe-runner-backend triton)"
MOE_CAPTURE_SMALL = ("fixtures/sglang-moe-k2/run.sqlite (24 tokens: SGLang 0.5.16's moe_sum_reduce_torch_compile, "
                     "srt/layers/moe/moe_runner/triton_utils/fused_moe.py, as torch Inductor names it)")
SGL_ACT = "sglang 0.5.16 (the PyPI wheel): sglang/jit_kernel/csrc/elementwise/activation.cuh"


# (full name, short name or None, category, source)
CASES = [
    # NCCL 2.19+
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL" + NCCL_ARGS, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
     "allreduce", TP2),
    ("ncclDevKernel_SendRecv" + NCCL_ARGS, "ncclDevKernel_SendRecv", "p2p", NSYSAI),
    ("ncclDevKernel_AllGather_RING_LL" + NCCL_ARGS, "ncclDevKernel_AllGather_RING_LL", "allgather", NCCL),
    ("ncclDevKernel_AllGatherV_RING_LL" + NCCL_ARGS, "ncclDevKernel_AllGatherV_RING_LL", "allgather", NCCL),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL" + NCCL_ARGS, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
     "reduce_scatter", NCCL),
    ("ncclDevKernel_AllReduce_Sum_f32_TREE_LL" + NCCL_ARGS, "ncclDevKernel_AllReduce_Sum_f32_TREE_LL", "allreduce",
     NCCL),
    ("ncclDevKernel_Broadcast_RING_LL" + NCCL_ARGS, "ncclDevKernel_Broadcast_RING_LL", COMMUNICATION, NCCL),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL" + NCCL_ARGS, "ncclDevKernel_Reduce_Sum_f32_RING_LL", COMMUNICATION, NCCL),
    ("ncclDevKernel_Generic" + NCCL_ARGS, "ncclDevKernel_Generic", COMMUNICATION, NCCL_GENERIC),
    # NCCL up to 2.18 (public Kineto traces) and 2.7
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", None, "allreduce", HTA_NCCL),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None, COMMUNICATION,
     HTA_NCCL),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None, "p2p", HTA_QUEUE),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", None, "allreduce", HTA_DIFF),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_half(ncclDevComm *, unsigned long, ncclWork *)",
     "ncclKernel_ReduceScatter_RING_LL_Sum_half", "reduce_scatter", NCCL_218),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm *, unsigned long, ncclWork *)",
     "ncclKernel_AllGather_RING_LL_Sum_int8_t", "allgather", NCCL_218),
    ("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", "ncclAllReduceRingLLKernel_sum_f32", "allreduce", NCCL_27),
    ("ncclReduceScatterRingLLKernel_sum_f16(ncclColl)", "ncclReduceScatterRingLLKernel_sum_f16", "reduce_scatter",
     NCCL_27),
    ("ncclSendRecvKernel_copy_i8(ncclColl)", "ncclSendRecvKernel_copy_i8", "p2p", NCCL_27),
    # NCCL symmetric-memory kernels
    ("ncclSymDevKernel_AllReduce_AGxLL_R_sum_bf16(ncclSymDevArgs)", "ncclSymDevKernel_AllReduce_AGxLL_R_sum_bf16",
     "allreduce", NCCL_SYM),
    ("ncclSymDevKernel_AllGather_LLMC(ncclSymDevArgs)", "ncclSymDevKernel_AllGather_LLMC", "allgather", NCCL_SYM),
    ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16(ncclSymkDevWorkArgs4K)",
     "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16", "allreduce", NCCL_SYMK),
    ("ncclSymkDevKernel_ReduceScatter_LDMC_sum_f32(ncclSymkDevWorkArgs4K)",
     "ncclSymkDevKernel_ReduceScatter_LDMC_sum_f32", "reduce_scatter", NCCL_SYMK),
    ("ncclSymkDevKernel_AllGather_ST(ncclSymkDevWorkArgs4K)", "ncclSymkDevKernel_AllGather_ST", "allgather",
     NCCL_SYMK),
    # SGLang's custom all-reduce: sgl-kernel (vLLM's one- and two-stage, TRT-LLM's one- and two-shot)
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, (int)8>(vllm::RankData *, vllm::RankSignals, "
     "vllm::Signal *, T1 *, int, int)", "cross_device_reduce_1stage", "allreduce", SGL_CAR),
    ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, (int)4>(vllm::RankData *, vllm::RankSignals, "
     "vllm::Signal *, T1 *, int, int)", "cross_device_reduce_2stage", "allreduce", SGL_CAR),
    ("void sglang::cross_device_reduce_2stage<half, (int)8>(sglang::RankData *, sglang::RankSignals, "
     "sglang::Signal *, T1 *, int, int)", "cross_device_reduce_2stage", "allreduce",
     "the symbols of the sglang-kernel 0.4.10 wheel (shared/notes/sglang.md, section 4)"),
    ("void trt_llm::oneShotAllReduceKernel<__nv_bfloat16, (int)8, (bool)1>(trt_llm::AllReduceParams)",
     "oneShotAllReduceKernel", "allreduce", SGL_TRT),
    ("void trt_llm::twoShotAllReduceKernel<half, (int)4, (bool)1>(trt_llm::AllReduceParams)",
     "twoShotAllReduceKernel", "allreduce", SGL_TRT),
    # SGLang's JIT all-reduce, each version's names
    ("void <unnamed>::all_reduce_one_shot_kernel<__nv_bfloat16, (unsigned int)8, (bool)1>(const "
     "host::distributed::AllReduceData *, <unnamed>::AllReduceParams, device::distributed::PullController)",
     "all_reduce_one_shot_kernel", "allreduce", SGL_JIT_PULL),
    ("void <unnamed>::all_reduce_two_shot_kernel<__nv_bfloat16, (unsigned int)8, (bool)1>(const "
     "host::distributed::AllReduceData *, <unnamed>::AllReduceParams, device::distributed::PullController)",
     "all_reduce_two_shot_kernel", "allreduce", SGL_JIT_PULL),
    ("void <unnamed>::all_reduce_one_shot_push_kernel<__nv_bfloat16, (unsigned int)8, (bool)1>"
     "(<unnamed>::AllReducePushData, device::distributed::PushController)",
     "all_reduce_one_shot_push_kernel", "allreduce", SGL_JIT_PUSH),
    ("void <unnamed>::all_reduce_kernel<<unnamed>::AllReducePullImpl<__nv_bfloat16, (unsigned int)8, "
     "(<unnamed>::PullMode)0, (bool)1>, (int)2>(<unnamed>::AllReduceParams)", "all_reduce_kernel", "allreduce",
     SGL_JIT_V2),
    ("void sglang::all_reduce_1shot_push_kernel<sglang::LoadStoreImpl<device::AlignedVector<__nv_bfloat162, "
     "(unsigned long)4>, (unsigned int)8, (bool)0>, __nv_bfloat16, (unsigned int)8, (bool)1>"
     "(sglang::AllReducePushParams<(unsigned int)8>)", "all_reduce_1shot_push_kernel", "allreduce", SGL_JIT_V3),
    ("void sglang::all_reduce_2shot_pull_kernel<sglang::MultiCastImpl<device::AlignedVector<__nv_bfloat162, "
     "(unsigned long)4>, (unsigned int)8, (bool)0>, __nv_bfloat16, (unsigned int)8, (bool)1>"
     "(sglang::AllReducePullParams<(unsigned int)8>)", "all_reduce_2shot_pull_kernel", "allreduce", SGL_JIT_V3),
    ("void sglang::all_reduce_2shot_push_kernel<__nv_bfloat16, (unsigned int)4, (bool)1, (bool)0>"
     "(sglang::AllReduce2ShotPushParams<(unsigned int)4>)", "all_reduce_2shot_push_kernel", "allreduce", SGL_JIT_V3),
    ("void sglang::moe_finalize_all_reduce_kernel<(unsigned int)8, (unsigned int)7168, (unsigned int)8, "
     "(unsigned int)4, (bool)1, (bool)1, (bool)1, float, (bool)0, (bool)0, (bool)0, (bool)0>"
     "(sglang::MoeFinalizeAllReduceParams<T1, T8>)", "moe_finalize_all_reduce_kernel", "allreduce", SGL_MOE_AR),
    ("void sglang::beam_ar::kernel<(unsigned int)8, (unsigned int)4096, (unsigned int)2, (unsigned int)8, (bool)1>"
     "(sglang::beam_ar::Params<T1>)", None, "allreduce", SGL_WHEEL + "beam_all_reduce.cuh"),
    ("sglang::ipc_a2a::spin_wait_kernel(volatile int *, const int *, int *, int *, unsigned long long)",
     None, "all_to_all", SGL_WHEEL + "ipc_a2a.cuh"),
    # SGLang's nvlink collectives: the primitive is a template argument (RS = 1, AG = 2, AR = 3)
    ("void sglang::nvlink_push_kernel<__nv_bfloat16, (sglang::Primitive)3, (unsigned int)8, (bool)1>"
     "(sglang::NVLinkCommPushParams<T3>)", None, "allreduce", SGL_NVLINK),
    ("void sglang::nvlink_push_kernel<__nv_bfloat16, (bool)1, (sglang::Primitive)1, (unsigned int)8, (bool)1>"
     "(sglang::NVLinkCommPushParams<T4>)", None, "reduce_scatter", SGL_NVLINK),
    ("void sglang::nvlink_pull_kernel<__nv_bfloat16, (sglang::Primitive)2, (bool)1>(sglang::NVLinkCommPullParams)",
     None, "allgather", SGL_NVLINK),
    ("void sglang::nvlink_barrier_kernel<(bool)1>(device::distributed::Semaphore *, "
     "device::distributed::Semaphore *, unsigned int)", None, COMMUNICATION, SGL_NVLINK),
    # SGLang's Triton all-gather over torch symmetric memory (a Triton kernel's name is the function's)
    ("_all_gather_kernel_inner", None, "allgather", SGL_TRITON_AG),
    # sgl-kernel's mscclpp all-reduce, and mscclpp's own kernels
    ("void sglang::allreduce_1shotLL_1node<__nv_bfloat16>(mscclpp::MemoryChannelDeviceHandle *, T1 *, T1 *, "
     "void *, int, int, unsigned long)", "allreduce_1shotLL_1node", "allreduce", SGL_MSCCLPP),
    ("void sglang::allreduce_1shotLL_2node<half>(mscclpp::MemoryChannelDeviceHandle *, "
     "mscclpp::PortChannelDeviceHandle *, T1 *, T1 *, T1 *, T1 *, int, int, int, unsigned long)",
     "allreduce_1shotLL_2node", "allreduce", SGL_MSCCLPP),
    ("void mscclpp::collective::allreducePacket<(mscclpp::ReduceOp)0, __nv_bfloat16, __nv_bfloat16>(T2 *, T2 *, "
     "T2 *, mscclpp::DeviceHandle<mscclpp::MemoryChannel> *, unsigned long, unsigned long, int, int, int, "
     "unsigned long, unsigned int, unsigned int *, unsigned int, unsigned int)", "allreducePacket", "allreduce",
     MSCCLPP),
    ("void mscclpp::executionKernel<__nv_bfloat16, mscclpp::LL16Packet, (bool)0>(int, T1 *, T1 *, T1 *, "
     "unsigned long, mscclpp::DeviceExecutionPlan *, unsigned int, unsigned long, unsigned int)", None,
     COMMUNICATION, MSCCLPP),
    # FlashInfer's TensorRT-LLM all-reduce and all-reduce fusion (lamport)
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<"
     "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, (int)8, (bool)1, (bool)1>"
     "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<T2>)",
     "allreduce_fusion_kernel_oneshot_lamport", "allreduce", FI + "trtllm_allreduce_fusion.cuh"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_twoshot_sync<"
     "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)0, half, (int)4, (bool)0>"
     "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<T2>, std::array<int, (unsigned long)4>)",
     "allreduce_fusion_kernel_twoshot_sync", "allreduce", FI + "trtllm_allreduce_fusion.cuh"),
    ("void flashinfer::trtllm_moe_allreduce_fusion::moereduce_allreduce_fusion_kernel_oneshot_lamport<"
     "__nv_bfloat16, (int)8, (bool)1, (bool)1, (bool)1, (bool)0>"
     "(flashinfer::trtllm_moe_allreduce_fusion::MoeReductionAllReduceFusionParams<T1>)",
     "moereduce_allreduce_fusion_kernel_oneshot_lamport", "allreduce", FI + "trtllm_moe_allreduce_fusion.cuh"),
    ("void flashinfer::trtllm_allreduce::oneShotAllReduceKernel<__nv_bfloat16, (int)8, (bool)1, (bool)0>"
     "(flashinfer::trtllm_allreduce::AllReduceParams<T1>)", "oneShotAllReduceKernel", "allreduce",
     FI + "trtllm_allreduce.cuh"),
    ("void flashinfer::trtllm_allreduce::reduce_fusion::lamport_style_one_shot_all_reduce_norm_kernel<"
     "__nv_bfloat16, (int)8, (bool)0, (bool)1>(flashinfer::trtllm_allreduce::AllReduceParams<T1>)",
     "lamport_style_one_shot_all_reduce_norm_kernel", "allreduce", FI + "trtllm_allreduce.cuh"),
    ("void flashinfer::trtllm_mnnvl_allreduce::oneshotAllreduceFusionKernel<(unsigned char)4, __nv_bfloat16, "
     "(bool)1, (flashinfer::trtllm_mnnvl_allreduce::QuantType)0, float4>"
     "(flashinfer::trtllm_mnnvl_allreduce::AllReduceKernelParams<T2>)", "oneshotAllreduceFusionKernel",
     "allreduce", FI + "trtllm_mnnvl_allreduce.cuh"),
    ("void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel<(unsigned char)4, __nv_bfloat16, (bool)1, "
     "float4>(flashinfer::trtllm_mnnvl_allreduce::AllReduceKernelParams<T2>)", "twoshotAllreduceKernel",
     "allreduce", FI + "trtllm_mnnvl_allreduce.cuh"),
    ("void vllm::cross_device_reduce_1stage<float, (int)2>(vllm::RankData *, vllm::RankSignals, vllm::Signal *, "
     "T1 *, int, int)", None, "allreduce", FI + "vllm_custom_all_reduce.cuh"),
    ("void flashinfer::comm::pcie_ipc::push_oneshot_param_kernel<__nv_bfloat16, (int)2, (bool)1, (bool)1>"
     "(flashinfer::comm::pcie_ipc::PushOneshotParamData<T1>)", None, "allreduce", FI + "pcie_ipc_all_reduce.cuh"),
    ("void flashinfer::mixed_comm::allgather_kernel<(int)4, (int)8, (int)1, (bool)0, (bool)1, "
     "(flashinfer::mixed_comm::MixedCommMode)0, __nv_bfloat16>(...)", "allgather_kernel", "allgather",
     FI + "mixed_comm.cuh"),
    ("void flashinfer::mixed_comm::reducescatter_kernel<(int)4, (int)8, (int)1, (bool)0, (bool)1, "
     "(flashinfer::mixed_comm::MixedCommMode)0, __nv_bfloat16>(...)", "reducescatter_kernel", "reduce_scatter",
     FI + "mixed_comm.cuh"),
    # TensorRT-LLM's own all-reduce fusion, and its MoE all-to-all (vendored by FlashInfer)
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<"
     "(tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1, __nv_bfloat16, (int)8, (bool)1, (bool)1>"
     "(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams)", "allreduce_fusion_kernel_oneshot_lamport",
     "allreduce", TRTLLM),
    ("void tensorrt_llm::kernels::moe_alltoall::moeA2ADispatchKernel<(int)8, (bool)0, (bool)0, (bool)0>(const int *, "
     "tensorrt_llm::kernels::moe_alltoall::DispatchKernelPointers, int, int, int, int, int, int, int)",
     "moeA2ADispatchKernel", "all_to_all", FI_A2A),
    ("void tensorrt_llm::kernels::moe_alltoall::moeA2ACombineKernel<__nv_bfloat16, (int)8>"
     "(tensorrt_llm::kernels::moe_alltoall::CombineKernelPointers, int, int, int, int, int, int)",
     "moeA2ACombineKernel", "all_to_all", FI_A2A),
    ("flashinfer::trtllm_alltoall::moeAllToAllKernel(flashinfer::trtllm_alltoall::MoeEpWorldInfo, "
     "flashinfer::trtllm_alltoall::MoeCommWorkspace, flashinfer::trtllm_alltoall::SendRecvDataInfo, "
     "flashinfer::trtllm_alltoall::SendRecvDispls, flashinfer::trtllm_alltoall::SendRecvDispls)",
     "moeAllToAllKernel", "all_to_all", FI + "trtllm_alltoall.cuh"),
    # torch symmetric memory (one-shot, two-shot, multimem); reduce_scatter_out runs the two-shot kernel
    ("void <unnamed>::multimem_all_reduce_kernel<c10::BFloat16, (int)16>(T1 *, unsigned long, unsigned int **, "
     "unsigned long, unsigned long)", "multimem_all_reduce_kernel", "allreduce", TORCH),
    ("void <unnamed>::multimem_one_shot_all_reduce_kernel<float, (int)16>(T1 *, T1 *, unsigned long, "
     "unsigned int **, unsigned long, unsigned long)", "multimem_one_shot_all_reduce_kernel", "allreduce", TORCH),
    ("void <unnamed>::multimem_all_gather_kernel<(int)16>(char *, char *, unsigned long, unsigned int **, "
     "unsigned long, unsigned long)", "multimem_all_gather_kernel", "allgather", TORCH),
    ("void <unnamed>::one_shot_all_reduce_kernel<c10::BFloat16, (int)16, (int)8>(T1 **, T1 *, T1 *, unsigned long, "
     "unsigned long, unsigned int **, unsigned long, unsigned long)", "one_shot_all_reduce_kernel", "allreduce",
     TORCH),
    ("void <unnamed>::two_shot_all_reduce_kernel<c10::BFloat16, (int)16, (int)8, (bool)0, (bool)0>(T1 **, T1 *, "
     "unsigned long, unsigned long, unsigned int **, unsigned long, unsigned long, unsigned long)",
     "two_shot_all_reduce_kernel", "allreduce", TORCH),
    ("void <unnamed>::two_shot_all_reduce_kernel<c10::BFloat16, (int)16, (int)8, (bool)1, (bool)1>(T1 **, T1 *, "
     "unsigned long, unsigned long, unsigned int **, unsigned long, unsigned long, unsigned long)",
     None, "reduce_scatter", TORCH),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel<float, 16, 4, true, false>(float**, float*, "
     "unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long, unsigned long)",
     None, "reduce_scatter", TORCH + " (as c++filt, which Kineto uses, writes it)"),
    ("void <unnamed>::two_shot_all_reduce_kernel_inplace<c10::BFloat16, (int)16, (int)8>(T1 **, unsigned long, "
     "unsigned long, unsigned int **, unsigned long, unsigned long)", "two_shot_all_reduce_kernel_inplace",
     "allreduce", TORCH),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8, false, false>()", None,
     "allreduce", TORCH_WHEEL),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8, true, false>()", None,
     "reduce_scatter", TORCH_WHEEL),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8, true, true>()", None,
     "reduce_scatter", TORCH_WHEEL),
    ("void (anonymous namespace)::multimem_all_gather_kernel<16>()", None, "allgather", TORCH_WHEEL),
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>()", None, "allreduce",
     TORCH_WHEEL),
    # a reduce to one root rank: a collective of no kind of its own
    ("void (anonymous namespace)::multimem_one_shot_reduce_kernel<c10::BFloat16, 16>()",
     "multimem_one_shot_reduce_kernel", COMMUNICATION, TORCH_WHEEL),
    # DeepEP: intranode (NVLink), internode (RDMA), low-latency; EPv2 moved them under deep_ep::legacy
    ("void deep_ep::intranode::dispatch<(int)8, (int)768, (int)8192>(int4 *, float *, int *, long *, float *, "
     "int *, int *, const int4 *, const float *, const long *, const float *, const bool *, const int *, int, int, "
     "int, int, int, int, int, int, void **, int, int, int)", None, "all_to_all", DEEPEP),
    ("void deep_ep::intranode::combine<__nv_bfloat16, (int)8, (int)768, (int)4096>(T1 *, float *, const T1 *, "
     "const float *, const T1 *, const T1 *, const int *, const int *, const int *, int, int, int, void **, int, "
     "int, int)", None, "all_to_all", DEEPEP),
    ("void deep_ep::intranode::notify_dispatch<(int)8>(const int *, int *, int, const int *, int *, int, int, "
     "const bool *, int *, int *, int, int, void **, int **, int)", None, "all_to_all", DEEPEP),
    ("void deep_ep::intranode::cached_notify_combine<(int)8>(void **, int *, int, int, int, int **, int)", None,
     "all_to_all", DEEPEP),
    ("void deep_ep::internode::dispatch<(bool)0, (int)2, (bool)0, (int)24, (int)16, (int)6, (int)512>(int4 *, "
     "float *, long *, float *, deep_ep::internode::SourceMeta *, const int4 *, const float *, const long *, "
     "const float *, int *, int *, int *, int *, const bool *, int, int, int, int, int, int, void *, int, int, "
     "void **, int, int, int)", None, "all_to_all", DEEPEP),
    ("void deep_ep::internode::cached_notify(int, int, int, int, int *, int, int, int, const int *, int *, int, "
     "void *, int *, void **, int **, int, int, bool)", None, "all_to_all", DEEPEP),
    ("void deep_ep::internode_ll::dispatch<(bool)1, (bool)0, (int)7168>(void *, void *, int *, long *, int *, "
     "int *, long *, void *, int *, void *, const void *, const long *, int *, int *, int *, int, int, int, int, "
     "int, int, int, int, bool, bool)", None, "all_to_all", DEEPEP),
    ("void deep_ep::internode_ll::combine<(bool)0, (int)7168, (int)8>(void *, void *, int *, void *, const void *, "
     "const long *, const float *, const int *, const long *, int *, int *, int, int, int, int, int, int, int, "
     "int, int, int, bool, void *, bool)", None, "all_to_all", DEEPEP),
    ("void deep_ep::internode_ll::clean_low_latency_buffer<(int)256>(int *, int, int *, int)", None, "all_to_all",
     DEEPEP),
    ("void deep_ep::legacy::intranode::dispatch<(int)8, (int)768, (int)8192>(int4 *, float *, int *, long *, "
     "float *, int *, int *, const int4 *, const float *, const long *, const float *, const bool *, const int *, "
     "int, int, int, int, int, int, int, int, void **, int, int, int)", None, "all_to_all", DEEPEP_V2),
    ("void deep_ep::elastic::dispatch_impl<(bool)1, (int)24, (int)4, (int)16, (int)1, (int)8, (int)256, (int)8, "
     "(int)1, (int)1, (long)100000000000>(void *, deep_ep::elastic::sf_pack_t *, long *, float *, long *, int *, "
     "int *, int *, int *, int *, int)", None, "all_to_all", DEEPEP_V2),
    ("void deep_ep::elastic::hybrid_combine_impl<(bool)0, (int)24>(void *)", None, "all_to_all", DEEPEP_V2),
    ("void deep_ep::elastic::pp_send_impl<(int)8>(void *)", None, "p2p", DEEPEP_V2),
    ("void deep_ep::elastic::barrier_impl<(bool)1, (int)24, (int)256, (int)1, (int)8, (long)100000000000, "
     "(bool)0>(ncclDevComm, ncclWindow *, void *, int, int)", None, COMMUNICATION, DEEPEP_V2),
    # Mooncake EP
    ("void mooncake::dispatch<(bool)1, (int)3, (int)10, (int)7168>(void *, float *, int *, long *, int *, int *, "
     "void *, int *, int *, void *, void *, void *, void *, void *, void *, void *)", None, "all_to_all", MOONCAKE),
    ("void mooncake::combine<(int)3, (int)10, (int)7168, (int)8>(void *, int *, void *)", None, "all_to_all",
     MOONCAKE),
    ("mooncake::mark_and_wait_phase_ack_kernel(void *, const int *, void *const *, int *, int, int, int, long)",
     None, "all_to_all", MOONCAKE_NEW),
    ("void mooncake::elastic::hybrid_dispatch_impl<(bool)1, (int)24>(void *)", None, "all_to_all", MOONCAKE_NEW),
]

# The MoE kernels SGLang's fused-MoE Triton path and its routing launch (and vLLM's, which SGLang's came from):
# (full name, short name or None, source). A Triton kernel is named by its Python function, full and short.
MOE = [
    # the expert GEMMs (Triton)
    ("fused_moe_kernel", "fused_moe_kernel", SGL_MOE + "ops/moe/fused_moe_triton_kernels.py"),
    ("fused_moe_kernel_gptq_awq", "fused_moe_kernel_gptq_awq", SGL_MOE + "ops/moe/fused_moe_triton_kernels.py"),
    ("_grouped_gemm_kernel", "_grouped_gemm_kernel", SGL_MOE + "ops/moe/inkling_moe.py"),
    # routing: the gate's top-k softmax / sigmoid, fused gates, routers
    ("void sglang::topkGatingSoftmax<__nv_bfloat16, (int)1, (int)8, (int)4, (int)16>(const T1 *, const bool *, "
     "float *, int, int *, int, int, int, bool, float, const float *)", "topkGatingSoftmax",
     SGL_MOE + "jit/csrc/moe/moe_topk_softmax.cuh"),
    ("void sglang::moeSoftmax<__nv_bfloat16, (int)256>(const T1 *, const bool *, float *, int, float, "
     "const float *)", "moeSoftmax", SGL_MOE + "jit/csrc/moe/moe_topk_softmax.cuh"),
    ("void sglang::moeTopK<(int)256>(float *, const bool *, float *, int *, int, int, int, int, bool)", "moeTopK",
     SGL_MOE + "jit/csrc/moe/moe_topk_softmax.cuh"),
    ("void sglang::topkGatingSigmoid<__nv_bfloat16, (int)8, (int)128, (int)4, (int)16>(const T1 *, const bool *, "
     "float *, int, int *, int, int, int, bool, const float *)", "topkGatingSigmoid",
     SGL_MOE + "jit/csrc/moe/moe_topk_sigmoid.cuh"),
    ("void topkGatingSoftmax<float, (int)8, (int)8, (int)4, (int)16>(const T1 *, const bool *, float *, int, int *, "
     "int, int, int, bool)", "topkGatingSoftmax", SGLK_TOPK),
    ("void moe_fused_gate_kernel<cutlass::bfloat16_t, (int)32, (int)256, (int)8, (int)4, (int)24, (int)6>(void *, "
     "void *, float *, int *, long, long, long)", "moe_fused_gate_kernel", SGLK_GATE),
    ("void moe_fused_gate_kernel_dynamic<float>(void *, void *, float *, int *, long, long, long, long, long)",
     "moe_fused_gate_kernel_dynamic", SGLK_GATE),
    ("fused_moe_router_cudacore_kernel", "fused_moe_router_cudacore_kernel", SGL_MOE + "ops/moe/router.py"),
    ("_router_triton_kernel", "_router_triton_kernel", SGL_MOE + "ops/moe/moe_fused_gate.py"),
    ("_sigmoid_gate_topk_renorm_kernel", "_sigmoid_gate_topk_renorm_kernel",
     SGL_MOE + "ops/moe/sigmoid_gate_topk_renorm.py"),
    ("void vllm::moe::topkGatingSoftmax<float, (int)4, (int)8, (int)4, (int)16, (int)32, int>(const T1 *, "
     "const bool *, float *, int, T7 *, int *, int, int, int, bool)", "topkGatingSoftmax", VLLM_TOPK),
    # align and sort tokens by expert
    ("void sglang::moe::moe_align_block_size_kernel<int, (bool)0, (bool)0, (bool)0>(const T1 *, int *, int *, int *, "
     "int, int, unsigned long, int *, bool, int, int, int)", "moe_align_block_size_kernel",
     SGL_MOE + "jit/csrc/moe/moe_align_kernel.cu"),
    ("void sglang::moe::moe_align_block_size_small_batch_expert_kernel<int, (int)256, (bool)0, (bool)0, (bool)0>("
     "const T1 *, int *, int *, int *, int, int, unsigned long, bool, int, int)",
     "moe_align_block_size_small_batch_expert_kernel", SGL_MOE + "jit/csrc/moe/moe_align_kernel.cu"),
    ("void sglang::moe::count_and_sort_expert_tokens_kernel<int>(const T1 *, int *, int *, unsigned long)",
     "count_and_sort_expert_tokens_kernel", SGL_MOE + "jit/csrc/moe/moe_align_kernel.cu"),
    ("void sglang::align_single_token_kernel<(bool)1, (bool)0>(sglang::AlignSingleTokenParams)", None,
     SGL_MOE + "jit/csrc/moe/align_single_token.cuh"),
    ("void moe_align_block_size_kernel<int>(const T1 *, int *, int *, int *, int, int, unsigned long, int *)",
     "moe_align_block_size_kernel", SGLK_ALIGN),
    ("void count_and_sort_expert_tokens_kernel<int>(const T1 *, int *, int *, unsigned long)",
     "count_and_sort_expert_tokens_kernel", SGLK_ALIGN),
    ("_moe_align_small_numel_kernel", "_moe_align_small_numel_kernel", SGL_MOE + "ops/moe/moe_align_small_numel.py"),
    ("_moe_sorting_small_kernel", "_moe_sorting_small_kernel", SGL_MOE + "ops/moe/moe_sorting_small.py"),
    ("void vllm::moe::moe_align_block_size_kernel<int>(const T1 *, int *, int *, int *, int, int, int, int, "
     "unsigned long, int *, int, int, bool)", "moe_align_block_size_kernel", VLLM_MOE),
    # the sum of the experts' outputs, and the finalize
    ("_moe_sum_reduce_kernel", "_moe_sum_reduce_kernel", SGL_MOE + "ops/moe/fused_moe_triton_kernels.py"),
    ("void moe_sum_reduce_kernel<c10::BFloat16, (int)2>(const T1 *, T1 *, long, long, long, long, long, float)",
     "moe_sum_reduce_kernel", SGLK_SUM),
    ("void moe_sum_reduce_warp_per_token_vec_kernel<(int)8>(const c10::BFloat16 *, c10::BFloat16 *, long, long, "
     "long, long, long, long, float)", "moe_sum_reduce_warp_per_token_vec_kernel", SGLK_SUM),
    ("void vllm::moe::moe_sum_kernel<c10::BFloat16, (int)2>(T1 *, const T1 *, int)", "moe_sum_kernel", VLLM_MOE),
    ("void sglang::moeFinalizeKernel<float>(int, int, int, int, const __nv_bfloat16 *, const int *, const T1 *, "
     "const __nv_bfloat16 *, __nv_bfloat16 *)", "moeFinalizeKernel", SGL_MOE + "jit/csrc/moe/moe_finalize_fuse_shared.cu"),
    ("_pad_expert_counts_kernel", "_pad_expert_counts_kernel", SGL_MOE + "ops/moe/triton_pad_expert_counts.py"),
    # SGLang's MoE kernels exactly as this project's MoE captures recorded them
    ("void moe_align_block_size_kernel<int>(const T1 *, int *, int *, int *, int, int, unsigned long, int *, bool, "
     "bool, int, int)", "moe_align_block_size_kernel", MOE_CAPTURE),
    ("void count_and_sort_expert_tokens_kernel<int>(const T1 *, int *, int *, unsigned long, bool)",
     "count_and_sort_expert_tokens_kernel", MOE_CAPTURE),
    ("void moe_sum_reduce_kernel<c10::BFloat16, (int)8>(const T1 *, T1 *, long, long, long, long, long, "
     "at::OpMathType<T1>::type)", "moe_sum_reduce_kernel", MOE_CAPTURE),
    ("triton_per_fused_copy__mul_sum_0", "triton_per_fused_copy__mul_sum_0", MOE_CAPTURE_SMALL),
    # the activation between the expert GEMMs, with the tokens of no local expert filtered out (expert parallelism)
    ("void <unnamed>::act_and_mul_kernel<__nv_bfloat16, (<unnamed>::ActivationKind)0, (bool)1, (bool)1>"
     "(<unnamed>::ActivationParams)", None, SGL_ACT),
]

# Kernels that an MoE layer launches but whose names say nothing of MoE (every layer may launch them): they
# stay with the compute rules. (name, category, source)
NOT_MOE = [
    ("act_and_mul_kernel", "elementwise", SGL_MOE + "ops/moe/fused_moe_triton_kernels.py (also the dense MLP's)"),
    # the unfiltered activation, as the MoE capture recorded it: the dense draft head launches the same kernel
    ("void <unnamed>::act_and_mul_kernel<__nv_bfloat16, (<unnamed>::ActivationKind)0, (bool)1, (bool)0>"
     "(<unnamed>::ActivationParams)", "elementwise", MOE_CAPTURE),
    # Inductor kernels of other ops, from this project's tree-draft capture, stay what their ops say
    ("triton_poi_fused_mul_unsqueeze_view_0", "elementwise", "fixtures/sglang-dense-tree/run.sqlite"),
    ("_streaming_topk_kernel", "elementwise", SGL_MOE + "ops/moe/gate_topk.py (a generic top-k)"),
    # EAGLE's own draft top-k (this project's SGLang capture) is no MoE routing
    ("_draft_topk1_partial_argmax_kernel", "elementwise", "fixtures/sglang-k4/run.sqlite"),
]


# Kernels of these families that are not collectives, or whose name says nothing, and must not be taken
# for communication: (name, category, source); category None: any category but communication's (the
# compute rules decide).
NOT_COMMUNICATION = [
    # a norm in the namespace trtllm_allreduce, whose parameter is an AllReduceParams
    ("void flashinfer::trtllm_allreduce::reduce_fusion::rms_norm_kernel<__nv_bfloat16, (bool)0, (bool)1, (bool)1, "
     "(bool)0>(flashinfer::trtllm_allreduce::AllReduceParams<T1>)", "norm", FI + "trtllm_allreduce.cuh"),
    ("void flashinfer::trtllm_mnnvl_allreduce::rmsNormLamport<__nv_bfloat16, "
     "(flashinfer::trtllm_mnnvl_allreduce::QuantType)0, (bool)0, (int)1, float4>"
     "(flashinfer::trtllm_mnnvl_allreduce::AllReduceKernelParams<T1>)", None, FI + "trtllm_mnnvl_allreduce.cuh"),
    ("void flashinfer::trtllm_allreduce::lamport_initialize_kernel<__nv_bfloat16>(T1 *, unsigned long)", None,
     FI + "trtllm_allreduce.cuh"),
    # SGLang's custom all-reduce copies with this kernel too, but so could anything: ambiguous
    ("void <unnamed>::memcpy_kernel<(unsigned int)16>(void *, const void *, unsigned int)", "other", SGL_JIT_V2),
    # DeepEP's dispatch layout counts tokens on the local GPU
    ("void deep_ep::layout::get_dispatch_layout<(int)256, (int)32, (int)8>(const long *, int *, int *, int *, "
     "bool *, int, int, int, int)", "moe", DEEPEP),
    # a short name alone cannot tell DeepEP's or Mooncake's dispatch from any other
    ("dispatch", "other", DEEPEP),
    ("combine", "other", DEEPEP),
    # MoE kernels whose names mention a collective only in an argument type
    ("void tensorrt_llm::kernels::moe_alltoall::moeA2ASanitizeExpertIdsKernel(int *, const int *, int, int, int)",
     "moe", FI_A2A),
]


# Attention (compute): SGLang's Triton attention backend, whose kernels are named after the pass; FlashAttention's
# and FlashInfer's kernels; and FlashInfer's kernels of other ops, which the word `flash` must not make attention.
SGL_ATT = "sglang 0.5.16 (the PyPI wheel, staged for the captures): sglang/kernels/ops/attention/"
SGL_ATT_NEW = "sglang 0.5.23 (the PyPI wheel): sglang/kernels/ops/attention/"
SGL_CAPTURE = "fixtures/sglang-*/run.sqlite (SGLang 0.5.16, --attention-backend triton, flashinfer 0.6.14)"
FI_WHEEL = "flashinfer 0.6.14 (the PyPI wheel SGLang 0.5.16 was staged with): flashinfer/data/include/flashinfer/"
FA2 = "GindaChen/nsys-ai @ ab196ea2: tests/fixtures/mfu_2gpu_{before,after}.sqlite (shared/traces/nsys_sqlite)"
CUDNN = "fixtures/reference-k4/run.sqlite (torch SDPA on cuDNN, this project's reference engine)"

# (full name, short name or None, source). A Triton kernel is named by its Python function, full and short.
ATTENTION = [
    # decode: split-KV stage 1 (MHA, and grouped for GQA/MQA), and the merge of the splits
    ("_fwd_grouped_kernel_stage1", "_fwd_grouped_kernel_stage1", SGL_CAPTURE + "; " + SGL_ATT + "decode_attention.py"),
    ("_fwd_kernel_stage2", "_fwd_kernel_stage2", SGL_CAPTURE + "; " + SGL_ATT + "decode_attention.py"),
    ("_fwd_kernel_stage1", "_fwd_kernel_stage1", SGL_ATT + "decode_attention.py"),
    # extend (prefill, EAGLE verify and draft re-extend), and prefill_attention.py's kernel of the same name
    ("_fwd_kernel", "_fwd_kernel", SGL_CAPTURE + "; " + SGL_ATT + "{extend,prefill}_attention.py"),
    ("_fwd_kernel_unified", "_fwd_kernel_unified", SGL_ATT + "extend_attention.py"),
    ("_fwd_kernel_dense_prefill", "_fwd_kernel_dense_prefill", SGL_ATT_NEW + "extend_attention.py"),
    ("_lean_attention_decode_kernel", "_lean_attention_decode_kernel", SGL_ATT_NEW + "decode_attention.py"),
    # EAGLE verify's split-KV path (topk 1)
    ("_verify_prefix_stage1", "_verify_prefix_stage1", SGL_ATT + "verify_splitkv.py"),
    ("_verify_combine_stage2", "_verify_combine_stage2", SGL_ATT + "verify_splitkv.py"),
    ("merge_state_kernel", "merge_state_kernel", SGL_ATT + "merge_state.py"),
    # FlashAttention 2, and torch SDPA's cuDNN flash kernel, exactly as recorded
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, "
     "cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::bfloat16_t>>, (bool)0, "
     "(bool)0, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(flash::Flash_fwd_params)", None, FA2),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     None, CUDNN),
    # FlashInfer's attention kernels (abbreviated template lists), by their names alone too
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, ...>, "
     "flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>>(T2)",
     "BatchPrefillWithPagedKVCacheKernel", FI_WHEEL + "attention/prefill.cuh"),
    ("void flashinfer::SinglePrefillWithKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, ...>, "
     "flashinfer::SinglePrefillParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>>(T2)",
     "SinglePrefillWithKVCacheKernel", FI_WHEEL + "attention/prefill.cuh"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2, "
     "(unsigned int)4, (unsigned int)8, (unsigned int)16, (unsigned int)1, (unsigned int)4, "
     "flashinfer::DefaultAttention<(bool)0, (bool)0, (bool)0, (bool)0>, flashinfer::BatchDecodeParams<__nv_bfloat16, "
     "__nv_bfloat16, __nv_bfloat16, int>>(T9)", "BatchDecodeWithPagedKVCacheKernel",
     FI_WHEEL + "attention/decode.cuh"),
    ("void flashinfer::SingleDecodeWithKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2, "
     "(unsigned int)4, (unsigned int)8, (unsigned int)16, (unsigned int)1, (unsigned int)8, "
     "flashinfer::DefaultAttention<(bool)0, (bool)0, (bool)0, (bool)0>, flashinfer::SingleDecodeParams<__nv_bfloat16, "
     "__nv_bfloat16, __nv_bfloat16>>(T9)", "SingleDecodeWithKVCacheKernel", FI_WHEEL + "attention/decode.cuh"),
    ("void flashinfer::PrefillWithKVCacheKernel<...>(T2)", "PrefillWithKVCacheKernel",
     FI_WHEEL + "attention/hopper/prefill_sm90.cuh"),
    ("void flashinfer::MergeStatesKernel<(unsigned int)8, __nv_bfloat16, __nv_bfloat16>(T2 *, float *, T3 *, "
     "float *, unsigned int, unsigned int, unsigned int)", "MergeStatesKernel", FI_WHEEL + "attention/cascade.cuh"),
    ("void flashinfer::PersistentVariableLengthMergeStatesKernel<(unsigned int)8, (unsigned int)16, (unsigned int)8, "
     "(unsigned int)4, __nv_bfloat16, __nv_bfloat16, int>(T5 *, float *, T7 *, T6 *, float *, unsigned int, "
     "unsigned int *, unsigned int, unsigned int)", "PersistentVariableLengthMergeStatesKernel",
     FI_WHEEL + "attention/cascade.cuh"),
    ("void flashinfer::mla::BatchMLAPagedAttentionKernel<...>(flashinfer::MLAParams<__nv_bfloat16, __nv_bfloat16, "
     "__nv_bfloat16, int>)", "BatchMLAPagedAttentionKernel", FI_WHEEL + "attention/mla.cuh"),
    ("void flashinfer::BatchPODWithKVCacheTensorKernel<...>(T3, T4, int *)", "BatchPODWithKVCacheTensorKernel",
     FI_WHEEL + "attention/batch_pod.cuh"),
]

# Kernels that the attention rules once took, or could take, by a word of their names: (name, category, source)
NOT_ATTENTION = [
    # FlashInfer's RMSNorm, exactly as the SGLang captures recorded them, and their short names
    ("void flashinfer::norm::FusedAddRMSNormKernel<(unsigned int)8, __nv_bfloat16>(T2 *, T2 *, T2 *, unsigned int, "
     "unsigned int, unsigned int, float, float)", "norm", SGL_CAPTURE),
    ("FusedAddRMSNormKernel", "norm", SGL_CAPTURE),
    ("void flashinfer::norm::RMSNormKernel<(unsigned int)8, __nv_bfloat16>(T2 *, T2 *, T2 *, unsigned int, "
     "unsigned int, unsigned int, float, float)", "norm", SGL_CAPTURE),
    ("RMSNormKernel", "norm", SGL_CAPTURE),
    ("void flashinfer::norm::QKRMSNormKernel<(unsigned int)8, __nv_bfloat16>(T2 *, T2 *, T2 *, unsigned int, "
     "unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, float, float)", "norm",
     FI_WHEEL + "norm.cuh"),
    ("void flashinfer::norm::FusedAddRMSNormQuantKernel<(unsigned int)8, __nv_bfloat16, __nv_fp8_e4m3>(...)", "norm",
     FI_WHEEL + "norm.cuh"),
    # FlashInfer's activation, rope and sampling (its *Renorm* kernels renormalise probabilities: no norm)
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(T1 *, const T1 *, int)", "elementwise",
     FI_WHEEL + "activation.cuh"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<(bool)0, (unsigned int)128, (unsigned int)8, "
     "(unsigned int)16, __nv_bfloat16, long>(T5 *, T5 *, T5 *, T5 *, float *, T6 *, unsigned int, unsigned int, "
     "unsigned int, unsigned int, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, "
     "unsigned long, unsigned long, unsigned long)", "elementwise", FI_WHEEL + "pos_enc.cuh"),
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<(unsigned int)1024, (cub::BlockScanAlgorithm)2, "
     "(cub::BlockReduceAlgorithm)2, (unsigned int)4, (bool)1, float, int>(T6 *, T7 *, float *, T7 *, bool *, T7 *, "
     "T7, float, unsigned int, unsigned long *, unsigned long, unsigned long *, unsigned long)", "elementwise",
     FI_WHEEL + "sampling.cuh"),
    ("void flashinfer::sampling::TopPRenormProbKernel<(unsigned int)1024, (cub::BlockReduceAlgorithm)2, "
     "(unsigned int)4, float>(T4 *, T4 *, float *, float, unsigned int)", "elementwise", FI_WHEEL + "sampling.cuh"),
    ("void flashinfer::sampling::air_top_p::AirTopPRenormRadixKernel<float, int, (int)11, (int)512>(...)",
     "elementwise", FI_WHEEL + "air_top_p.cuh"),
    # SGLang's KV-cache index builder (for FlashInfer's paged layout; the Triton backend uses it too), like its
    # siblings assign_req_to_token_pool and generate_draft_decode_kv_indices: no attention
    ("create_flashinfer_kv_indices_triton", "other", SGL_CAPTURE + "; sglang 0.5.16 kernels/ops/kvcache/kv_indices.py"),
    # SGLang's EP MoE kernels share the Triton attention kernels' prefix
    ("_fwd_kernel_ep_scatter_1", "elementwise", "sglang 0.5.16 (the PyPI wheel): sglang/kernels/ops/moe/ep_moe_kernels.py"),
    ("_fwd_kernel_ep_gather", "elementwise", "sglang 0.5.16 (the PyPI wheel): sglang/kernels/ops/moe/ep_moe_kernels.py"),
]


def category_of(*names: str) -> list[str]:
    ops = pl.DataFrame({"name": list(names), "kind": ["kernel"] * len(names)}).with_columns(
        pl.col("name").cast(pl.Categorical), pl.col("kind").cast(pl.Categorical))
    return categorize(ops, RULES)["category"].cast(pl.Utf8).to_list()


@pytest.mark.parametrize("name,short,category,source", CASES, ids=[c[0][:60] for c in CASES])
def test_every_family_on_its_real_kernel_names(name, short, category, source):
    assert category_of(name) == [category], source
    if short is not None:
        assert category_of(short) == [category], source


@pytest.mark.parametrize("name,category,source", NOT_COMMUNICATION, ids=[c[0][:60] for c in NOT_COMMUNICATION])
def test_kernels_that_are_not_collectives_stay_out(name, category, source):
    got = category_of(name)[0]
    assert got not in kinds_of(COMMUNICATION) and (category is None or got == category), source


# (category, full name, short name or None, source)
NAMED = [("moe", *c) for c in MOE] + [("attention", *c) for c in ATTENTION]


@pytest.mark.parametrize("category,name,short,source", NAMED, ids=[f"{c[0]}:{c[1][:60]}" for c in NAMED])
def test_moe_and_attention_kernels_on_their_real_names(category, name, short, source):
    assert category_of(name) == [category], source
    if short is not None:
        assert category_of(short) == [category], source


@pytest.mark.parametrize("name,category,source", NOT_MOE + NOT_ATTENTION,
                         ids=[c[0][:60] for c in NOT_MOE + NOT_ATTENTION])
def test_kernels_that_say_nothing_of_moe_or_attention_stay_out(name, category, source):
    assert category_of(name) == [category], source


def test_moe_is_a_compute_category_of_its_own():
    tree = categories.default_parents()
    assert "moe" not in tree and "moe" not in kinds_of(COMMUNICATION, tree)


def test_the_kinds_are_children_of_communication():
    assert categories.default_parents() == {k: COMMUNICATION for k in KINDS}
    assert set(kinds_of(COMMUNICATION)) == KINDS | {COMMUNICATION} and kinds_of(COMMUNICATION)[0] == COMMUNICATION
    assert {c for _, _, c, _ in CASES} == KINDS | {COMMUNICATION}  # every kind is tested on real names


@pytest.fixture(scope="module")
def capture_names() -> dict[str, list[str]]:
    """The distinct kernel names of each real capture: this project's (fixtures/), and the shared third-party nsys
    exports and Kineto traces where they are present; keyed by the capture's path."""
    from specprof.analyzer.readers.kineto import read_kineto

    paths = sorted(FIXTURES.glob("*/run.sqlite")) + sorted(FIXTURES.glob("*/*.json.gz"))
    if SHARED:
        paths += sorted((SHARED / "nsys_sqlite").glob("*.sqlite")) + sorted((SHARED / "torch_kineto").glob("*.json.gz"))
    out = {}
    for p in paths:
        trace = read_kineto(str(p)) if p.name.endswith(".json.gz") else load_trace(str(p))
        out[str(p)] = trace.ops.filter(pl.col("kind") == "kernel")["name"].cast(pl.Utf8).unique().sort().to_list()
    return out


def test_on_every_real_capture_only_nccl_kernels_are_communication(capture_names):
    # The shared third-party traces and this project's captures (the reference engine's and SGLang's): thousands
    # of compute kernels (cuBLAS, CUTLASS, cuDNN, ATen, Triton...), none of which may be taken for a collective;
    # their collectives are NCCL's.
    kinds = set(kinds_of(COMMUNICATION))
    names = sorted({n for p, ns in capture_names.items() if "-moe-" not in Path(p).parent.name for n in ns})
    assert len(names) > 100
    got = dict(zip(names, category_of(*names)))
    comm = {n for n, c in got.items() if c in kinds}
    assert comm == {n for n in names if n.startswith("nccl")} and comm
    # and every one of them but the MoE captures' is a dense model's: none is MoE
    assert not [n for n, c in got.items() if c == "moe"]


# The category of every distinct kernel name of the real captures (measured with these rules): this project's
# captures by function name for the categories a name can fall in by accident, and by count for all, the shared
# traces by count. A rule change that moves a kernel of any capture shows here.
FIXTURE_ATTENTION = {"_fwd_kernel", "_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2",  # SGLang's Triton backend
                     "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_"
                     "kernel0_0",  # torch SDPA on cuDNN (the reference engine)
                     "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_"
                     "kernel0_0"}
FIXTURE_NORM = {"flashinfer::norm::FusedAddRMSNormKernel", "flashinfer::norm::RMSNormKernel",
                "<unnamed>::fused_qknorm_warp", "at::native::<unnamed>::vectorized_layer_norm_kernel",
                "at::native::(anonymous namespace)::vectorized_layer_norm_kernel"}
# SGLang's bookkeeping: KV-cache locations and indices, positions, the attention backend's split count, EAGLE's tree
FIXTURE_OTHER = {"assign_draft_cache_locs_contiguous", "assign_extend_cache_locs", "assign_req_to_token_pool",
                 "build_tree_efficient", "compute_position_kernel", "create_flashinfer_kv_indices_triton",
                 "generate_draft_decode_kv_indices", "get_num_kv_splits_triton", "<unnamed>::clamp_position_kernel",
                 "<unnamed>::store_kvcache", "VerifyTreeGreedy", "write_req_to_token_pool_triton"}
FIXTURE_COUNTS = {"gemm": 139, "elementwise": 110, "other": 13, "norm": 5, "attention": 5, "moe": 8, "allreduce": 1}
SHARED_COUNTS = {"elementwise": 221, "gemm": 169, "other": 62, "norm": 5, "attention": 1, "p2p": 3, "allreduce": 2,
                 COMMUNICATION: 1}


def test_the_category_of_every_kernel_of_the_real_captures(capture_names):
    def categorized(ours: bool) -> dict[str, str]:
        names = sorted({n for p, ns in capture_names.items() if p.startswith(str(FIXTURES)) == ours for n in ns})
        return dict(zip(names, category_of(*names)))

    def functions(got: dict[str, str], category: str) -> set[str]:
        names = pl.DataFrame({"n": [n for n, c in got.items() if c == category]}, schema={"n": pl.Utf8})
        return set(names.select(function_name(pl.col("n")))["n"])

    from collections import Counter

    ours = categorized(True)
    assert dict(Counter(ours.values())) == FIXTURE_COUNTS
    assert functions(ours, "attention") == FIXTURE_ATTENTION
    assert functions(ours, "norm") == FIXTURE_NORM
    assert functions(ours, "other") == FIXTURE_OTHER
    # FlashInfer's kernels in the SGLang captures are its RMSNorms: no attention (the word `flash` is not FlashInfer)
    assert {c for n, c in ours.items() if "flashinfer" in n.lower()} == {"norm", "other"}
    if SHARED:
        shared = categorized(False)
        assert dict(Counter(shared.values())) == SHARED_COUNTS
        assert functions(shared, "attention") == {"flash::flash_fwd_kernel"}  # FlashAttention 2 (nsys-ai's captures)


def test_function_names():
    f = pl.DataFrame({"n": [
        "void deep_ep::intranode::dispatch<(int)8, (int)768>(int4 *, float *)",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        "void <unnamed>::all_reduce_kernel<<unnamed>::AllReducePullImpl<float>, (int)1>(<unnamed>::AllReduceParams)",
        "void (anonymous namespace)::two_shot_all_reduce_kernel<float, 16>(float**)",
        "triton_poi_fused_add_0", "", None,
    ]}).select(function_name(pl.col("n").fill_null("")))["n"].to_list()
    assert f == ["deep_ep::intranode::dispatch", "ncclDevKernel_SendRecv", "<unnamed>::all_reduce_kernel",
                 "(anonymous namespace)::two_shot_all_reduce_kernel", "triton_poi_fused_add_0", "", ""]


def test_names_are_data_whatever_they_hold():
    # Synthetic (kernel names are untrusted input): unbalanced brackets, regex syntax, control characters
    # and a very long name are matched as text and get a category like any other.
    odd = ["void <<<((( all_reduce", ")(*&^%$#@!", "all_reduce\x00\n\t<", "(.*)+$" * 50, "x" * 100_000,
           "void (anonymous namespace)::ncclDevKernel_AllReduce<"]
    assert category_of(*odd) == ["other", "other", "allreduce", "other", "other", "allreduce"]


def test_a_rules_file_with_parents(tmp_path):
    mine = tmp_path / "mine.toml"
    mine.write_text('[[rule]]\ncategory = "expert_all_to_all"\nparent = "communication"\nmatch = "function"\n'
                    "pattern = '^my_ep::'\n")
    rules = categories.load_rules(str(mine))
    assert categories.parents(rules)["expert_all_to_all"] == COMMUNICATION
    assert "expert_all_to_all" in kinds_of(COMMUNICATION, categories.parents(rules))
    ops = pl.DataFrame({"name": ["void my_ep::go<(int)1>(int)"], "kind": ["kernel"]}).cast(pl.Categorical)
    assert categorize(ops, rules)["category"].cast(pl.Utf8).to_list() == ["expert_all_to_all"]
    for body, says in [
        ('category = "allreduce"\nparent = "network"\npattern = "x"', "two parents"),
        ('category = "allreduce"\nmatch = "symbol"\npattern = "x"', "`match` must be"),
        ('category = "allreduce"\nparent = "allreduce"\npattern = "x"', "another category"),
        ('category = "sub"\nparent = "allreduce"\npattern = "x"', "one level"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text("[[rule]]\n" + body + "\n")
        with pytest.raises(SpecprofError, match=says):
            categories.load_rules(str(bad))


def test_the_graph_level_capture_says_what_its_graphs_are():
    # fixtures/reference-k4-graph was captured with --cuda-graph-trace=graph: each graph launch is one op.
    a = attribute(load_trace(str(FIXTURES / "reference-k4-graph")))
    graphs = a.ops.filter(pl.col("kind") == "graph")
    assert graphs.height == 60 and set(graphs["category"].cast(pl.Utf8)) == {"cuda_graph"}
    verify = a.categories.filter(pl.col("phase") == "verify")
    share = verify.filter(pl.col("category") == "cuda_graph")["ns"].sum() / verify["ns"].sum()
    assert round(100 * share, 1) == 93.1 and "other" not in set(verify["category"])
    note = next(n for n in a.notes if "CUDA-graph launches" in n)
    assert "60 ops" in note and "--cuda-graph-trace=node" in note and "cuda_graph" in note
    # the node-level captures have no graph ops, and no such note
    assert not any("CUDA-graph launches" in n for n in attribute(load_trace(str(FIXTURES / "reference-k4"))).notes)


def test_the_tensor_parallel_capture_shows_allreduce_per_phase_and_rank():
    out = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4-tp2"), "--no-cache", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["schema"] == "specprof.analysis/3"
    assert doc["category_parents"] == {k: COMMUNICATION for k in sorted(KINDS)}
    phases = {p["name"]: p["categories"] for p in doc["phases"]}
    assert not any(COMMUNICATION in c for c in phases.values())  # every collective here has its kind
    ranks = {r["rank"]: r for r in doc["ranks"]}
    per_phase = {r: {p["name"]: p["categories"]["allreduce"] for p in ranks[r]["phases"]
                     if "allreduce" in p["categories"]} for r in ranks}
    assert per_phase == {0: {"draft": 389.543661, "verify": 81.05612, "prefill": 39.401693, "draft_extend": 2.06534},
                         1: {"draft": 6.27885, "verify": 15.721963, "prefill": 0.541697, "draft_extend": 2.296481}}
    # the top level is one rank's (the headline rank's: docs/attribution.md), never the two ranks summed
    assert {ph: c["allreduce"] for ph, c in phases.items() if "allreduce" in c} == per_phase[doc["shown"]["rank"]]
    for r, (ms, wait, transfer) in {0: (512.066814, 489.037742, 23.029072), 1: (24.838991, 1.9008, 22.938191)}.items():
        comm = ranks[r]["communication"]
        assert comm["by_kind"] == {"allreduce": {"ms": ms, "wait_ms": wait, "transfer_ms": transfer,
                                                 "unmatched_ms": 0.0}}
        assert (comm["ms"], comm["wait_ms"], comm["transfer_ms"]) == (ms, wait, transfer)
    assert [c["kind"] for c in doc["rank_skew"]["collectives"]] == ["allreduce"]
    text = CliRunner().invoke(main, ["analyze", str(FIXTURES / "reference-k4-tp2"), "--no-cache"]).output
    assert "Communication per rank and kind" in text
    assert "allreduce 8.0%" in text  # among the verify's top busy categories, on the headline rank (1)


def _shipped_nccl() -> str | None:
    """libnccl.so.2 of the nvidia-nccl wheel that torch depends on, where this environment has it."""
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        lib = pathlib.Path(root) / "nccl" / "lib" / "libnccl.so.2"
        if lib.is_file():
            return str(lib)
    return None


def test_every_kernel_of_the_shipped_nccl():
    # The kernels the NCCL library of this environment holds (the nvidia-nccl wheel torch installs: 2.30 here),
    # read from their mangled symbols `_Z<length><name>`: each is the kind its <Coll> field names
    # (src/device/generate.py and src/device/symmetric/generate.py), with and without the parameter list.
    import re

    lib = _shipped_nccl()
    if lib is None:
        pytest.skip("no nvidia-nccl wheel in this environment")
    with open(lib, "rb") as fh:
        data = fh.read()
    names = set()
    for m in re.finditer(rb"_Z(\d+)(nccl(?:Symk|Sym)?DevKernel_)", data):
        n = int(m.group(1))
        names.add(data[m.start(2):m.start(2) + n].decode())
    colls = {n.split("_")[1] for n in names}
    assert {"AllReduce", "AllGather", "AllGatherV", "ReduceScatter", "SendRecv", "Broadcast", "Reduce",
            "Generic"} <= colls and any(n.startswith("ncclSymkDevKernel_") for n in names)
    kind = {"AllReduce": "allreduce", "ReduceScatter": "reduce_scatter", "AllGather": "allgather",
            "AllGatherV": "allgather", "SendRecv": "p2p", "Broadcast": COMMUNICATION, "Reduce": COMMUNICATION,
            "Generic": COMMUNICATION}
    names = sorted(names)
    expected = [kind[n.split("_")[1]] for n in names]
    assert category_of(*names) == expected
    assert category_of(*(n + NCCL_ARGS for n in names)) == expected


def test_the_report_draws_communication_by_kind_in_reds_after_the_compute():
    import dataclasses

    from specprof.analyzer.render import html

    a = analyse(attribute(load_trace(str(FIXTURES / "reference-k4-tp2"))))
    cats = [(c["name"], c["color"], c["idle"]) for c in html.view_model(a)["categories"]]
    names = [n for n, _, _ in cats]
    assert ("allreduce", "#D62728", False) in cats
    busy = [n for n, _, idle in cats if not idle]
    assert busy[-1] == "allreduce" and names.index("allreduce") < names.index("cpu_wait")
    # Synthetic (no capture holds several kinds): the kinds are drawn side by side, each in its own red, a
    # kind of the user's own rules in a further red.
    extra = pl.DataFrame({"phase": ["verify"] * 3, "category": ["all_to_all", "allgather", "my_a2a"],
                          "ns": [5_000_000, 50_000_000, 1_000_000]})
    # (with several ranks the report draws the headline rank's categories: each rank gets the synthetic rows)
    per_pair = a.attribution.pairs.select("pid", "device").join(extra, how="cross")
    b = analyse(dataclasses.replace(a.attribution,
                                     categories=pl.concat([a.categories, extra.cast(a.categories.schema)]),
                                     pair_categories=pl.concat([a.attribution.pair_categories,
                                                                per_pair.cast(a.attribution.pair_categories.schema)]),
                                     category_parents={**a.category_parents, "my_a2a": COMMUNICATION}))
    cats = [(c["name"], c["color"]) for c in html.view_model(b)["categories"] if not c["idle"]]
    kinds = [n for n, _ in cats][-4:]
    assert set(kinds) == {"allreduce", "all_to_all", "allgather", "my_a2a"}
    colours = dict(cats)
    assert colours["all_to_all"] == "#E6550D" and colours["allgather"] == "#FB6A4A"
    assert colours["my_a2a"] in html.OTHER_COMMUNICATION_COLORS
