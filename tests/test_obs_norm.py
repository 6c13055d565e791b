"""Observation normalisation (srl/models/encoders.py, ObsNormalizer): float fields, and uint8
images pixel by pixel, from running statistics the trainer updates and the weights carry."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from srl.data.named_array import NamedArray
from srl.models.actor_critic import ActorCriticPolicy

IMAGE = gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)})


BACKGROUND = np.random.default_rng(42).integers(40, 60, (4, 84, 84), dtype=np.uint8)


def _screens(rng: np.random.Generator, n: int, background: np.ndarray = BACKGROUND) -> np.ndarray:
    """A static background (a different grey per pixel) with one bright square moving over it."""
    screens = np.repeat(background[None], n, axis=0)
    for i in range(n):
        y, x = rng.integers(0, 80, 2)
        screens[i, :, y:y + 4, x:x + 4] = 236
    return screens


def test_images_are_normalised_per_pixel_so_the_background_vanishes_and_what_moves_stands_out():
    rng = np.random.default_rng(0)
    policy = ActorCriticPolicy(IMAGE, gym.spaces.Discrete(6), encoder="nature_cnn", share_encoder=True, hidden=[],
                               obs_norm=True)
    norm = policy.net.normalizer
    assert norm.images == {"obs"}
    screens = _screens(rng, 600)  # more rows than a chunk of the statistics, which are taken chunk by chunk
    policy.update_statistics(NamedArray({"obs": screens}))
    exact = screens.astype(np.float64)
    np.testing.assert_allclose(norm.obs_mean.numpy(), exact.mean(0), atol=1e-3)
    np.testing.assert_allclose(norm.obs_var.numpy(), exact.var(0), rtol=1e-6, atol=1e-3)
    fresh = _screens(rng, 8)
    out = norm({"obs": torch.as_tensor(fresh)})["obs"]
    assert out.dtype == torch.float32
    background = fresh[0, 0] == fresh[1, 0]  # pixels that did not move between two screens
    assert out[0, 0][torch.as_tensor(background)].abs().mean() < 0.5
    assert out.max() > 5.0  # the square, rare at any one pixel, is several spreads above its mean
    assert out.abs().max() <= norm.clip
    # The CNN takes the normalised values as they are, not scaled again from pixels.
    assert policy.net.actor_encoder.scale == 1.0
    acted = policy.rollout(NamedArray({"obs": fresh}), policy.initial_state(8))
    assert acted["action"].shape == (8,) and np.isfinite(acted["value"]).all()


def test_the_image_statistics_travel_with_the_weights():
    rng = np.random.default_rng(1)
    make = lambda: ActorCriticPolicy(IMAGE, gym.spaces.Discrete(6), encoder="nature_cnn", share_encoder=True,  # noqa: E731
                                     hidden=[], obs_norm=True)
    trainer, actor = make(), make()
    trainer.update_statistics(NamedArray({"obs": _screens(rng, 64)}))
    actor.set_params(trainer.get_params(), 1)
    screens = torch.as_tensor(_screens(rng, 4))
    torch.testing.assert_close(actor.net.normalizer({"obs": screens})["obs"],
                               trainer.net.normalizer({"obs": screens})["obs"])


def test_without_obs_norm_images_are_scaled_from_pixels_as_before():
    policy = ActorCriticPolicy(IMAGE, gym.spaces.Discrete(6), encoder="nature_cnn", share_encoder=True, hidden=[])
    assert policy.net.normalizer is None and policy.net.actor_encoder.scale == 1 / 255


def test_a_channels_last_cnn_goes_on_the_wire_contiguous_and_loads_back_exactly():
    from srl.models.actor_critic import load_module_params, module_params
    from srl.models.cnn import NatureCNN

    spaces = {"obs": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)}
    torch.manual_seed(0)
    source, target = NatureCNN(spaces), NatureCNN(spaces)
    assert source.convs[0].weight.is_contiguous(memory_format=torch.channels_last)
    params = module_params(source)
    assert all(leaf.flags.c_contiguous for _, leaf in params.items_flat())
    load_module_params(target, params)
    image = {"obs": torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8)}
    assert torch.equal(source(image), target(image))
