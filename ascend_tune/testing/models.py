"""Tiny models and synthetic data for the demo, the benchmarks and tests: nothing is downloaded."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset

# (output channels at width 1.0, stride) of MobileNetV1's 13 depthwise-separable blocks
_MOBILENET_V1_BLOCKS = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)


def _conv_bn(cin: int, cout: int, stride: int, groups: int = 1, kernel: int = 3) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class MobileNetV1(nn.Module):
    """MobileNetV1's layer structure (83 parameter tensors) at a chosen width, for small images."""

    def __init__(self, num_classes: int = 10, width: float = 0.25, in_channels: int = 3):
        super().__init__()
        chans = [max(8, int(c * width)) for c, _ in _MOBILENET_V1_BLOCKS]
        first = max(8, int(32 * width))
        layers = [_conv_bn(in_channels, first, 2)]
        cin = first
        for cout, (_, stride) in zip(chans, _MOBILENET_V1_BLOCKS):
            layers.append(_conv_bn(cin, cin, stride, groups=cin))  # depthwise
            layers.append(_conv_bn(cin, cout, 1, kernel=1))  # pointwise
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def synthetic_images(
    n: int = 2048, num_classes: int = 10, size: int = 32, channels: int = 3, noise: float = 0.5, seed: int = 0
) -> TensorDataset:
    """A learnable image classification set: each class is a fixed random pattern plus Gaussian noise."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.randn(num_classes, channels, size, size, generator=gen)
    labels = torch.randint(0, num_classes, (n,), generator=gen)
    images = templates[labels] + noise * torch.randn(n, channels, size, size, generator=gen)
    return TensorDataset(images, labels)


class TinyMLP(nn.Module):
    """A two-layer MLP for fast tests."""

    def __init__(self, features: int = 16, hidden: int = 32, classes: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def synthetic_classification(n: int = 256, features: int = 16, classes: int = 4, seed: int = 0) -> TensorDataset:
    """Vectors whose class is a linear function of the features: an MLP learns it in a few steps."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=gen)
    w = torch.randn(features, classes, generator=gen)
    return TensorDataset(x, (x @ w).argmax(dim=1))


class TinyGPT(nn.Module):
    """A GPT in nanoGPT's layout (token and position embeddings, pre-norm blocks of causal self-attention through
    ``F.scaled_dot_product_attention`` and a GELU MLP, a final LayerNorm, a bias-free head, logits soft-capped as
    ``cap * tanh(logits / cap)``), small enough for tests.

    ``eps`` and ``approximate`` reach every ``nn.LayerNorm`` and ``nn.GELU``; the first ``softmax_blocks`` blocks
    attend through explicit scores, a causal ``masked_fill`` and ``F.softmax`` instead of SDPA; ``dropout`` > 0 adds
    dropout on each block's two residual branches. ``forward(idx, targets)`` returns the cross-entropy loss.
    """

    def __init__(self, vocab: int = 32, block: int = 8, dim: int = 16, heads: int = 2, layers: int = 2,
                 eps: float = 1e-5, approximate: str = "none", cap: float = 30.0, softmax_blocks: int = 0,
                 dropout: float = 0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(_GPTBlock(dim, heads, eps, approximate, block if i < softmax_blocks else 0, dropout)
                               for i in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=eps)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.cap = cap

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        logits = self.cap * torch.tanh(logits / self.cap)
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class _GPTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, eps: float, approximate: str, softmax_block: int = 0,
                 dropout: float = 0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=eps)
        self.attn = _CausalSelfAttention(dim, heads, softmax_block)
        self.ln_2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate=approximate), nn.Linear(4 * dim, dim))
        self.resid_drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.resid_drop(self.attn(self.ln_1(x)))
        return x + self.resid_drop(self.mlp(self.ln_2(x)))


class _CausalSelfAttention(nn.Module):
    """SDPA, or with ``softmax_block`` (the longest sequence) explicit scores through ``F.softmax``."""

    def __init__(self, dim: int, heads: int, softmax_block: int = 0):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.heads = heads
        self.softmax = softmax_block > 0
        if self.softmax:
            self.register_buffer("mask", torch.ones(softmax_block, softmax_block, dtype=torch.bool).tril(),
                                 persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.softmax:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = nn.functional.softmax(att, dim=-1) @ v
        else:
            y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


def synthetic_tokens(n: int = 64, block: int = 8, vocab: int = 32, seed: int = 0) -> TensorDataset:
    """Token sequences and their next-token targets (a fixed random walk over the vocabulary)."""
    gen = torch.Generator().manual_seed(seed)
    walk = torch.cumsum(torch.randint(1, 4, (n, block + 1), generator=gen), dim=1) % vocab
    return TensorDataset(walk[:, :-1].contiguous(), walk[:, 1:].contiguous())
