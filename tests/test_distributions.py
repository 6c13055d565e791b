"""The action heads' own distributions agree with torch.distributions and sample the right frequencies."""

from __future__ import annotations

import torch

from srl.models.distributions import Categorical, DiagonalNormal


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


def test_diagonal_normal_matches_torch_summed_over_dims():
    g = torch.Generator().manual_seed(2)
    mean, log_std = torch.randn(32, 6, generator=g), torch.randn(6, generator=g) * 0.5
    action = torch.randn(32, 6, generator=g) * 2
    ours, theirs = DiagonalNormal(mean, log_std), torch.distributions.Normal(mean, log_std.exp().expand_as(mean))
    torch.testing.assert_close(ours.log_prob(action), theirs.log_prob(action).sum(-1))
    torch.testing.assert_close(ours.entropy(), theirs.entropy().sum(-1))
    assert torch.equal(ours.mode(), mean)


def test_diagonal_normal_gradients_match_torch():
    g = torch.Generator().manual_seed(3)
    action = torch.randn(16, 3, generator=g)
    grads = []
    for make in (lambda m, s: DiagonalNormal(m, s),
                 lambda m, s: _SummedTorchNormal(torch.distributions.Normal(m, s.exp().expand_as(m)))):
        mean = torch.randn(16, 3, generator=torch.Generator().manual_seed(4)).requires_grad_()
        log_std = torch.full((3,), -0.5, requires_grad=True)
        dist = make(mean, log_std)
        (dist.log_prob(action).mean() + 0.1 * dist.entropy().mean()).backward()
        grads.append((mean.grad, log_std.grad))
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs)


class _SummedTorchNormal:
    def __init__(self, dist: torch.distributions.Normal) -> None:
        self.dist = dist

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(action).sum(-1)

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy().sum(-1)


def test_diagonal_normal_samples_have_its_mean_and_spread():
    torch.manual_seed(0)
    mean, log_std = torch.tensor([1.0, -2.0]), torch.tensor([0.0, -1.0])
    samples = DiagonalNormal(mean.expand(200_000, 2), log_std).sample()
    # Standard errors are at most 0.0023 (mean) and 0.0016 (std): 0.012 is five of them.
    torch.testing.assert_close(samples.mean(0), mean, atol=0.012, rtol=0)
    torch.testing.assert_close(samples.std(0), log_std.exp(), atol=0.012, rtol=0)
