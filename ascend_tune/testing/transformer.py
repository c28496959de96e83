"""A tiny GPT-style transformer and synthetic token data, for tests and benchmarks: nothing is downloaded.

Token and position embeddings, pre-LayerNorm blocks whose attention goes through ``F.softmax`` (explicit scores,
causal mask) or through ``F.scaled_dot_product_attention`` (``is_causal``), a GELU MLP, residual dropout, a
final LayerNorm and a linear head; the loss is ``F.cross_entropy``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``F.softmax`` or (``sdpa``) ``F.scaled_dot_product_attention``."""

    def __init__(self, dim: int, heads: int, block: int, sdpa: bool):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads, self.sdpa = heads, sdpa
        self.register_buffer("mask", torch.ones(block, block, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention and a GELU MLP, each with a residual and dropout."""

    def __init__(self, dim: int, heads: int, block: int, sdpa: bool, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, block, sdpa)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class TinyGPT(nn.Module):
    """A GPT with ``layers`` blocks; block 0 attends through ``F.softmax``, the others through SDPA."""

    def __init__(self, vocab: int = 64, block: int = 8, dim: int = 32, heads: int = 2, layers: int = 2,
                 dropout: float = 0.1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, block, sdpa=i > 0, dropout=dropout) for i in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def synthetic_tokens(n: int = 64, block: int = 8, vocab: int = 64, seed: int = 0) -> TensorDataset:
    """Sequences of ``block`` tokens and their next-token targets (a noisy counting pattern a GPT can learn)."""
    gen = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=gen)
    seq = (start + torch.arange(block + 1)) % vocab
    noise = torch.randint(0, vocab, seq.shape, generator=gen)
    seq = torch.where(torch.rand(seq.shape, generator=gen) < 0.1, noise, seq)
    return TensorDataset(seq[:, :-1].contiguous(), seq[:, 1:].contiguous())
