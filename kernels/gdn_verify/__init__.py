"""GDN speculative-verification kernels (store-all, TreeWY) and their float64 references."""

from .conv_tree import conv_tree_commit, conv_tree_update
from .policy import DEFAULT_POLICY, LaunchPolicy
from .reference import (
    commit_reference,
    conv_state_commit_reference,
    conv_tree_reference,
    recurrence_reference,
    replay_state_reference,
    treewy_reference,
)
from .replay import (
    ReplayRing,
    replay_append,
    replay_memory_bytes,
    replay_step,
    replay_step_bytes,
    replay_verify,
)
from .store_all import storeall_verify
from .tree import TreeSpec, chain_parent, parent_from_widths, validate_parent
from .treewy import treewy_commit, treewy_verify
from .treewy_fused import PendingCommit, treewy_deferred_verify, treewy_fused_verify_commit

__all__ = [
    "DEFAULT_POLICY",
    "LaunchPolicy",
    "PendingCommit",
    "ReplayRing",
    "TreeSpec",
    "chain_parent",
    "commit_reference",
    "conv_state_commit_reference",
    "conv_tree_commit",
    "conv_tree_reference",
    "conv_tree_update",
    "parent_from_widths",
    "recurrence_reference",
    "replay_append",
    "replay_memory_bytes",
    "replay_state_reference",
    "replay_step",
    "replay_step_bytes",
    "replay_verify",
    "storeall_verify",
    "treewy_commit",
    "treewy_deferred_verify",
    "treewy_fused_verify_commit",
    "treewy_reference",
    "treewy_verify",
    "validate_parent",
]
