"""Model, device and number-format presets for the workload generators.

Pure data: frozen dataclasses describing published model shapes (GPT-3, Llama-3, Mixtral, ResNet-50, DLRM) and
accelerators (A100, H100), plus the closed-form parameter counts the generators and tests rely on.

Conventions
- FLOPs are floating-point operations: one multiply-add is 2 FLOPs (the convention of accelerator peak numbers
  and of the ``6 * N * tokens`` rule). Vision papers quote ResNet-50 at "4.1 GFLOPs", which counts
  multiply-adds; :func:`resnet_fwd_macs_per_image` returns that number, the generators use 2x it.
- A compute node lasts ``max(flops / (peak * efficiency), bytes / (hbm * efficiency))`` (a roofline with one
  efficiency factor, default 0.4), see :meth:`Device.compute_ns`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from genie.core.errors import InputError, shown


class Dtype(Enum):
    """Number format of weights, activations and gradients on the wire."""

    FP32 = "fp32"
    TF32 = "tf32"  # fp32 storage, tensor-core math
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def size_bytes(self) -> int:
        return _DTYPE_BYTES[self.value]

    @classmethod
    def parse(cls, text: str) -> "Dtype":
        key = text.strip().lower().replace("float", "fp").replace("bfloat16", "bf16")
        for d in cls:
            if d.value == key:
                return d
        raise InputError(f"unknown dtype {shown(text)} (expected one of: {', '.join(d.value for d in cls)})",
                         path="dtype")


_DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


# ---- devices -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    """An accelerator: dense peak FLOP/s per number format, HBM bandwidth, and the achieved fraction of both."""

    name: str
    peak_flops_per_s: tuple[tuple[Dtype, float], ...]
    hbm_bytes_per_s: float
    efficiency: float = 0.4

    def peak_flops(self, dtype: Dtype) -> float:
        for d, flops in self.peak_flops_per_s:
            if d is dtype:
                return flops
        raise InputError(f"{self.name} has no {dtype.value} peak (has: "
                         f"{', '.join(d.value for d, _ in self.peak_flops_per_s)})", path="dtype")

    def compute_ns(self, flops: float, dtype: Dtype, bytes_moved: float = 0) -> int:
        """Roofline duration: the slower of math at ``peak*efficiency`` and memory at ``hbm*efficiency``."""
        math_s = flops / (self.peak_flops(dtype) * self.efficiency)
        memory_s = bytes_moved / (self.hbm_bytes_per_s * self.efficiency)
        return max(1, math.ceil(max(math_s, memory_s) * 1e9)) if (flops or bytes_moved) else 0

    def with_efficiency(self, efficiency: float) -> "Device":
        if not 0 < efficiency <= 1:
            raise InputError(f"efficiency must be in (0, 1], got {efficiency}", path="efficiency")
        return replace(self, efficiency=efficiency)


A100 = Device("a100", ((Dtype.BF16, 312e12), (Dtype.FP16, 312e12), (Dtype.TF32, 156e12), (Dtype.FP32, 19.5e12)),
              hbm_bytes_per_s=2039e9)  # A100 SXM4 80 GB
H100 = Device("h100", ((Dtype.FP8, 1979e12), (Dtype.BF16, 989e12), (Dtype.FP16, 989e12), (Dtype.TF32, 494.7e12),
                       (Dtype.FP32, 66.9e12)), hbm_bytes_per_s=3350e9)  # H100 SXM5 80 GB, dense
DEVICES: dict[str, Device] = {d.name: d for d in (A100, H100)}

# Mixed-precision Adam: read fp32 master weight, m, v (12 B) and the 2-byte gradient, write master, m, v and
# the 2-byte weight (14 B): 28 bytes of HBM traffic per parameter and step.
OPTIMIZER_BYTES_PER_PARAM = 28


# ---- models --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TransformerModel:
    """A decoder-only transformer (GPT-style LayerNorm + biases + GELU, or Llama-style RMSNorm + SwiGLU + GQA).

    ``num_experts > 1`` makes every ``moe_every``-th layer (layers ``moe_every-1, 2*moe_every-1, ...``) a
    mixture of experts: a router (``num_experts x hidden``) and ``num_experts`` FFNs of ``ffn_hidden_size``,
    each token going to ``top_k`` of them.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    seq_len: int
    vocab_size: int
    gated_ffn: bool = False  # SwiGLU: gate, up and down projections
    biases: bool = True  # linear biases and LayerNorm (weight + bias) vs RMSNorm (weight)
    learned_positions: bool = True  # a seq_len x hidden position embedding (GPT) vs RoPE (none)
    tied_embeddings: bool = True  # the output projection reuses the token embedding
    num_experts: int = 0
    top_k: int = 1
    moe_every: int = 1
    published_params: int = 0  # the size the model is known by, for reference

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and (layer + 1) % self.moe_every == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden_size if self.biases else self.hidden_size

    @property
    def attention_params(self) -> int:
        h, b = self.hidden_size, self.biases
        qkv = (h + 2 * self.kv_size) * h + ((h + 2 * self.kv_size) if b else 0)
        return self.norm_params + qkv + h * h + (h if b else 0)

    @property
    def ffn_params(self) -> int:
        """One dense FFN (or one expert), without its norm."""
        h, f, b = self.hidden_size, self.ffn_hidden_size, self.biases
        if self.gated_ffn:
            return 3 * h * f + ((2 * f + h) if b else 0)
        return 2 * h * f + ((f + h) if b else 0)

    def mlp_params(self, layer: int) -> int:
        if self.is_moe_layer(layer):
            return self.norm_params + self.num_experts * self.hidden_size + self.num_experts * self.ffn_params
        return self.norm_params + self.ffn_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size + (self.seq_len * self.hidden_size if self.learned_positions
                                                     else 0)

    @property
    def head_params(self) -> int:
        """Final norm plus an untied output projection."""
        return self.norm_params + (0 if self.tied_embeddings else self.vocab_size * self.hidden_size)

    @property
    def param_count(self) -> int:
        layers = sum(self.attention_params + self.mlp_params(i) for i in range(self.num_layers))
        return self.embedding_params + layers + self.head_params

    def with_overrides(self, *, num_layers: int | None = None, seq_len: int | None = None,
                       num_experts: int | None = None, top_k: int | None = None,
                       moe_every: int | None = None) -> "TransformerModel":
        changes = {k: v for k, v in (("num_layers", num_layers), ("seq_len", seq_len), ("num_experts", num_experts),
                                     ("top_k", top_k), ("moe_every", moe_every)) if v is not None}
        for key, value in changes.items():
            if value < (0 if key == "num_experts" else 1):
                raise InputError(f"must be positive, got {value}", path=key)
        model = replace(self, **changes)
        if model.is_moe and not 1 <= model.top_k <= model.num_experts:
            raise InputError(f"top_k {model.top_k} must be in 1..{model.num_experts}", path="top_k")
        return model


