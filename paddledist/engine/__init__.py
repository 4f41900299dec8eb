"""The training engine that runs inside each worker: trainer loop, hooks, checkpoints, metrics, gradient exchange."""
