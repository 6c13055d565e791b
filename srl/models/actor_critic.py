"""An actor-critic: encoder (flatten, CNN or entity attention), an optional LSTM, MLP torsos,
action head and value head.

The actor and the critic may read different observation fields: a MAPPO-style centralised
critic reads the global `state` while each agent's actor reads only its own `obs`. Optional
observation normalisation keeps running statistics inside the network's buffers, so they
travel with the parameters and every actor normalises exactly as the trainer does.

With `lstm: N` the actor's features pass through an LSTM of width N. Acting steps it once
per row, carrying (h, c) as the RNN state; training unrolls it over each trajectory from
the state its first row started from, restarting at episode starts, so gradients flow
through time (truncated at the trajectory length).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
import pydantic
import torch
from torch import nn
from torch.nn import functional as F

from srl.api.config import Section
from srl.api.policy import Analysis, Policy, mask_of
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.activations import tanh
from srl.models.distributions import ActionHead, Distribution
from srl.models.encoders import ENCODERS, FlattenEncoder, ObsNormalizer
from srl.models.masks import check_mask_space
from srl.models.numpy_forward import ACTIVATIONS, Layer, NumpyCopy, flatten_fields, run_layers, torch_layer

#: An LSTM's (h, c), each [B, width].
Memory = tuple[torch.Tensor, torch.Tensor]


#: Units of one hidden layer: at most 16,384 (a layer of 16,384 x 16,384 is already 1 GiB of weights).
HiddenWidth = Annotated[int, pydantic.Field(gt=0, le=16_384)]


class ActorCriticConfig(Section):
    hidden: list[HiddenWidth] = [64, 64]
    activation: Literal["tanh", "relu"] = "tanh"
    #: How observation fields become features: `flatten` (vectors), `nature_cnn` (uint8 images),
    #: `entity_attention` (entity lists with masks, e.g. hide-and-seek) or `board_cnn` (a game
    #: board's [H, W, C] piece planes, e.g. connect four).
    encoder: Literal["flatten", "nature_cnn", "entity_attention", "board_cnn"] = "flatten"
    #: A `board_cnn`'s 3x3 convolutions and their channels. Each layer sees one cell further: from
    #: the cell that would complete a line of four, three layers see the line's far end.
    board_layers: pydantic.PositiveInt = 2
    board_channels: pydantic.PositiveInt = 16
    #: Observation fields the actor reads (default: every field except `state`).
    actor_inputs: list[str] | None = None
    #: Observation fields the critic reads (default: the actor's; `[state]` for a centralised critic).
    critic_inputs: list[str] | None = None
    #: Actor and critic share one encoder (the usual choice for a CNN).
    share_encoder: bool = False
    #: Normalise float observation fields, and uint8 images pixel by pixel, with running
    #: statistics updated by the trainer.
    obs_norm: bool = False
    #: Initial log standard deviation of a Gaussian action head (continuous actions).
    log_std_init: float = 0.0
    #: Width of an LSTM after the actor's encoder (0: feed-forward). A critic with inputs of
    #: its own stays feed-forward; a shared encoder shares the LSTM too.
    lstm: pydantic.NonNegativeInt = 0


class MLP(nn.Sequential):
    """Linear layers, each followed by the activation (`nn.Tanh` or `nn.ReLU`).

    A `Sequential` (the parameter names are `0.weight`, `2.weight`, ...) whose forward pass
    calls the functions directly: at the batch sizes of acting (8-64 rows) and of small
    minibatches, module calls cost as much as the arithmetic of a 64-64 layer.
    """

    def __init__(self, in_dim: int, hidden: list[int], activation: type[nn.Module]) -> None:
        layers: list[nn.Module] = []
        for width in hidden:
            linear = nn.Linear(in_dim, width)
            nn.init.orthogonal_(linear.weight, np.sqrt(2))
            nn.init.zeros_(linear.bias)
            layers += [linear, activation()]
            in_dim = width
        super().__init__(*layers)
        self.out_dim = in_dim
        self.linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
        self.act = tanh if activation is nn.Tanh else torch.relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears:
            x = self.act(F.linear(x, linear.weight, linear.bias))
        return x


def remember(lstm: nn.LSTM, x: torch.Tensor, memory: Memory,
             starts: torch.Tensor | None) -> tuple[torch.Tensor, Memory]:
    """Run `lstm` over features `x` from `memory`: one step per row when `starts` is None
    (acting), else an unroll over rows [T * B] time-major that restarts where `starts` [T, B]
    is set, so training sees exactly the state acting had (shared by every recurrent policy)."""
    h, c = memory
    if starts is None:  # acting: one step per row
        starts = torch.zeros((1, x.shape[0]), dtype=torch.bool, device=x.device)
    steps, rows = starts.shape
    x = x.reshape(steps, rows, -1)
    outs = []
    for t in range(steps):
        keep = (~starts[t]).to(x.dtype)[:, None]  # a new episode starts from the zero state
        out, (h, c) = lstm(x[t][None], ((h * keep)[None], (c * keep)[None]))
        h, c = h[0], c[0]
        outs.append(out[0])
    return torch.cat(outs), (h, c)


def obs_tensors(obs: Mapping[str, Any], lead: int, device: torch.device) -> tuple[dict[str, torch.Tensor], tuple[int, ...]]:
    """Observation fields as tensors on `device` with the `lead` leading dims flattened to one;
    returns them and the leading shape."""
    out, shape = {}, ()
    on_cpu = device.type == "cpu"
    for path, x in (obs.items_flat() if isinstance(obs, NamedArray) else obs.items()):
        # from_numpy shares the array's memory without as_tensor's checks (called every step)
        x = torch.from_numpy(x) if on_cpu and isinstance(x, np.ndarray) else torch.as_tensor(x, device=device)
        shape = tuple(x.shape[:lead])
        out[path] = x if lead == 1 else x.reshape(-1, *x.shape[lead:])
    return out, shape


def module_params(module: nn.Module) -> NamedArray:
    """A module's state (weights and buffers) as a flat NamedArray of numpy arrays, for the wire."""
    # Contiguous whatever the tensor's layout (a channels-last conv weight), as the wire needs.
    return NamedArray.from_flat([(k.replace(".", "/"), np.ascontiguousarray(v.detach().cpu().numpy()))
                                 for k, v in module.state_dict().items()])