def _gpt3(name: str, layers: int, hidden: int, heads: int, published: int) -> TransformerModel:
    # Brown et al. 2020, table 2.1: n_layers, d_model, n_heads; vocab 50257 (GPT-2 BPE), context 2048, FFN 4x.
    return TransformerModel(name, layers, hidden, heads, heads, 4 * hidden, 2048, 50257, published_params=published)


def _llama3(name: str, layers: int, hidden: int, heads: int, ffn: int, published: int) -> TransformerModel:
    # Llama 3 model card / params.json: 8 KV heads (GQA), SwiGLU, RMSNorm, RoPE, vocab 128256, untied, 8k context.
    return TransformerModel(name, layers, hidden, heads, 8, ffn, 8192, 128256, gated_ffn=True, biases=False,
                            learned_positions=False, tied_embeddings=False, published_params=published)


def _no_overrides(name: str, overrides: dict[str, int | None]) -> None:
    for key, value in overrides.items():
        if value is not None:
            raise InputError(f"{name} is not a transformer: {key} cannot be changed", path=key)


@dataclass(frozen=True)
class ConvLayer:
    """A convolution (with its batch norm, or the final fully-connected layer when ``kernel == 0``)."""

    name: str
    unit: int  # the residual block it belongs to (-1 stem, num_blocks for the head): the pipeline-split unit
    in_channels: int
    out_channels: int
    kernel: int
    out_hw: int  # output height = width

    @property
    def param_count(self) -> int:
        if self.kernel == 0:  # fully connected + bias
            return self.in_channels * self.out_channels + self.out_channels
        return self.kernel * self.kernel * self.in_channels * self.out_channels + 2 * self.out_channels  # + BN

    @property
    def fwd_macs(self) -> int:
        if self.kernel == 0:
            return self.in_channels * self.out_channels
        return self.kernel * self.kernel * self.in_channels * self.out_channels * self.out_hw * self.out_hw

    @property
    def out_elements(self) -> int:
        return self.out_channels * max(self.out_hw, 1) * max(self.out_hw, 1)


