"""What a trainer worker does, without the worker: pure compute objects (no sockets).

`Batcher` turns the trajectories that arrive into training batches (the staleness bound);
`Learner` owns the policy, the algorithm, versions, checkpoints and rollback. The trainer
worker (`srl.workers.trainer`) is a thin shell that feeds them from the sample stream and
publishes what they produce.
"""
