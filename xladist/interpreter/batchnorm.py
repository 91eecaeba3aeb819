"""batch-norm-training, -inference and -grad: the rules call semantics/batchnorm.py, which
the cpu backend's library thunks call too."""

from __future__ import annotations

from ..semantics.batchnorm import batch_norm_grad, batch_norm_inference, batch_norm_training
from .registry import register


def _attrs(instr):
    return float(instr.attrs["epsilon"]), int(instr.attrs["feature_index"])


@register("batch-norm-training")
def _eval_bn_training(instr, args, ev):
    return batch_norm_training(*args, *_attrs(instr))


@register("batch-norm-inference")
def _eval_bn_inference(instr, args, ev):
    return batch_norm_inference(*args, *_attrs(instr))


@register("batch-norm-grad")
def _eval_bn_grad(instr, args, ev):
    return batch_norm_grad(*args, *_attrs(instr))
