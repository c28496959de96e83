"""What counts as an API call in a dump, and the name msprobe gives it.

``TorchFunctionMode`` sees every torch function call, property getters and metadata queries included
(``Tensor.shape.__get__``, ``dim``, ``requires_grad``...). Only the calls listed here are dumped. The lists follow
msprobe's ``support_wrap_ops.yaml`` (functional, tensor, torch, distributed, ``_VF``) so both tools name the same
calls the same way, minus the entries that only read metadata or hand a value to Python (``__bool__``, ``stride``,
``numpy``, ``q_zero_point``) and the ones this torch lacks.

Names come from a reverse map built once: function object -> (prefix, name), searched in the order Functional,
Tensor, VF, Torch, Distributed, so ``torch.conv2d`` (the same object as ``F.conv2d``) is ``Functional.conv2d`` as
``nn.Conv2d`` calls it. Operators reach the mode as plain methods (``x + 1`` arrives as ``Tensor.add``); the
caller's bytecode tells them apart so they get msprobe's ``Tensor.__add__``. A reflected operator on a Python
scalar (``2 * x``) cannot be told from ``x * 2`` and is named ``Tensor.__mul__`` where msprobe says ``__rmul__``.
"""

from __future__ import annotations

import dis
from types import FrameType
from typing import Any, Optional

import torch

_FUNCTIONAL = """
conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc avg_pool1d avg_pool2d
avg_pool3d fractional_max_pool2d_with_indices fractional_max_pool2d fractional_max_pool3d_with_indices
fractional_max_pool3d max_pool1d_with_indices max_pool1d max_pool2d_with_indices max_pool2d
max_pool3d_with_indices max_pool3d max_unpool1d max_unpool2d max_unpool3d lp_pool2d lp_pool1d
adaptive_max_pool1d_with_indices adaptive_max_pool1d adaptive_max_pool2d_with_indices adaptive_max_pool2d
adaptive_max_pool3d_with_indices adaptive_max_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d
dropout alpha_dropout dropout2d dropout3d feature_alpha_dropout threshold threshold_ relu relu_ glu hardtanh
hardtanh_ relu6 elu elu_ selu selu_ celu celu_ leaky_relu leaky_relu_ prelu rrelu rrelu_ logsigmoid gelu
hardshrink tanhshrink softsign softplus softmin softmax gumbel_softmax log_softmax softshrink tanh sigmoid
hardsigmoid linear bilinear silu hardswish embedding embedding_bag batch_norm instance_norm layer_norm
group_norm local_response_norm ctc_loss nll_loss poisson_nll_loss gaussian_nll_loss kl_div cross_entropy
binary_cross_entropy binary_cross_entropy_with_logits smooth_l1_loss l1_loss mse_loss margin_ranking_loss
hinge_embedding_loss multilabel_margin_loss soft_margin_loss multilabel_soft_margin_loss cosine_embedding_loss
multi_margin_loss pixel_shuffle pixel_unshuffle channel_shuffle upsample interpolate upsample_nearest
upsample_bilinear grid_sample affine_grid pad pairwise_distance pdist cosine_similarity one_hot
triplet_margin_loss triplet_margin_with_distance_loss normalize unfold fold multi_head_attention_forward
scaled_dot_product_attention lp_pool3d dropout1d mish huber_loss
"""

