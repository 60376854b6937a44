"""A model as the generators see it: an ordered tuple of blocks, each with its parameter tensors and costs.

A block is what one compute node of the trace does in one direction for one micro-batch: a transformer layer
is two blocks (``layerI.attn`` and ``layerI.mlp``/``layerI.moe``), a ResNet convolution one block. Costs are
per sample (one sequence of ``seq_len`` tokens, one image) and unsplit; the generator divides by tensor
parallelism and multiplies by the micro-batch size.

FLOPs (2 per multiply-add; backward = 2 x forward):
- a linear layer: ``2 * tokens * in * out``; attention scores and their use: ``4 * seq^2 * hidden`` per sequence
  (QK^T and AV, causal masking not discounted), so a GPT layer is ``24 s h^2 + 4 s^2 h`` per sequence;
- an MoE layer: router ``2 s h E`` plus ``top_k`` experts per token: ``2 s k * expert_matmul_params``;
- the output projection ``2 s h V``; an embedding lookup moves ``s h`` values (memory bound);
- a convolution ``2 * k^2 * c_in * c_out * H_out * W_out``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.workloads.presets import ResNetModel, TransformerModel

PRE_UNIT = -1  # blocks before the first pipeline unit (embedding, stem) go to the first stage


class BlockKind(Enum):
    EMBEDDING = "embedding"
    ATTENTION = "attention"
    MLP = "mlp"
    MOE = "moe"
    HEAD = "head"  # final norm + output projection + loss
    CONV = "conv"
    FC = "fc"

    @property
    def tensor_parallel(self) -> bool:
        """Megatron shards it over the tensor-parallel group (and all-reduces its output)."""
        return self in (BlockKind.EMBEDDING, BlockKind.ATTENTION, BlockKind.MLP, BlockKind.MOE, BlockKind.HEAD)


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor: elements (whole, unsharded); split over tensor parallelism or replicated;
    ``expert``: belongs to the experts of an MoE layer (all experts counted)."""

    name: str
    elements: int
    tp_split: bool = False
    expert: bool = False
    row_elements: int = 1  # the split is by rows of this many elements (an embedding splits its vocabulary)

    def local_elements(self, tp: int, ep: int = 1) -> int:
        """Elements one rank holds: ``1/tp`` of the rows (rounded up: the padded vocabulary) and ``1/ep`` of the
        experts."""
        n = -(-self.elements // (self.row_elements * tp)) * self.row_elements if self.tp_split else self.elements
        return n // ep if self.expert else n


@dataclass(frozen=True)
class Block:
    name: str
    kind: BlockKind
    unit: int  # pipeline partition unit (transformer layer, residual block); PRE_UNIT, or num_units for the head
    params: tuple[ParamTensor, ...]  # in model.parameters() order
    fwd_flops_per_sample: int
    fwd_bytes_per_sample: int  # HBM traffic besides the weights (activations in and out), for the roofline
    out_bytes_per_sample: int  # the activation handed to the next block (pipeline messages, TP all-reduce)
    expert_flops_per_sample: int = 0  # of fwd_flops_per_sample, the part done by the experts (MoE)

    @property
    def param_count(self) -> int:
        return sum(p.elements for p in self.params)


@dataclass(frozen=True)
class ModelGraph:
    """The blocks of a model at a given sequence length and number format."""

    name: str
    blocks: tuple[Block, ...]
    num_units: int  # pipeline units 0..num_units-1 (PRE_UNIT and num_units are attached to the end stages)
    hidden_size: int = 0  # transformer width (0 for other models)
    seq_len: int = 1  # tokens per sample
    top_k: int = 1
    tied_embeddings: bool = False

    @property
    def param_count(self) -> int:
        return sum(b.param_count for b in self.blocks)


def _t(name: str, elements: int, tp_split: bool = False, expert: bool = False, row_elements: int = 1
       ) -> ParamTensor:
    return ParamTensor(name, elements, tp_split, expert, row_elements)


def _norm(m: TransformerModel, name: str) -> tuple[ParamTensor, ...]:
    h = m.hidden_size
    return (_t(f"{name}.weight", h), _t(f"{name}.bias", h)) if m.biases else (_t(f"{name}.weight", h),)


def _linear(m: TransformerModel, name: str, n_in: int, n_out: int, *, column: bool, expert: int = 0
            ) -> tuple[ParamTensor, ...]:
    """Column-parallel (output split, bias split) or row-parallel (input split, bias replicated)."""
    many = max(expert, 1)
    weight = _t(f"{name}.weight", many * n_in * n_out, True, expert > 0)
    if not m.biases:
        return (weight,)
    return weight, _t(f"{name}.bias", many * n_out, column, expert > 0)


def _ffn(m: TransformerModel, prefix: str, experts: int = 0) -> tuple[ParamTensor, ...]:
    h, f = m.hidden_size, m.ffn_hidden_size
    if m.gated_ffn:
        return (*_linear(m, f"{prefix}.gate_proj", h, f, column=True, expert=experts),
                *_linear(m, f"{prefix}.up_proj", h, f, column=True, expert=experts),
                *_linear(m, f"{prefix}.down_proj", f, h, column=False, expert=experts))
    return (*_linear(m, f"{prefix}.fc1", h, f, column=True, expert=experts),
            *_linear(m, f"{prefix}.fc2", f, h, column=False, expert=experts))


def _matmul_elements(tensors: tuple[ParamTensor, ...]) -> int:
    return sum(p.elements for p in tensors if p.name.endswith(".weight") and "norm" not in p.name)


def transformer_graph(m: TransformerModel, *, dtype_bytes: int) -> ModelGraph:
    h, s, v = m.hidden_size, m.seq_len, m.vocab_size
    act = s * h * dtype_bytes
    emb = [_t("embed_tokens.weight", v * h, True, row_elements=h)]
    if m.learned_positions:
        emb.append(_t("embed_positions.weight", s * h))
    blocks = [Block("embedding", BlockKind.EMBEDDING, PRE_UNIT, tuple(emb), 0, 2 * act, act)]
    for i in range(m.num_layers):
        p = f"layer{i}"
        attn = (*_norm(m, f"{p}.input_norm"), *_linear(m, f"{p}.attn.qkv", h, h + 2 * m.kv_size, column=True),
                *_linear(m, f"{p}.attn.o_proj", h, h, column=False))
        attn_flops = 2 * s * _matmul_elements(attn) + 4 * s * s * h
        blocks.append(Block(f"{p}.attn", BlockKind.ATTENTION, i, attn, attn_flops, 4 * act, act))
        if m.is_moe_layer(i):
            router = _t(f"{p}.moe.router.weight", m.num_experts * h)
            experts = _ffn(m, f"{p}.moe.experts", m.num_experts)
            expert_flops = 2 * s * m.top_k * _matmul_elements(experts) // m.num_experts
            flops = 2 * s * h * m.num_experts + expert_flops
            blocks.append(Block(f"{p}.moe", BlockKind.MOE, i, (*_norm(m, f"{p}.post_norm"), router, *experts),
                                flops, (2 + 2 * m.top_k) * act, act, expert_flops))
        else:
            mlp = (*_norm(m, f"{p}.post_norm"), *_ffn(m, f"{p}.mlp"))
            blocks.append(Block(f"{p}.mlp", BlockKind.MLP, i, mlp, 2 * s * _matmul_elements(mlp), 4 * act, act))
    head = list(_norm(m, "final_norm"))
    if not m.tied_embeddings:
        head.append(_t("lm_head.weight", v * h, True, row_elements=h))
    blocks.append(Block("head", BlockKind.HEAD, m.num_layers, tuple(head), 2 * s * h * v,
                        act + s * v * dtype_bytes, 4 * s))
    return ModelGraph(m.name, tuple(blocks), m.num_layers, h, s, m.top_k if m.is_moe else 1, m.tied_embeddings)


def resnet_graph(m: ResNetModel, *, dtype_bytes: int) -> ModelGraph:
    blocks = []
    convs = m.conv_layers()
    in_elements = 3 * m.image_size * m.image_size
    for c in convs:
        kind = BlockKind.FC if c.kernel == 0 else BlockKind.CONV
        params = ((_t(f"{c.name}.weight", c.in_channels * c.out_channels), _t(f"{c.name}.bias", c.out_channels))
                  if kind is BlockKind.FC else
                  (_t(f"{c.name}.weight", c.kernel ** 2 * c.in_channels * c.out_channels),
                   _t(f"{c.name}.bn.weight", c.out_channels), _t(f"{c.name}.bn.bias", c.out_channels)))
        out = c.out_elements * dtype_bytes
        blocks.append(Block(c.name, kind, c.unit, params, 2 * c.fwd_macs, in_elements * dtype_bytes + 2 * out, out))
        in_elements = c.out_elements
    return ModelGraph(m.name, tuple(blocks), convs[-1].unit)
