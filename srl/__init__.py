"""SRL: a dataflow reinforcement-learning system that scales from a laptop to a cluster."""

__version__ = "0.1.0"