_TENSOR = """
__add__ __and__ __div__ __eq__ __floordiv__ __ge__ __gt__ __iadd__ __iand__ __idiv__ __ifloordiv__ __ilshift__
__imod__ __imul__ __ior__ __ipow__ __irshift__ __isub__ __ixor__ __le__ __lshift__ __lt__ __matmul__ __mod__
__mul__ __ne__ __or__ __pow__ __radd__ __rdiv__ __rmod__ __rmul__ __ror__ __rpow__ __rshift__ __rsub__ __rxor__
__setitem__ __sub__ __truediv__ __xor__ abs abs_ absolute absolute_ acos acos_ acosh acosh_ add add_ addbmm
addbmm_ addcdiv addcdiv_ addcmul addcmul_ addmm addmm_ addmv addmv_ addr addr_ adjoint all allclose amax amin
aminmax angle any arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan2 arctan2_
arctan_ arctanh arctanh_ argmax argmin argsort argwhere asin asin_ asinh asinh_ atan atan2 atan2_ atan_ atanh
atanh_ baddbmm baddbmm_ bernoulli bernoulli_ bfloat16 bincount bitwise_and bitwise_and_ bitwise_left_shift
bitwise_left_shift_ bitwise_not bitwise_not_ bitwise_or bitwise_or_ bitwise_right_shift bitwise_right_shift_
bitwise_xor bitwise_xor_ bmm bool broadcast_to byte cauchy_ ceil ceil_ cfloat char cholesky cholesky_inverse
cholesky_solve chunk clamp clamp_ clamp_max clamp_max_ clamp_min clamp_min_ clip clip_ conj_physical copysign
copysign_ corrcoef cos cos_ cosh cosh_ count_nonzero cov cummax cummin cumprod cumprod_ cumsum cumsum_ deg2rad
deg2rad_ det diag diag_embed diagflat diagonal diagonal_scatter diff digamma digamma_ dist div div_ divide
divide_ dot double dsplit eig eq eq_ equal erf erf_ erfc erfc_ erfinv erfinv_ exp exp2 exp2_ exp_ expand
expand_as expm1 expm1_ exponential_ fill_ fill_diagonal_ fix fix_ flatten flip fliplr flipud float float_power
float_power_ floor floor_ floor_divide floor_divide_ fmax fmin fmod fmod_ frac frac_ frexp gather gcd gcd_ ge
ge_ geometric_ geqrf ger greater greater_ greater_equal greater_equal_ gt gt_ half hardshrink heaviside
heaviside_ histc histogram hsplit hypot hypot_ i0 i0_ igamma igamma_ igammac igammac_ index_add index_add_
index_copy index_copy_ index_fill index_fill_ index_put index_put_ index_select inner int inverse isclose
isfinite isinf isnan isneginf isposinf isreal kron kthvalue lcm lcm_ ldexp ldexp_ le le_ lerp lerp_ less less_
less_equal less_equal_ lgamma lgamma_ log log10 log10_ log1p log1p_ log2 log2_ log_ log_normal_ log_softmax
logaddexp logaddexp2 logcumsumexp logdet logical_and logical_and_ logical_not logical_not_ logical_or
logical_or_ logical_xor logical_xor_ logit logit_ logsumexp long lstsq lt lt_ lu lu_solve map2_ map_ masked_fill
masked_fill_ masked_scatter masked_scatter_ masked_select matmul matrix_exp matrix_power max maximum mean median
min minimum mm mode moveaxis movedim msort mul mul_ multinomial multiply multiply_ mv mvlgamma mvlgamma_
nan_to_num nan_to_num_ nanmean nanmedian nanquantile nansum narrow narrow_copy ne ne_ neg neg_ negative
negative_ nextafter nextafter_ nonzero norm normal_ not_equal not_equal_ orgqr ormqr outer permute pinverse
polygamma polygamma_ pow pow_ prelu prod put_ qr quantile rad2deg rad2deg_ ravel reciprocal reciprocal_ relu
relu_ remainder remainder_ renorm renorm_ repeat repeat_interleave reshape reshape_as resize_ resize_as_
resolve_neg roll rot90 round round_ rsqrt rsqrt_ scatter scatter_ scatter_add scatter_add_ select sgn sgn_ short
sigmoid sigmoid_ sign sign_ signbit sin sin_ sinc sinc_ sinh sinh_ slice_scatter slogdet smm softmax solve sort
split split_with_sizes sqrt sqrt_ square square_ squeeze squeeze_ sspaddmm std stft sub sub_ subtract sum
sum_to_size svd swapaxes swapdims swapdims_ symeig t t_ take take_along_dim tan tan_ tanh tanh_ tensor_split
tile to topk transpose transpose_ triangular_solve tril tril_ triu triu_ true_divide true_divide_ trunc trunc_
type_as unbind unflatten unfold unique unique_consecutive unsafe_chunk unsafe_split unsafe_split_with_sizes
unsqueeze unsqueeze_ var vdot view_as vsplit where xlogy xlogy_
"""

