"""What the tests share (one place instead of imports from conftest and from other test modules): namespace
hosts, the PaddleClas and PaddleX references, a weight server, a Slurm cluster, the multi-host runs' helpers."""
