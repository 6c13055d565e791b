"""Export a run's acting policy as a standalone file: TorchScript or ONNX.

The file holds deterministic acting, nothing of SRL: one input per observation field, each
[batch, ...] (float fields as float32, integer ones in their own dtype), named after the field
in ONNX and in that order in TorchScript; the output `action` is what
`rollout(..., deterministic=True)` takes (the argmax of a discrete head, the mean of a
Gaussian), a Box action clipped to its bounds as the gym adapter clips it at the env boundary.
Observation normalisation is inside. An LSTM policy also takes `rnn_state/h` and
`rnn_state/c` ([batch, width], zeros at an episode's start) and returns `next_rnn_state/h`
and `next_rnn_state/c` after the action.

    exported = export("runs/cartpole-ppo/20260101-120000", "cartpole.onnx")
    session = onnxruntime.InferenceSession("cartpole.onnx")
    action = session.run(["action"], {"obs": obs.astype(np.float32)})[0]
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from srl.api.components import make_env
from srl.api.config import run_config
from srl.api.env import spaces_of
from srl.data import keys
from srl.evaluate import policy_for

FORMATS = ("torchscript", "onnx")
#: File suffixes that name a format when none is given.
SUFFIXES = {".onnx": "onnx", ".pt": "torchscript", ".ts": "torchscript"}
#: Inside a TorchScript file (`torch.jit.load(path, _extra_files={...: ""})`): the names of its
#: positional inputs and outputs, which TorchScript itself does not keep.
SIGNATURE_FILE = "srl_signature.json"


@dataclass
class Exported:
    """What `export` wrote."""

    path: Path
    format: str
    #: The checkpoint's file name.
    checkpoint: str
    #: Name -> "[batch, ...] dtype", in the order the file takes and returns them (an ONNX file
    #: leaves out the observation fields the actor does not read).
    inputs: dict[str, str]
    outputs: dict[str, str]


def format_for(path: str | Path) -> str:
    """The format a file name asks for by its suffix (`.onnx`, or `.pt`/`.ts` for TorchScript)."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"cannot tell the format from {Path(path).name!r}: give one of {', '.join(FORMATS)}")
    return SUFFIXES[suffix]


def export(run_dir: str | Path, out: str | Path, format: str | None = None, checkpoint: str = "latest") -> Exported:
    """Write the policy of `run_dir` at `checkpoint` (`latest`, `best`, or a `ckpt-*.pt` path) to `out`."""
    format = format or format_for(out)
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r} (formats: {', '.join(FORMATS)})")
    run_dir, out = Path(run_dir), Path(out)
    config = run_config(run_dir)
    env = make_env(config.env)  # only for its spaces, which the config does not spell out
    try:
        observation_space, action_space = spaces_of(env)
    finally:
        env.close()
    policy, label = policy_for(checkpoint, run_dir, config, (observation_space, action_space))
    # No autograd history in the file's outputs (the policy was loaded for this export alone).
    module = policy.acting_module().requires_grad_(False)
    if isinstance(action_space, gym.spaces.Box):
        module = ClippedActions(module, action_space)
    inputs = example_inputs(observation_space, policy.initial_state(1))
    state_leaves = [name.partition("/")[2] for name in inputs if name.startswith(f"{keys.RNN_STATE}/")]
    output_names = [keys.ACTION, *(f"next_{keys.RNN_STATE}/{leaf}" for leaf in state_leaves)]
    with torch.no_grad(), warnings.catch_warnings():
        # The tanh of the torsos picks its form by tensor size, a choice the trace freezes
        # (at batch 1: torch.tanh itself); the legacy ONNX exporter warns of its deprecation,
        # and advises an LSTM's initial (h, c) as inputs, which they are.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "Exporting a model to ONNX with a batch_size other than 1")
        results = module(*inputs.values())
        results = results if isinstance(results, tuple) else (results,)
        out.parent.mkdir(parents=True, exist_ok=True)
        if format == "onnx":
            inputs = _write_onnx(module, inputs, output_names, out)
        else:
            _write_torchscript(module, inputs, output_names, out)
    return Exported(out, format, label, {name: _describe(t) for name, t in inputs.items()},
                    {name: _describe(t) for name, t in zip(output_names, results)})


def _write_onnx(module: nn.Module, inputs: dict[str, torch.Tensor], output_names: list[str],
                out: Path) -> dict[str, torch.Tensor]:
    """Trace to ONNX with a dynamic batch axis; returns the inputs the file kept."""
    import onnx

    # The TorchScript-based exporter (deprecated but kept in torch 2.x): the same trace as the
    # TorchScript file, in a fraction of a second; the torch.export-based one also works but
    # takes seconds, prints pages and needs onnxscript.
    # ONNX has no fused multi-head attention (the entity-attention encoder's fast path in eval
    # mode): the exporter must see the attention's plain ops.
    fast_attention = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        torch.onnx.export(module, tuple(inputs.values()), str(out), dynamo=False, input_names=list(inputs),
                          output_names=output_names,
                          dynamic_axes={name: {0: "batch"} for name in (*inputs, *output_names)})
    finally:
        torch.backends.mha.set_fastpath_enabled(fast_attention)
    # The exporter drops inputs the actor never reads (a centralised critic's `state`).
    kept = {i.name for i in onnx.load(str(out)).graph.input}
    return {name: t for name, t in inputs.items() if name in kept}


def _write_torchscript(module: nn.Module, inputs: dict[str, torch.Tensor], output_names: list[str],
                       out: Path) -> None:
    """Trace to TorchScript; the input and output names go in the file beside it."""
    signature = {"inputs": list(inputs), "outputs": output_names}
    torch.jit.save(torch.jit.trace(module, tuple(inputs.values())), str(out),
                   _extra_files={SIGNATURE_FILE: json.dumps(signature)})


def example_inputs(observation_space: gym.spaces.Dict, state: Any) -> dict[str, torch.Tensor]:
    """One row of zeros per input, by name: the observation fields, then the RNN state's leaves.

    One row, not more: the trace records the batch axis as dynamic either way, and at batch 1
    the torsos' tanh is torch.tanh itself (the sigmoid form is picked only for large inputs).
    """
    inputs = {}
    for name, space in observation_space.spaces.items():
        if space.shape is None:
            raise ValueError(f"observation field {name!r} is a {type(space).__name__}: only array fields export")
        dtype = np.float32 if np.issubdtype(space.dtype, np.floating) else space.dtype
        inputs[name] = torch.from_numpy(np.zeros((1, *space.shape), dtype))
    for path, leaf in state.items_flat():
        inputs[f"{keys.RNN_STATE}/{path}"] = torch.from_numpy(np.asarray(leaf))
    return inputs


def _describe(tensor: torch.Tensor) -> str:
    return f"[{', '.join(['batch', *map(str, tensor.shape[1:])])}] {str(tensor.dtype).removeprefix('torch.')}"


class ClippedActions(nn.Module):
    """Box actions clipped to their bounds, as the gym adapter clips them before the env steps:
    the exported file answers with what the env would be given."""

    def __init__(self, module: nn.Module, space: gym.spaces.Box) -> None:
        super().__init__()
        self.module = module
        self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        out = self.module(*inputs)
        action, rest = (out[0], out[1:]) if isinstance(out, tuple) else (out, ())
        action = torch.minimum(torch.maximum(action, self.low), self.high)
        return (action, *rest) if rest else action