@dataclass(frozen=True)
class ResNetModel:
    """A bottleneck ResNet (torchvision v1.5: stride on the 3x3 convolution)."""

    name: str
    blocks_per_stage: tuple[int, ...] = (3, 4, 6, 3)
    widths: tuple[int, ...] = (64, 128, 256, 512)
    expansion: int = 4
    image_size: int = 224
    num_classes: int = 1000
    published_params: int = 0

    def conv_layers(self) -> tuple[ConvLayer, ...]:
        hw = self.image_size // 2
        layers = [ConvLayer("conv1", -1, 3, 64, 7, hw)]
        hw //= 2  # max pool
        channels, unit = 64, 0
        for stage, (blocks, width) in enumerate(zip(self.blocks_per_stage, self.widths)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                out_hw = hw // stride
                name = f"layer{stage + 1}.{block}"
                out = width * self.expansion
                layers += [ConvLayer(f"{name}.conv1", unit, channels, width, 1, hw),
                           ConvLayer(f"{name}.conv2", unit, width, width, 3, out_hw),
                           ConvLayer(f"{name}.conv3", unit, width, out, 1, out_hw)]
                if block == 0:
                    layers.append(ConvLayer(f"{name}.downsample", unit, channels, out, 1, out_hw))
                channels, hw, unit = out, out_hw, unit + 1
        layers.append(ConvLayer("fc", unit, channels, self.num_classes, 0, 0))
        return tuple(layers)

    @property
    def param_count(self) -> int:
        return sum(c.param_count for c in self.conv_layers())

    def with_overrides(self, **overrides: int | None) -> "ResNetModel":
        _no_overrides(self.name, overrides)
        return self


def resnet_fwd_macs_per_image(model: ResNetModel) -> int:
    """Multiply-adds of one forward pass (the "4.1 GFLOPs" quoted for ResNet-50)."""
    return sum(c.fwd_macs for c in model.conv_layers())


@dataclass(frozen=True)
class DLRMModel:
    """DLRM (Naumov et al. 2019): embedding tables (model parallel) + bottom and top MLPs (data parallel)."""

    name: str
    table_rows: tuple[int, ...]
    embedding_dim: int
    dense_features: int
    bottom_mlp: tuple[int, ...]  # output widths; the last equals embedding_dim
    top_mlp: tuple[int, ...]
    published_params: int = 0

    @property
    def num_tables(self) -> int:
        return len(self.table_rows)

    @property
    def interaction_features(self) -> int:
        """Dot interaction: the bottom-MLP output plus every pair among the tables and it."""
        n = self.num_tables + 1
        return self.embedding_dim + n * (n - 1) // 2

    def mlp_layers(self) -> tuple[tuple[str, int, int], ...]:
        """(name, in, out) of every linear layer, bottom then top."""
        layers, width = [], self.dense_features
        for i, out in enumerate(self.bottom_mlp):
            layers.append((f"bot_mlp.{i}", width, out))
            width = out
        width = self.interaction_features
        for i, out in enumerate(self.top_mlp):
            layers.append((f"top_mlp.{i}", width, out))
            width = out
        return tuple(layers)

    @property
    def dense_params(self) -> int:
        return sum(i * o + o for _, i, o in self.mlp_layers())

    @property
    def embedding_params(self) -> int:
        return sum(self.table_rows) * self.embedding_dim

    @property
    def param_count(self) -> int:
        return self.dense_params + self.embedding_params

    def with_overrides(self, **overrides: int | None) -> "DLRMModel":
        _no_overrides(self.name, overrides)
        return self


# MLPerf DLRM (Criteo 1TB, --max-ind-range=40000000): 26 tables of dimension 128, MLPs 13-512-256-128 and
# 479-1024-1024-512-256-1.
_CRITEO_1TB_ROWS = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
                    11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36)

Model = TransformerModel | ResNetModel | DLRMModel

MODELS: dict[str, Model] = {m.name: m for m in (
    _gpt3("gpt3-125m", 12, 768, 12, 125_000_000),
    _gpt3("gpt3-1.3b", 24, 2048, 16, 1_300_000_000),
    _gpt3("gpt3-13b", 40, 5120, 40, 13_000_000_000),
    _gpt3("gpt3-175b", 96, 12288, 96, 175_000_000_000),
    _llama3("llama3-8b", 32, 4096, 32, 14336, 8_030_000_000),
    _llama3("llama3-70b", 80, 8192, 64, 28672, 70_600_000_000),
    # Mixtral 8x7B (Jiang et al. 2024): Mistral-7B shape, 8 experts, top-2, vocab 32000, 32k context.
    TransformerModel("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32768, 32000, gated_ffn=True, biases=False,
                     learned_positions=False, tied_embeddings=False, num_experts=8, top_k=2,
                     published_params=46_700_000_000),
    ResNetModel("resnet50", published_params=25_557_032),
    DLRMModel("dlrm", _CRITEO_1TB_ROWS, 128, 13, (512, 256, 128), (1024, 1024, 512, 256, 1),
              published_params=0),
)}


def model_preset(name: str) -> Model:
    try:
        return MODELS[name.strip().lower()]
    except KeyError:
        raise InputError(f"unknown model {shown(name)} (expected one of: {', '.join(MODELS)})", path="model") from None


def device_preset(name: str) -> Device:
    try:
        return DEVICES[name.strip().lower()]
    except KeyError:
        raise InputError(f"unknown device {shown(name)} (expected one of: {', '.join(DEVICES)})", path="device") from None
