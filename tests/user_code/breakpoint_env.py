"""A Gymnasium CartPole that calls `breakpoint()` at its 50th step: what a user debugging an env writes."""

import gymnasium as gym


class BreakingCartPole(gym.Wrapper):
    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 50:
            breakpoint()  # noqa: T100  (the point of the test: a debugger stop inside an env)
        return super().step(action)