_TORCH = """
linalg.norm linalg.vector_norm linalg.matrix_norm linalg.diagonal linalg.det linalg.slogdet linalg.cond
linalg.matrix_rank linalg.qr linalg.lu linalg.lu_factor linalg.svd linalg.svdvals linalg.solve linalg.lstsq
linalg.inv linalg.pinv linalg.matrix_exp linalg.matrix_power linalg.cross linalg.matmul linalg.vecdot
linalg.multi_dot linalg.householder_product linalg.tensorsolve linalg.vander linalg.cholesky_ex linalg.inv_ex
linalg.solve_ex linalg.lu_factor_ex linalg.ldl_factor linalg.ldl_factor_ex _adaptive_avg_pool2d _add_relu
_add_relu_ _aminmax _batch_norm_impl_index _convolution _foreach_norm _fused_adamw_ _softmax_backward_data abs
abs_ absolute acos acos_ acosh acosh_ adaptive_avg_pool1d adaptive_max_pool1d add addbmm addcdiv addcmul addmm
addmv addmv_ addr affine_grid_generator all alpha_dropout alpha_dropout_ amax amin aminmax angle any arange
arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan2 arctan_ arctanh arctanh_ argmax
argmin argsort argwhere asin asin_ asinh asinh_ atan atan2 atan_ atanh atanh_ atleast_1d atleast_2d atleast_3d
avg_pool1d baddbmm bartlett_window batch_norm_backward_elemt batch_norm_backward_reduce batch_norm_elemt
batch_norm_gather_stats batch_norm_gather_stats_with_counts batch_norm_stats batch_norm_update_stats bernoulli
bilinear binary_cross_entropy_with_logits bincount binomial bitwise_and bitwise_not bitwise_or bitwise_xor
blackman_window block_diag bmm broadcast_tensors broadcast_to bucketize cartesian_prod cat cdist ceil ceil_ celu
celu_ chain_matmul channel_shuffle cholesky cholesky_inverse cholesky_solve choose_qparams_optimized chunk clamp
clamp_ clamp_max clamp_max_ clamp_min clamp_min_ clip clip_ clone column_stack combinations concat concatenate
constant_pad_nd conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d convolution
copysign cos cos_ cosh cosh_ cosine_embedding_loss cosine_similarity count_nonzero cov cross ctc_loss cummax
cummin cumprod cumsum cumulative_trapezoid deg2rad deg2rad_ det diag diag_embed diagflat diagonal
diagonal_scatter diff digamma dist div divide dot dropout dropout_ dsmm dsplit dstack eig einsum embedding
embedding_bag embedding_renorm_ eq equal erf erf_ erfc erfc_ erfinv exp exp2 exp2_ exp_ expm1 expm1_ eye
feature_alpha_dropout feature_alpha_dropout_ feature_dropout feature_dropout_ fill_ fix fix_ flatten flip fliplr
flipud float_power floor floor_ floor_divide fmax fmin fmod frac frac_ frexp frobenius_norm full full_like
gather gcd gcd_ ge geqrf ger greater greater_equal grid_sampler grid_sampler_2d grid_sampler_3d group_norm gru
gru_cell gt hamming_window hann_window hardshrink heaviside hinge_embedding_loss histc histogram histogramdd
hsmm hsplit hspmm hstack hypot i0 i0_ igamma igammac index_add index_copy index_fill index_put index_put_
index_select inner instance_norm inverse isclose isfinite isin isinf isnan isneginf isposinf istft kaiser_window
kl_div kron kthvalue layer_norm lcm lcm_ ldexp ldexp_ le lerp less less_equal lgamma linspace log log10 log10_
log1p log1p_ log2 log2_ log_ log_softmax logaddexp logaddexp2 logcumsumexp logdet logical_and logical_not
logical_or logical_xor logit logit_ logspace logsumexp lstm lstm_cell lstsq lt lu_solve lu_unpack
margin_ranking_loss masked_fill masked_scatter masked_select matmul matrix_exp matrix_power matrix_rank max
max_pool1d max_pool1d_with_indices max_pool2d max_pool3d maximum mean median min minimum mm mode moveaxis
movedim msort mul multinomial multiply mv mvlgamma nan_to_num nan_to_num_ nanmean nanmedian nanquantile nansum
narrow narrow_copy native_batch_norm native_group_norm native_layer_norm native_norm ne neg neg_ negative
negative_ nextafter nonzero norm norm_except_dim normal not_equal nuclear_norm outer pairwise_distance pdist
permute pinverse pixel_shuffle pixel_unshuffle poisson poisson_nll_loss polar polygamma pow prelu prod qr
quantile rad2deg rad2deg_ range ravel real reciprocal reciprocal_ relu relu_ remainder renorm repeat_interleave
reshape resize_as_ resolve_neg roll rot90 round round_ row_stack rrelu rrelu_ rsqrt rsqrt_ rsub saddmm
scalar_tensor scatter scatter_add searchsorted select selu selu_ sgn sigmoid sigmoid_ sign signbit sin sin_ sinc
sinc_ sinh sinh_ slogdet smm softmax solve sort sparse_coo_tensor split split_with_sizes spmm sqrt sqrt_ square
square_ squeeze sspaddmm stack std std_mean stft sub subtract sum svd swapaxes swapdims symeig t take
take_along_dim tan tan_ tanh tanh_ tensor_split tensordot threshold threshold_ tile topk transpose trapz
triangular_solve tril tril_indices triplet_margin_loss triu triu_indices true_divide trunc trunc_ unbind
unflatten unique_consecutive unsafe_chunk unsafe_split unsafe_split_with_sizes unsqueeze vander var var_mean
vdot vsplit vstack where xlogy xlogy_
"""