def load_module_params(module: nn.Module, params: NamedArray) -> None:
    """Load what `module_params` returned."""
    module.load_state_dict({path.replace("/", "."): torch.from_numpy(np.array(leaf)) for path, leaf in params.items_flat()})


class NetPolicy(Policy):
    """What a policy built around one torch module (`self.net`, on `self.device`, with an optional
    LSTM at `self.net.memory`) shares: its tensors, their wire form, and the LSTM's state."""

    net: nn.Module
    device: torch.device

    def initial_state(self, batch: int) -> NamedArray:
        if self.net.memory is None:
            return NamedArray()
        zeros = np.zeros((batch, self.net.memory.hidden_size), np.float32)
        return NamedArray({"h": zeros, "c": zeros.copy()})

    def _memory(self, state: Mapping[str, Any]) -> Memory | None:
        """The LSTM's (h, c) tensors from a state NamedArray (None without an LSTM)."""
        if self.net.memory is None:
            return None
        return (torch.as_tensor(state["h"], device=self.device), torch.as_tensor(state["c"], device=self.device))

    def parameters(self) -> Iterator[torch.Tensor]:
        return self.net.parameters()

    def buffers(self) -> Iterator[torch.Tensor]:
        """Running statistics the net keeps (e.g. an observation normaliser's)."""
        return self.net.buffers()

    def get_params(self) -> NamedArray:
        return module_params(self.net)

    def set_params(self, params: NamedArray, version: int) -> None:
        load_module_params(self.net, params)
        self.version = version


