"""Search over learned models: batched Monte Carlo tree search (MuZero)."""