_DISTRIBUTED = """
send recv broadcast all_reduce reduce all_gather gather isend irecv scatter reduce_scatter _reduce_scatter_base
_all_gather_base all_to_all_single all_to_all all_gather_into_tensor reduce_scatter_tensor batch_isend_irecv
"""

_VF = "lstm"

_table: Optional[dict] = None


def api_table() -> dict:
    """Function object -> ``(prefix, name)`` for every listed API this torch has; built on first use."""
    global _table
    if _table is None:
        _table = _build_table()
    return _table


def listed_apis() -> list:
    """``(prefix, name, function)`` for every listed API this torch has, in the catalog's search order."""
    sources = [
        ("Functional", torch.nn.functional, _FUNCTIONAL),
        ("Tensor", torch.Tensor, _TENSOR),
        ("VF", torch._VF, _VF),
        ("Torch", torch, _TORCH),
    ]
    if torch.distributed.is_available():
        sources.append(("Distributed", torch.distributed, _DISTRIBUTED))
    found = []
    for prefix, namespace, names in sources:
        for name in names.split():
            func = _lookup(namespace, name)
            if func is not None:
                found.append((prefix, name, func))
    return found


def collectives_unseen() -> Optional[str]:
    """Why torch function modes do not see this torch's collectives (None when they do): torch.distributed routes
    them through ``__torch_function__`` from torch 2.7 (all_reduce, broadcast, ...), msprobe patches them instead."""
    c10d = getattr(torch.distributed, "distributed_c10d", None) if torch.distributed.is_available() else None
    if c10d is not None and "handle_torch_function" not in vars(c10d):
        return (f"torch {torch.__version__}'s collectives do not reach torch function modes (torch 2.7's do): "
                "builtin dumps and replays hold no Distributed.* calls")
    return None


def _build_table() -> dict:
    table: dict = {}
    for prefix, name, func in listed_apis():
        try:
            table.setdefault(func, (prefix, name))
        except TypeError:  # an unhashable attribute cannot arrive as a torch function either
            continue
    return table