class ActorCriticNet(nn.Module):
    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, config: ActorCriticConfig) -> None:
        super().__init__()
        fields = list(observation_space.spaces)
        self.actor_inputs = config.actor_inputs or [f for f in fields if f != "state"] or fields
        self.critic_inputs = config.critic_inputs or self.actor_inputs
        for name in (*self.actor_inputs, *self.critic_inputs):
            if name not in observation_space.spaces:
                raise ValueError(f"policy input {name!r} is not an observation field (fields: {fields})")
        self.normalizer = ObsNormalizer(observation_space) if config.obs_norm else None
        if self.normalizer is not None:
            observation_space = self.normalizer.output_space(observation_space)
        options = {"layers": config.board_layers, "channels": config.board_channels} if config.encoder == "board_cnn" else {}
        encoder = functools.partial(ENCODERS[config.encoder], **options)
        self.actor_encoder = encoder({k: observation_space[k] for k in self.actor_inputs})
        same_inputs = self.critic_inputs == self.actor_inputs
        #: The critic reads the actor's features (after the LSTM, if any): one shared encoder.
        self.critic_shares_actor = config.share_encoder and same_inputs
        # A parameter-free encoder (flatten) of the actor's inputs would give the critic exactly
        # the actor's encoding: it reads that instead of encoding twice (a tenth of a small forward pass).
        parameter_free = not any(True for _ in self.actor_encoder.parameters())
        own_encoder = not self.critic_shares_actor and not (same_inputs and parameter_free)
        self.critic_encoder = encoder({k: observation_space[k] for k in self.critic_inputs}) if own_encoder else None
        act = nn.Tanh if config.activation == "tanh" else nn.ReLU
        self.memory = nn.LSTM(self.actor_encoder.out_dim, config.lstm) if config.lstm else None
        features = config.lstm or self.actor_encoder.out_dim
        self.actor = MLP(features, config.hidden, act)
        critic_encoder = self.actor_encoder if self.critic_encoder is None else self.critic_encoder
        critic_in = features if self.critic_shares_actor else critic_encoder.out_dim
        self.critic = MLP(critic_in, config.hidden, act)
        self.value_head = nn.Linear(self.critic.out_dim, 1)
        nn.init.orthogonal_(self.value_head.weight, 1.0)
        nn.init.zeros_(self.value_head.bias)
        self.head = ActionHead(self.actor.out_dim, action_space, config.log_std_init)
        check_mask_space(observation_space, sum(self.head.nvec) or None)

    def forward(self, obs: dict[str, torch.Tensor], memory: Memory | None = None,
                starts: torch.Tensor | None = None) -> tuple[list[Distribution], torch.Tensor, Memory | None]:
        """`obs` fields shaped [N, ...]; returns the action distributions, values [N] and the next memory.

        With an LSTM, `memory` is (h, c) [B, width] and either N = B (one step per row) or,
        when `starts` [T, B] is given, N = T * B rows in time-major order (an unroll).
        """
        mask = mask_of(obs)  # as the env gave it, before any normalisation
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        encoded = self.actor_encoder({k: obs[k] for k in self.actor_inputs})
        features = encoded
        if self.memory is not None:
            features, memory = remember(self.memory, encoded, memory, starts)
        if self.critic_encoder is not None:
            critic_features = self.critic_encoder({k: obs[k] for k in self.critic_inputs})
        else:
            critic_features = features if self.critic_shares_actor else encoded
        dists = self.head(self.actor(features), mask)
        return dists, self.value_head(self.critic(critic_features)).squeeze(-1), memory


class ActingModule(nn.Module):
    """Deterministic acting with a net of its own (what `srl export` traces): observation fields
    positionally (the order of `fields`), then an LSTM's (h, c); returns the most likely action,
    then the next (h, c)."""

    def __init__(self, net: ActorCriticNet, fields: list[str]) -> None:
        super().__init__()
        self.net, self.fields = net, fields

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        obs = dict(zip(self.fields, inputs))
        memory = (inputs[-2], inputs[-1]) if self.net.memory is not None else None
        # The value is computed and dropped: ONNX prunes it, a TorchScript file keeps the
        # critic's few layers (one forward pass shared with training is worth that).
        dists, _, memory = self.net(obs, memory)
        action = self.net.head.sample(dists, deterministic=True)
        return action if memory is None else (action, *memory)


@dataclasses.dataclass
class _NumpyActorCritic:
    """A feed-forward actor-critic's acting pass in NumPy (srl/models/numpy_forward.py)."""

    #: Normalised fields: (field, running mean, 1 / std), float64 as `ObsNormalizer` computes.
    normalize: list[tuple[str, np.ndarray, np.ndarray]]
    clip: float
    actor: list[Layer]  # the torso, then the action head's linear
    critic: list[Layer]  # the torso, then the value head
    log_std: np.ndarray | None  # a Gaussian head's


