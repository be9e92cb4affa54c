"""Errors of the local Slurm cluster."""


class SlurmUnavailable(Exception):
    """Slurm cannot exist here (not root, no apt); tests skip with this reason."""


class ClusterError(Exception):
    """The cluster did not come up or a client call failed; the message says where to look."""