def _lookup(namespace: Any, dotted: str) -> Any:
    obj = namespace
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


# Operator bytecode -> msprobe's dunder name. Python 3.11+ has one BINARY_OP whose argument is an NB_* index
# (``dis._nb_ops``); 3.9 / 3.10 have one opcode per operator.
_NB_DUNDERS = {
    "NB_ADD": "__add__", "NB_AND": "__and__", "NB_FLOOR_DIVIDE": "__floordiv__", "NB_LSHIFT": "__lshift__",
    "NB_MATRIX_MULTIPLY": "__matmul__", "NB_MULTIPLY": "__mul__", "NB_REMAINDER": "__mod__", "NB_OR": "__or__",
    "NB_POWER": "__pow__", "NB_RSHIFT": "__rshift__", "NB_SUBTRACT": "__sub__", "NB_TRUE_DIVIDE": "__truediv__",
    "NB_XOR": "__xor__",
}
_NB_DUNDERS.update({k.replace("NB_", "NB_INPLACE_"): "__i" + v[2:] for k, v in _NB_DUNDERS.items()})
_NB_BY_ARG = {i: _NB_DUNDERS.get(name) for i, (name, _) in enumerate(getattr(dis, "_nb_ops", ()))}
_OLD_OPCODES = {
    "BINARY_ADD": "__add__", "BINARY_AND": "__and__", "BINARY_FLOOR_DIVIDE": "__floordiv__",
    "BINARY_LSHIFT": "__lshift__", "BINARY_MATRIX_MULTIPLY": "__matmul__", "BINARY_MULTIPLY": "__mul__",
    "BINARY_MODULO": "__mod__", "BINARY_OR": "__or__", "BINARY_POWER": "__pow__", "BINARY_RSHIFT": "__rshift__",
    "BINARY_SUBTRACT": "__sub__", "BINARY_TRUE_DIVIDE": "__truediv__", "BINARY_XOR": "__xor__",
}
_OLD_OPCODES.update({k.replace("BINARY_", "INPLACE_"): "__i" + v[2:] for k, v in _OLD_OPCODES.items()})
_COMPARISONS = {"gt": "__gt__", "lt": "__lt__", "ge": "__ge__", "le": "__le__", "eq": "__eq__", "ne": "__ne__"}
# Tensor methods an operator can arrive as; only these pay for the bytecode look-up.
OPERATOR_METHODS = frozenset(
    "add sub mul div matmul remainder floor_divide pow bitwise_and bitwise_or bitwise_xor bitwise_left_shift "
    "bitwise_right_shift __and__ __or__ __xor__ __lshift__ __rshift__ add_ sub_ mul_ div_ remainder_ "
    "floor_divide_ pow_ bitwise_and_ bitwise_or_ bitwise_xor_ __iand__ __ior__ __ixor__ __ilshift__ __irshift__ "
    "gt lt ge le eq ne".split()
)


def base_name(api: tuple, caller: Optional[FrameType]) -> str:
    """An API call's name without its per-step counter (``Functional.linear``, ``Tensor.__add__``).

    ``api`` is the call's ``(prefix, name)`` from :func:`api_table`; ``caller`` the frame that made the call.
    """
    prefix, method = api
    if prefix == "Tensor" and method in OPERATOR_METHODS:
        method = operator_name(method, caller)
    return f"{prefix}.{method}"


def operator_name(method: str, caller: Optional[FrameType]) -> str:
    """The dunder name when ``caller`` is executing an operator (``x + 1``), else ``method`` unchanged."""
    if caller is None:
        return method
    code = caller.f_code.co_code
    at = caller.f_lasti
    if not 0 <= at < len(code) - 1:
        return method
    opname = dis.opname[code[at]]
    if opname == "BINARY_OP":
        return _NB_BY_ARG.get(code[at + 1]) or method
    if opname == "COMPARE_OP":
        return _COMPARISONS.get(method, method)
    return _OLD_OPCODES.get(opname, method)
