"""Cluster: the job's machines (Train.dist_ips with host names resolved, a master address, a platform's
variables), this machine's address and interface (from its interfaces), the ClusterPlan, and the job's control
plane in etcd (etcdjob.py: the meeting, leases, verdicts).

Imports nothing of paddle: it must start fast and work where paddle's GPU build is absent.
"""

from paddledist.cluster.addresses import validate_dist_ips
from paddledist.cluster.fingerprint import fingerprint
from paddledist.cluster.interfaces import LocalAddress, local_addresses
from paddledist.cluster.plan import ClusterPlan, plan
from paddledist.cluster.sources import machine_count

__all__ = ["ClusterPlan", "LocalAddress", "fingerprint", "local_addresses", "machine_count", "plan",
           "validate_dist_ips"]
