"""The action heads' own categorical agrees with torch.distributions and samples the right frequencies."""

from __future__ import annotations

import torch

from srl.models.distributions import Categorical


def test_log_prob_entropy_and_mode_match_torch():
    logits = torch.randn(32, 5, generator=torch.Generator().manual_seed(0)) * 3
    ours, theirs = Categorical(logits), torch.distributions.Categorical(logits=logits)
    action = torch.randint(0, 5, (32,), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ours.log_prob(action), theirs.log_prob(action))
    torch.testing.assert_close(ours.entropy(), theirs.entropy())
    assert torch.equal(ours.mode(), logits.argmax(-1))


def test_samples_follow_the_probabilities():
    torch.manual_seed(0)
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0])
    n = 200_000
    counts = torch.bincount(Categorical(logits.expand(n, 4)).sample(), minlength=4).double() / n
    # Binomial standard error is at most 0.0012 here: 0.006 is five of them.
    torch.testing.assert_close(counts, torch.softmax(logits, 0).double(), atol=0.006, rtol=0)


def test_an_impossible_action_is_never_drawn_and_adds_no_entropy():
    logits = torch.tensor([[0.0, float("-inf"), 0.0]]).expand(10_000, 3)
    dist = Categorical(logits)
    assert not (dist.sample() == 1).any()
    torch.testing.assert_close(dist.entropy(), torch.full((10_000,), float(torch.log(torch.tensor(2.0)))))
