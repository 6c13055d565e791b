"""Experience replay, as pure compute: storage, n-step returns, prioritized sampling.

The buffer worker (`srl.workers.buffer`) is the shell around `ReplayBuffer`.
"""