class ActorCriticPolicy(NetPolicy):
    Config = ActorCriticConfig

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, device: str = "cpu",
                 **args: Any) -> None:
        self.config = ActorCriticConfig(**args)
        self.observation_space = observation_space
        self.device = torch.device(device)
        self.net = ActorCriticNet(observation_space, action_space, self.config).to(self.device)
        self.version = 0
        net = self.net
        #: A feed-forward net of flattened fields on the CPU acts in NumPy, drawing from its own
        #: generator (seeded from torch's, as workers seed it). (Exactly these modules: a subclass
        #: may compute otherwise.)
        lean = (self.device.type == "cpu" and type(net) is ActorCriticNet and net.memory is None
                and type(net.actor_encoder) is FlattenEncoder
                and (net.critic_encoder is None or type(net.critic_encoder) is FlattenEncoder))
        self._numpy = NumpyCopy(net, self._numpy_net) if lean else None
        self.rng = np.random.default_rng(int(torch.randint(1 << 62, ()))) if lean else None

    def _numpy_net(self) -> _NumpyActorCritic:
        net = self.net
        activation = ACTIVATIONS[self.config.activation]

        def layers(torso: MLP, head: nn.Linear) -> list[Layer]:
            return [*(torch_layer(linear, activation) for linear in torso.linears), torch_layer(head)]

        normalize, clip = [], 0.0
        if (norm := net.normalizer) is not None:
            used = {*net.actor_inputs, *net.critic_inputs}
            normalize = [(k, getattr(norm, f"{k}_mean").numpy().copy(),
                          1.0 / np.sqrt(getattr(norm, f"{k}_var").numpy() + norm.eps)) for k in norm.fields if k in used]
            clip = norm.clip
        log_std = net.head.log_std.detach().numpy().copy() if not net.head.nvec else None
        return _NumpyActorCritic(normalize, clip, layers(net.actor, net.head.linear), layers(net.critic, net.value_head), log_std)

    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        if self._numpy is not None and self._numpy.follows(self.net):
            return self._numpy_rollout(obs, deterministic)
        return self._torch_rollout(obs, state, deterministic)

    def _numpy_rollout(self, obs: NamedArray, deterministic: bool) -> NamedArray:
        numpy_net, net = self._numpy.get(), self.net
        fields = dict(obs) if numpy_net.normalize else obs
        for k, mean, inverse_std in numpy_net.normalize:
            fields[k] = np.clip((fields[k] - mean) * inverse_std, -numpy_net.clip, numpy_net.clip).astype(np.float32)
        actor_in = flatten_fields(fields, net.actor_encoder.fields)
        critic_in = actor_in if net.critic_encoder is None else flatten_fields(fields, net.critic_encoder.fields)
        action, logprob = net.head.sample_numpy(run_layers(numpy_net.actor, actor_in), numpy_net.log_std, self.rng,
                                                deterministic, mask_of(obs))
        value = run_layers(numpy_net.critic, critic_in)[:, 0]
        return NamedArray({keys.ACTION: action, keys.LOGPROB: logprob, keys.VALUE: value})

    @torch.inference_mode()
    def _torch_rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool) -> NamedArray:
        dists, value, memory = self.net(obs_tensors(obs, 1, self.device)[0], self._memory(state))
        action = self.net.head.sample(dists, deterministic)
        out = NamedArray({
            keys.ACTION: action.cpu().numpy(),
            keys.LOGPROB: self.net.head.log_prob(dists, action).cpu().numpy(),
            keys.VALUE: value.cpu().numpy(),
        })
        if memory is not None:
            out[keys.RNN_STATE] = NamedArray({"h": memory[0].cpu().numpy(), "c": memory[1].cpu().numpy()})
        return out

    def analyze(self, batch: Mapping[str, Any], entropy: bool = True) -> Analysis:
        """Log-prob of the taken action, entropy (if asked for) and value for rows of any leading shape.

        With an LSTM the rows are [T, B] (time-major) and `batch` also holds `keys.RNN_STATE`,
        the state each column's first row started from, and `keys.EPISODE_START` [T, B].
        """
        action = batch[keys.ACTION]
        lead = action.dim() - len(self.net.head.action_shape)
        obs, shape = obs_tensors(batch[keys.OBS], lead, self.device)
        if self.net.memory is None:
            dists, value, _ = self.net(obs)
        else:
            if lead != 2:
                raise ValueError(f"an LSTM policy analyzes [T, B] rows (time-major); got {lead} leading dims")
            dists, value, _ = self.net(obs, self._memory(batch[keys.RNN_STATE]), batch[keys.EPISODE_START])
        flat_action = action.reshape(-1, *self.net.head.action_shape)
        logprob = self.net.head.log_prob(dists, flat_action).reshape(shape)
        entropy_rows = self.net.head.entropy(dists).reshape(shape) if entropy else None
        return Analysis(logprob, entropy_rows, value.reshape(shape))

    def update_statistics(self, obs: NamedArray) -> None:
        if self.net.normalizer is not None:
            self.net.normalizer.update(obs)

    def acting_module(self) -> ActingModule:
        """A CPU copy of the net that acts deterministically (later training does not change it)."""
        return ActingModule(copy.deepcopy(self.net).cpu().eval(), list(self.observation_space.spaces))
