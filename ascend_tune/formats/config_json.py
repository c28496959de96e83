"""config.json's contract between the experiment= feature that writes it and compare-config that reads it (also
from another engine's files, msprobe's config_check pack): its version, the libraries whose versions it records,
the environment variables whose values it records (an allow-list: nothing else of the environment is ever read,
so no token, key or path)."""

FORMAT = 1  # config.json's version

LIBRARIES = ("torch", "torch_npu", "numpy", "transformers", "accelerate", "lightning", "pytorch_lightning",
             "deepspeed", "mindstudio-probe")
MODULES = {"mindstudio-probe": "msprobe"}  # a library whose module has another name
VARIABLES = (
    # determinism and collectives, each with its counterpart on the other device (analysis/experiment/compare.py)
    "CUBLAS_WORKSPACE_CONFIG", "NCCL_DETERMINISTIC", "HCCL_DETERMINISTIC", "CUDA_LAUNCH_BLOCKING",
    "ASCEND_LAUNCH_BLOCKING", "NCCL_ALGO", "HCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
    "HCCL_INTRA_PCIE_ENABLE", "HCCL_INTRA_ROCE_ENABLE", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF",
    "TORCH_CUDNN_V8_API_ENABLED", "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA",
    "PYTHONHASHSEED", "TASK_QUEUE_ENABLE", "INF_NAN_MODE_ENABLE", "COMBINED_ENABLE", "ACL_OP_COMPILER_CACHE_MODE",
)
"""The environment variables config.json records the values of (the only ones it reads)."""
